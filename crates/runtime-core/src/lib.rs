//! # envrt-runtime-core
//!
//! The heart of envrt: the [`EnvironmentDriver`] trait with its optional groups, the
//! [`EnvironmentRuntime`] facade that checks every operation in the contract's order and
//! refuses with exact, typed [`RuntimeError`]s, the nine-key capability model with its
//! [`classify`](capability::classify) function, and the data model of leases and
//! environments.
//!
//! ```
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

pub mod archive;
pub mod capability;
pub mod config_keys;
pub mod descriptor;
pub mod driver;
pub mod error;
pub mod execute;
pub mod model;
pub mod plugin_state;
mod runtime;
pub mod secret;
pub mod sparse;
pub mod store;
pub mod sync;
pub mod template;
pub mod testkit;
mod time;
pub mod tree;

pub use capability::{Capabilities, CapabilityDeclaration, CapabilityKey, CapabilitySnapshot};
pub use driver::{
    AcquireInput, CapabilityInput, DestroyLease, DuplexChannel, DuplexChannels, DuplexExit, EnvironmentDriver, Execute,
    FileSync, InventoryItem, LeaseContext, LeaseGrant, PathScope, RealizeWorkspace, RealizedWorkspace, Recovery,
    ReleaseInput, ResumeLease, WorkspaceRequest,
};
pub use error::{DriverError, RuntimeError, StoreError, UnsupportedOperation};
pub use execute::{CappedBuffer, ExecuteRequest, ExecuteResult, OutputKeep, OutputSink, OutputStream};
pub use model::{CleanupStatus, Environment, EnvironmentStatus, JsonMap, Lease, LeasePolicy, LeaseStatus, Timestamp};
pub use plugin_state::{MemoryStateStore, PluginStateStore, StateKey};
pub use runtime::{
    AcquireRequest, DriverItem, EnvironmentRuntime, LeaseFailure, POOLED_KEY, PoolSpec, PoolStatus, RECONCILE_SETTLE,
    ReconcileReport, ReleaseReport, SOURCE_TEMPLATE_KEY,
};
pub use secret::{EnvValue, Secret};
pub use store::{LeaseFilter, LeaseStore, MemoryStore};
pub use sync::{SyncFile, SyncKind, SyncOperation, SyncOperationResult, SyncResult};
pub use template::{TemplateRef, Templates};
