//! `open_config`: the runtime an `envrt.toml` describes, through `envrt::config`, the same
//! way the `envrt` command-line tool assembles it (the store in the state directory, so
//! the CLI sees the leases the package makes, and back).

use std::collections::BTreeMap;
use std::path::PathBuf;

use envrt::config::{Assembly, ConfigError, Paths};
use pyo3::prelude::*;

use crate::errors::{native, runtime_error};
use crate::runtime::NativeRuntime;

fn config_error(error: ConfigError) -> PyErr {
    match error {
        ConfigError::Runtime(error) => runtime_error(error),
        ConfigError::Invalid(message) => native("invalid_config", &message, None),
        other => native("config", &other.to_string(), None),
    }
}

/// What `open_config` hands back: the runtime, the tenant, the default environment, the
/// default TTL and the default idle timeout (seconds) per environment, the state
/// directory, and the drivers that could not be set up with why.
type Opened = (
    NativeRuntime,
    String,
    String,
    BTreeMap<String, f64>,
    BTreeMap<String, f64>,
    PathBuf,
    Vec<(String, String)>,
);

/// Loads `config` (`None`: `$ENVRT_CONFIG`, else `./envrt.toml` when present) with its
/// state directory (`None`: `$ENVRT_STATE_DIR`, else the XDG state directory), and builds
/// its runtime. `driver` names a driver the caller is about to use, so it is set up even
/// when no configured environment needs it.
#[pyfunction]
#[pyo3(signature = (config=None, state_dir=None, driver=None))]
pub(crate) fn open_config(
    py: Python<'_>,
    config: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    driver: Option<String>,
) -> PyResult<Bound<'_, PyAny>> {
    let paths = Paths::resolve(config.as_deref(), state_dir.as_deref()).map_err(config_error)?;
    crate::rt::future_into_py(py, async move {
        let assembly = Assembly::open(&paths, driver.as_deref()).await.map_err(config_error)?;
        let ttls = assembly
            .config
            .ttls
            .iter()
            .map(|(id, ttl)| (id.clone(), ttl.as_secs_f64()))
            .collect();
        let idles = assembly
            .config
            .idle_timeouts
            .iter()
            .map(|(id, idle)| (id.clone(), idle.as_secs_f64()))
            .collect();
        let skipped = assembly
            .skipped
            .iter()
            .map(|s| (s.key.clone(), s.error.to_string()))
            .collect();
        let opened: Opened = (
            NativeRuntime::from_shared(assembly.runtime),
            assembly.config.company.clone(),
            assembly.config.default_environment.clone(),
            ttls,
            idles,
            paths.state_dir,
            skipped,
        );
        Ok(opened)
    })
}
