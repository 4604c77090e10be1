//! The host side: the worker manager (spawn, handshake, calls, restarts, shutdown), the
//! `sandbox` driver over it, and duplex routes.

mod channel;
mod connection;
mod dataplane;
mod driver;
mod error;
mod exec_stdin;
mod fds;
mod manifest;
mod options;
mod post_upload;
mod process;
mod reference;
mod routes;
mod supervisor;
mod sync_out;
mod tail;

#[doc(hidden)]
pub mod fuzzing;
pub use driver::{DEFAULT_DRIVER_KEY, SandboxDriver};
pub use error::SandboxError;
pub use exec_stdin::STREAM_STDIN_OVER;
pub use manifest::{DriverKind, EnvironmentDriverEntry, PluginManifest, WorkerCommand};
pub use options::{DEFAULT_MAX_REQUEST_BYTES, MAX_STDIN_BYTES, ParentDeathSignal, RestartPolicy, SandboxOptions};
pub use reference::{REFERENCE_WORKER_BINARY, reference_manifest};
pub use routes::{DEFAULT_ROUTE_CEILING, DuplexLimits, RouteSlots};
