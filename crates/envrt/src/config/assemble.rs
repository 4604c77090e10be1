//! The runtime a configuration describes: the SQLite store in the state directory, every
//! driver this build enables (through its descriptor, with the settings it read from the
//! file; set up only when an environment uses it, for those that need a connection or a
//! worker), the configured environments in the store, and the configured warm pools.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use envrt_runtime_core::{EnvironmentRuntime, LeaseStore, PoolSpec};

use super::{Config, ConfigError, Paths};
use crate::builder::Assembling;
use crate::{RuntimeBuilder, SkippedDriver, SqliteStore};

/// A runtime assembled from a configuration.
#[derive(Debug)]
pub struct Assembly {
    /// The runtime, shared so that pools (which run on a background task) can hold it.
    pub runtime: Arc<EnvironmentRuntime>,
    /// The configuration it was built from.
    pub config: Config,
    /// Enabled drivers that could not be set up (an unreachable Docker engine, a plugin
    /// worker that would not start); the rest of the runtime works without them.
    pub skipped: Vec<SkippedDriver>,
}

/// Creates `dir` (mode 0700) when missing.
fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Opens the lease store in the state directory (creating the directory, mode 0700).
pub async fn open_store(paths: &Paths) -> Result<SqliteStore, ConfigError> {
    ensure_private_dir(&paths.state_dir).map_err(|e| {
        ConfigError::Failure(format!(
            "envrt: cannot create the state directory \"{}\": {e}",
            paths.state_dir.display()
        ))
    })?;
    Ok(SqliteStore::open(paths.database()).await?)
}

/// A configured environment its driver refused (an unknown `[environment.config]` key):
/// `envrt: config "{file}": environment "{id}": {reason}`; other failures as they are.
fn refused_environment(paths: &Paths, id: &str, error: envrt_runtime_core::RuntimeError) -> ConfigError {
    match error {
        envrt_runtime_core::RuntimeError::Driver(envrt_runtime_core::DriverError::InvalidInput { message }) => {
            ConfigError::Invalid(format!(
                "envrt: config \"{}\": environment \"{id}\": {message}",
                paths.config.as_deref().unwrap_or(Path::new("")).display()
            ))
        }
        envrt_runtime_core::RuntimeError::Network(refusal) => ConfigError::Invalid(format!(
            "envrt: config \"{}\": environment \"{id}\": {refusal}",
            paths.config.as_deref().unwrap_or(Path::new("")).display()
        )),
        other => other.into(),
    }
}

impl Assembly {
    /// Loads the configuration, opens the store, registers the drivers and records the
    /// configured environments in the store. A driver that needs a connection or a worker
    /// (docker, plugins) is set up only when an environment (configured, or recorded in
    /// the store) or `extra` (a driver key the caller is about to use) needs it.
    pub async fn open(paths: &Paths, extra: Option<&str>) -> Result<Assembly, ConfigError> {
        let config = Config::load(paths)?;
        Self::open_with(paths, config, extra).await
    }

    /// Like [`open`](Self::open), with a configuration already loaded.
    pub async fn open_with(paths: &Paths, config: Config, extra: Option<&str>) -> Result<Assembly, ConfigError> {
        let store = open_store(paths).await?;
        let mut needed: BTreeSet<String> = config.environments.iter().map(|e| e.driver.clone()).collect();
        needed.extend(store.list_environments().await?.into_iter().map(|e| e.driver));
        needed.extend(extra.map(str::to_owned));
        let plugin_state: Arc<dyn envrt_runtime_core::PluginStateStore> = Arc::new(store.clone());
        let mut builder = RuntimeBuilder::new()
            .store(Arc::new(store))
            .tenant(config.company.clone())
            .assembling(Assembling {
                state_dir: paths.state_dir.clone(),
                environments: config.environments.clone(),
                needed,
                plugin_state: Some(plugin_state),
            });
        for (key, settings) in &config.drivers {
            builder = builder.settings(key, settings.clone());
        }
        let (runtime, skipped) = builder
            .build_checked()
            .await
            .map_err(|(_, message, _)| ConfigError::Invalid(message))?;
        for environment in &config.environments {
            runtime
                .put_environment(environment.clone())
                .await
                .map_err(|e| refused_environment(paths, &environment.id, e))?;
        }
        Ok(Assembly {
            runtime: Arc::new(runtime),
            config,
            skipped,
        })
    }

    /// The warm pools the configuration declares (`[environment.pool]`), each for the
    /// configured tenant, with ephemeral leases held by this process (`holderPid` +
    /// `holderStartTime`, as the CLI's leases are), so that `envrt gc` releases the pool's
    /// leases once this process is gone.
    pub fn pool_specs(&self) -> Vec<PoolSpec> {
        let mut metadata = envrt_runtime_core::JsonMap::new();
        metadata.insert("acquiredBy".into(), "envrt pool".into());
        if let Ok(holder) = crate::sqlite::holder::Holder::current() {
            holder.write_to(&mut metadata);
        }
        self.config
            .pools
            .iter()
            .map(|(environment, size)| {
                let mut spec = PoolSpec::new(environment.clone(), self.config.company.clone(), *size);
                spec.metadata = metadata.clone();
                spec
            })
            .collect()
    }

    /// Starts every pool of [`pool_specs`](Self::pool_specs) (needs a running tokio
    /// runtime). The pools fill in the background; an acquire on a pooled environment for
    /// the configured tenant, with the ephemeral policy and no requested cwd or expiry,
    /// gets a ready lease. Stop them with
    /// [`EnvironmentRuntime::stop_pools`], which releases every ready lease. Dropping the
    /// last handle on the runtime (the assembly, on an early `?` return) stops them as well,
    /// best-effort: on a multi-thread tokio runtime the drop releases every ready lease
    /// before it returns; on a current-thread runtime the release is only spawned; outside
    /// any runtime nothing is released. Leases already handed out are never released by a
    /// drop. Leases left by a process that died without stopping are found by `envrt gc`
    /// (their holder is gone).
    pub fn start_pools(&self) -> Result<Vec<PoolSpec>, ConfigError> {
        let specs = self.pool_specs();
        for spec in &specs {
            self.runtime.start_pool(spec.clone())?;
        }
        Ok(specs)
    }
}

#[cfg(all(test, not(feature = "plugin-sandbox")))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_plugin_without_the_plugin_sandbox_feature_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("envrt.toml");
        std::fs::write(&file, "[[plugin]]\nmanifest = \"plugin.json\"\n").unwrap();
        let paths = Paths {
            config: Some(file.clone()),
            state_dir: dir.path().join("state"),
        };
        let error = Assembly::open(&paths, None).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "envrt: config \"{}\": [[plugin]] needs the plugin-sandbox feature, which this build of envrt lacks",
                file.display()
            )
        );
    }
}
