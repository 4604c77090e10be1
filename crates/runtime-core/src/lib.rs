//! # envrt-runtime-core
//!
//! The runtime of envrt: the [`EnvironmentRuntime`] facade that checks every operation in
//! the contract's order and refuses with exact, typed [`RuntimeError`]s, its capability
//! gate, lease pools, reconcile and template orchestration, and the lease store
//! ([`LeaseStore`], [`MemoryStore`]). It runs on tokio.
//!
//! What a driver implements and returns (the [`EnvironmentDriver`] trait with its
//! optional groups, the model, the capability table with its
//! [`classify`](capability::classify) function, errors, descriptors, requests and their
//! [`validate`](ExecuteRequest::validate)) lives in the runtime-free `envrt-driver-api`,
//! and the drivers' file helpers in `envrt-driver-files`; this crate re-exports both at
//! the paths they always had (`envrt_runtime_core::driver::EnvironmentDriver`,
//! `envrt_runtime_core::error::DriverError`, `envrt_runtime_core::archive`, ...), so code
//! written against it keeps compiling. A driver crate needs only the driver API.
//!
//! The test driver (`testkit::ProbeDriver`) is behind the `testkit`
//! feature, off by default.
//!
#![cfg_attr(feature = "testkit", doc = "```")]
#![cfg_attr(not(feature = "testkit"), doc = "```ignore")]
//! use std::sync::Arc;
//! use envrt_runtime_core::{AcquireRequest, Environment, EnvironmentRuntime, ExecuteRequest};
//! use envrt_runtime_core::testkit::{ProbeDriver, ProbeShape};
//!
//! # tokio_test_block_on(async {
//! let runtime = EnvironmentRuntime::new();
//! runtime.register_driver(Arc::new(ProbeDriver::new("probe", ProbeShape::default(), None)));
//! runtime.put_environment(Environment::new("env-1", "Probe", "probe")).await?;
//! let lease = runtime.acquire_lease(AcquireRequest::new("env-1", "acme")).await?;
//! let err = runtime.execute(&lease.id, ExecuteRequest::new("true", [""; 0])).await.unwrap_err();
//! assert_eq!(err.to_string(), "Environment driver \"probe\" does not support command execution.");
//! # Ok::<(), envrt_runtime_core::RuntimeError>(())
//! # }).unwrap();
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

#![forbid(unsafe_code)]

// The driver API and the file helpers, at the paths they had before they moved out.
pub use envrt_driver_api::{
    capability, config_keys, descriptor, driver, error, execute, fault, model, network, plugin_state, process, secret,
    sync, template,
};
pub use envrt_driver_files::{archive, sparse, tree};

mod runtime;
pub mod store;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use envrt_driver_api::{
    AcquireInput, Capabilities, CapabilityDeclaration, CapabilityInput, CapabilityKey, CapabilitySnapshot,
    CappedBuffer, CleanupStatus, DestroyLease, DriverError, DuplexChannel, DuplexChannels, DuplexExit, EnvValue,
    Environment, EnvironmentDriver, EnvironmentStatus, Execute, ExecuteRequest, ExecuteResult, ExecuteRules,
    ExposePorts, ExtendLease, FileSync, ForkLease, IdleClock, IdleTimeout, InventoryItem, JsonMap, Lease, LeaseContext,
    LeaseGrant, LeasePolicy, LeaseStatus, NameRules, Offsets, OnIdle, OutputChunk, OutputEvent, OutputKeep, OutputSink,
    OutputStream, PathScope, PauseLease, ProcessError, ProcessId, ProcessInfo, ProcessOutput, ProcessSessions,
    ProcessStatus, ProcessStream, Readiness, RealizeWorkspace, RealizedWorkspace, Recovery, ReleaseInput, ResumeLease,
    RunnerIngress, RunnerIngressEndpoint, RuntimeError, Secret, SpawnRequest, StdinMode, StoreError, StreamInfo,
    SyncFile, SyncKind, SyncOperation, SyncOperationResult, SyncResult, TemplateRef, Templates, TerminationReceipt,
    TerminationState, Timestamp, TtySize, UnsupportedOperation, Wording, WorkspaceRequest,
};
pub use envrt_driver_api::{MemoryStateStore, PluginStateStore, StateKey};
pub use runtime::{
    AcquireRequest, DriverItem, EXPOSE_MAX_CONNECTIONS, EXPOSE_MAX_ENDPOINTS, EXPOSE_TOKEN_WAIT, EndpointAddress,
    EnvironmentRuntime, ExposeAt, ExposedEndpoint, FINGERPRINT_KEY, IDLE_TIMEOUT_KEY, LABELS_KEY, LeaseFailure,
    LeaseSelector, MAX_READY_TIMEOUT, MAX_READY_WORDS, MAX_SCOPE_BYTES, ON_IDLE_KEY, PAUSED_KEY, POOLED_KEY, PoolSpec,
    PoolStatus, ProcessOutputStream, RECONCILE_SETTLE, ReconcileReport, ReleaseReport, Reuse, SCOPE_KEY,
    SCOPE_OUTCOME_KEY, SOURCE_TEMPLATE_KEY, ScopeOutcome, TERMINATION_RECEIPT_KEY, idle_timeout, is_paused, paused_at,
};
pub use store::{LeaseFilter, LeaseStore, MemoryStore, ScopeGuard};
