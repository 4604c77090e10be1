//! `envrt.toml` and the runtime it describes (feature `config`).
//!
//! [`Paths`] says where the configuration file and the state directory are, [`Config`]
//! is the parsed file, and [`Assembly::open`] builds the runtime from them: the SQLite
//! lease store in the state directory, every driver this build enables (each configured
//! by its descriptor from its own sections of the file: the local workspace root, the
//! Docker host, the plugins), and the configured environments recorded in the store. The `envrt` command-line tool is one user; a host
//! program (a Python package, a service) loads the same file the same way, and may start
//! the file's warm pools with [`Assembly::start_pools`]. Dropping the assembly (the last
//! handle on its runtime) stops those pools and releases their ready leases on a
//! multi-thread tokio runtime; a current-thread runtime only gets the release spawned, and
//! leases handed out are never released by a drop (see [`Assembly::start_pools`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), envrt::config::ConfigError> {
//! use envrt::config::{Assembly, Paths};
//! let paths = Paths::resolve(Some("envrt.toml".as_ref()), Some("/var/lib/envrt".as_ref()))?;
//! let assembly = Assembly::open(&paths, None).await?;
//! assembly.start_pools()?;
//! // ... acquire leases through assembly.runtime ...
//! assembly.runtime.stop_pools().await;
//! # Ok(())
//! # }
//! ```

mod assemble;
mod compat;
mod duration;
mod file;
mod idle;
mod network;
mod pool;
mod processes;
mod ready;

pub use assemble::{Assembly, open_store};
// Empty in a build without those drivers.
#[allow(unused_imports, unreachable_pub)]
pub use compat::*;
pub use duration::{DurationError, parse_duration};
pub use envrt_runtime_core::descriptor::find_in_path;
pub use file::{Config, IMPLICIT_LOCAL, Paths, Settings};
pub use pool::MAX_POOL_SIZE;

use envrt_runtime_core::{RuntimeError, StoreError};

/// Why a configuration could not be loaded or its runtime assembled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file or a location is wrong (the message says which and why): fix the input.
    #[error("{0}")]
    Invalid(String),
    /// Something the assembly needs could not be done (creating the state directory).
    #[error("{0}")]
    Failure(String),
    /// The lease store or the runtime failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

impl From<StoreError> for ConfigError {
    fn from(e: StoreError) -> Self {
        ConfigError::Runtime(RuntimeError::Store(e))
    }
}
