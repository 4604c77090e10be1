//! # envrt-driver-api
//!
//! What a driver crate depends on, and nothing more: the [`EnvironmentDriver`] trait with
//! its optional groups ([`Execute`], [`FileSync`], [`DuplexChannels`], [`Templates`], ...),
//! the data model of leases and environments, the nine-key capability table with its
//! [`classify`](capability::classify) function, the errors ([`DriverError`] for drivers,
//! [`RuntimeError`] for the facade, [`UnsupportedOperation`] for refusals), driver
//! [`descriptor`]s, the execute, sync and template request and result types,
//! [`Secret`]s, the [`PluginStateStore`] a plugin host keeps its workers' state in, and the
//! one check of an execute request, [`ExecuteRequest::validate`].
//!
//! The shape is tower-service's: small, stable, documented, and free of any async runtime
//! (no tokio). The runtime that drives these traits (the `EnvironmentRuntime` facade, its
//! gate, pools, reconcile and template orchestration, the lease store) is
//! `envrt-runtime-core`, a crate on top of this one that re-exports every item here at the
//! same path; the file helpers drivers share (the sync-out tar extractor, sparse copies,
//! tree walks) are `envrt-driver-files`.
//!
//! ```
//! use envrt_driver_api::{DriverError, EnvValue, ExecuteRequest, ExecuteRules, NameRules, Wording};
//!
//! let mut request = ExecuteRequest::new("ls", ["-l"]);
//! assert!(request.validate(NameRules::Portable).is_ok());
//! request.env.insert("A-B".into(), EnvValue::from("x"));
//! assert!(request.validate(NameRules::Portable).is_ok());
//! let err: DriverError = request.validate(NameRules::Shell).unwrap_err();
//! assert_eq!(err.to_string(), "Invalid input: environment variable name \"A-B\" is not valid");
//! let err = request.validate(ExecuteRules::new(NameRules::Shell, Wording::Sentence)).unwrap_err();
//! assert_eq!(err.to_string(), "Invalid input: Environment variable name \"A-B\" is not valid.");
//! ```

#![forbid(unsafe_code)]

pub mod capability;
pub mod config_keys;
pub mod descriptor;
pub mod driver;
pub mod error;
pub mod execute;
pub mod fault;
pub mod model;
pub mod network;
pub mod plugin_state;
pub mod process;
pub mod secret;
pub mod sync;
pub mod template;
mod time;

pub use capability::{Capabilities, CapabilityDeclaration, CapabilityKey, CapabilitySnapshot};
pub use driver::{
    AcquireInput, CapabilityInput, DestroyLease, DuplexChannel, DuplexChannels, DuplexExit, EnvironmentDriver, Execute,
    ExposePorts, ExtendLease, FileSync, ForkLease, IdleClock, IdleTimeout, InventoryItem, LeaseContext, LeaseGrant,
    OnIdle, PathScope, PauseLease, ProbeAnswer, ProcessOutput, ProcessSessions, RealizeWorkspace, RealizedWorkspace,
    Recovery, ReleaseInput, ResumeLease, RunnerIngress, RunnerIngressEndpoint, WorkspaceRequest,
};
pub use error::{DriverError, RuntimeError, StoreError, UnsupportedOperation};
pub use execute::{
    CappedBuffer, ExecuteRequest, ExecuteResult, ExecuteRules, NameRules, OutputKeep, OutputSink, OutputStream, Wording,
};
pub use model::{
    CleanupStatus, Environment, EnvironmentStatus, JsonMap, Lease, LeasePolicy, LeaseStatus, Readiness,
    TerminationReceipt, TerminationState, Timestamp,
};
pub use plugin_state::{MemoryStateStore, PluginStateStore, StateKey};
pub use process::{
    Offsets, OutputChunk, OutputEvent, ProcessError, ProcessId, ProcessInfo, ProcessStatus, ProcessStream,
    SpawnRequest, StdinMode, StreamInfo, TtySize,
};
pub use secret::{EnvValue, Secret};
pub use sync::{SyncFile, SyncKind, SyncOperation, SyncOperationResult, SyncResult};
pub use template::{SOURCE_TEMPLATE_KEY, TemplateRef, Templates};
