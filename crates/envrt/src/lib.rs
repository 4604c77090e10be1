//! # envrt
//!
//! One API through which a program acquires a lease on an execution environment, runs
//! commands there, moves files in and out, and opens a live two-way byte channel to a
//! running command — the same [`EnvironmentRuntime`] for a local process, a Docker
//! container, or a sandbox whose driver runs as a plugin worker in another process.
//!
//! This is the facade crate: it re-exports [`envrt_runtime_core`] (as [`core`], with its
//! main items at the top level; the driver API and file helpers it re-exports in turn
//! are the runtime-free `envrt-driver-api` and `envrt-driver-files`), each driver behind
//! a cargo feature, the durable SQLite lease store, and a [`RuntimeBuilder`] that
//! registers every enabled driver. Each driver crate exports one descriptor
//! (`envrt::core::descriptor`); [`registry`] is the list of the enabled ones, and
//! everything here iterates it (see `docs/writing-a-driver.md`).
//!
//! ## Features
//!
//! | feature | default | gives |
//! |---|---|---|
//! | `local` | yes | [`local`]: commands as processes on this host (key `local`) |
//! | `docker` | no | `docker`: commands in Docker containers (key `docker`) |
//! | `plugin-sandbox` | no | `plugin_sandbox`: sandboxes run by a plugin worker (key `sandbox`) |
//! | `ssh` | no | `ssh`: private workspaces on remote hosts over SSH (key `ssh`) |
//! | `all-drivers` | no | all four drivers |
//! | `sqlite` | no | [`sqlite`]: leases that survive the process ([`SqliteStore`]) |
//! | `config` | no | [`config`]: `envrt.toml` and the runtime it describes (implies `sqlite`) |
//!
//! The default is the local driver alone, so a library pays only for what it uses. The
//! `envrt` command-line tool is its own crate (`envrt-cli`), which enables `config` and
//! every driver. Each driver crate (`envrt-driver-local`, …) also works on its own with
//! `envrt-runtime-core`, the runtime that drives it.
//!
//! ## Example
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use envrt::{AcquireRequest, Environment, ExecuteRequest, LeaseStatus, RuntimeBuilder};
//!
//! let runtime = RuntimeBuilder::new().build().await?;
//! runtime.put_environment(Environment::new("dev", "Dev box", "local")).await?;
//! let lease = runtime.acquire_lease(AcquireRequest::new("dev", "acme")).await?;
//! let result = runtime.execute(&lease.id, ExecuteRequest::new("uname", ["-a"])).await?;
//! println!("{}", String::from_utf8_lossy(&result.stdout));
//! runtime.release_lease(&lease.id, LeaseStatus::Released).await?;
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod builder;
mod compat;
#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
pub mod config;
pub mod files;
pub mod registry;

pub use builder::{BuildError, RuntimeBuilder, SkippedDriver};
pub use registry::known_drivers;

/// The core crate: the facade, its pools, reconcile and store, and (re-exported from
/// `envrt-driver-api` and `envrt-driver-files` at the same paths) the driver trait,
/// capabilities, errors, the data model and the drivers' file helpers.
pub use envrt_runtime_core as core;

pub use envrt_runtime_core::{
    AcquireInput, AcquireRequest, Capabilities, CapabilityKey, CapabilitySnapshot, CleanupStatus, DriverError,
    DuplexChannel, DuplexExit, EnvValue, Environment, EnvironmentDriver, EnvironmentRuntime, EnvironmentStatus,
    ExecuteRequest, ExecuteResult, JsonMap, Lease, LeaseFilter, LeasePolicy, LeaseStatus, LeaseStore, MemoryStore,
    OnIdle, OutputKeep, OutputSink, OutputStream, RuntimeError, Secret, StoreError, SyncFile, SyncKind, SyncOperation,
    SyncResult, Timestamp, UnsupportedOperation,
};

/// The local driver: commands run as processes on this host, one private workspace per
/// lease.
#[cfg(feature = "local")]
#[cfg_attr(docsrs, doc(cfg(feature = "local")))]
pub use envrt_driver_local as local;

/// The Docker driver: one container per lease.
#[cfg(feature = "docker")]
#[cfg_attr(docsrs, doc(cfg(feature = "docker")))]
pub use envrt_driver_docker as docker;

/// The plugin-backed sandbox driver: a worker process speaks the plugin protocol.
#[cfg(feature = "plugin-sandbox")]
#[cfg_attr(docsrs, doc(cfg(feature = "plugin-sandbox")))]
pub use envrt_driver_plugin_sandbox as plugin_sandbox;

/// The SSH driver: a private workspace on a remote host per lease, through the system
/// OpenSSH (one multiplexed connection per host).
#[cfg(feature = "ssh")]
#[cfg_attr(docsrs, doc(cfg(feature = "ssh")))]
pub use envrt_driver_ssh as ssh;

/// The durable SQLite lease store.
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use envrt_store_sqlite as sqlite;

/// A lease store in one SQLite file, safe for several processes.
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use envrt_store_sqlite::SqliteStore;
