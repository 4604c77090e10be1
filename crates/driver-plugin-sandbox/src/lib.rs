//! # envrt-driver-plugin-sandbox
//!
//! The `sandbox` driver: a sandbox provider runs as a plugin worker process and the host
//! talks to it with the Paperclip plugin worker protocol (newline-delimited JSON-RPC 2.0
//! on the worker's stdin and stdout; see `shared/spec/plugin-protocol.md`). A worker
//! written with `@paperclipai/plugin-sdk` runs under this driver unchanged.
//!
//! ```no_run
//! use envrt_driver_plugin_sandbox::{PluginManifest, SandboxDriver, SandboxOptions};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let manifest = PluginManifest::load("plugin.json")?;
//! let driver = SandboxDriver::start(manifest, SandboxOptions::default()).await?;
//! println!("worker serves {:?}", driver.supported_methods());
//! driver.shutdown().await;
//! # Ok(()) }
//! ```

pub mod host;
pub mod protocol;

pub use host::{
    DEFAULT_DRIVER_KEY, DuplexLimits, ParentDeathSignal, PluginManifest, RestartPolicy, RouteSlots, SandboxDriver,
    SandboxError, SandboxOptions,
};

/// The reference worker (bwrap), run by the `envrt-sandbox-worker` binary.
pub mod worker;
