//! The host side: the worker manager (spawn, handshake, calls, restarts, shutdown), the
//! `sandbox` driver over it, and duplex routes.

mod driver;
mod duplex;
mod error;
mod manifest;
mod network;
mod options;
mod package;
mod reference;
mod worker;
mod worker_calls;

#[doc(hidden)]
pub mod fuzzing;
pub use driver::{DEFAULT_DRIVER_KEY, SandboxDriver};
pub use duplex::exec_stdin::STREAM_STDIN_OVER;
pub use duplex::routes::{DEFAULT_ROUTE_CEILING, DuplexLimits, RouteSlots};
pub use error::SandboxError;
pub use manifest::{DriverKind, EnvironmentDriverEntry, PluginManifest, WorkerCommand};
pub use options::{DEFAULT_MAX_REQUEST_BYTES, MAX_STDIN_BYTES, ParentDeathSignal, RestartPolicy, SandboxOptions};
pub use reference::{REFERENCE_WORKER_BINARY, reference_manifest};
pub use worker_calls::{SUPPORTED_WORKER_METHODS, WorkerCallLimits, WorkerCallOptions};
