//! The runtime as the tool sees it: the configured environments in the SQLite store, every
//! driver this build enables, and lease helpers shared by the subcommands.

use std::sync::Arc;

use envrt::sqlite::holder::Holder;
use envrt::{
    AcquireRequest, Environment, EnvironmentRuntime, JsonMap, Lease, LeasePolicy, LeaseStatus, RuntimeBuilder,
    RuntimeError, SkippedDriver, SqliteStore,
};

use crate::Target;
use crate::config::{Config, Paths};
use crate::error::CliError;

/// An opened runtime.
pub(crate) struct App {
    pub(crate) runtime: EnvironmentRuntime,
    pub(crate) config: Config,
    pub(crate) skipped: Vec<SkippedDriver>,
}

/// Creates `dir` (mode 0700) when missing.
pub(crate) fn ensure_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Opens the lease store in the state directory.
pub(crate) async fn open_store(paths: &Paths) -> Result<SqliteStore, CliError> {
    ensure_private_dir(&paths.state_dir).map_err(|e| {
        CliError::Failure(format!(
            "envrt: cannot create the state directory \"{}\": {e}",
            paths.state_dir.display()
        ))
    })?;
    Ok(SqliteStore::open(paths.database()).await?)
}

impl App {
    /// Loads the configuration, opens the store, registers the drivers and records the
    /// configured environments in the store.
    pub(crate) async fn open(paths: &Paths) -> Result<App, CliError> {
        let config = Config::load(paths)?;
        let store = open_store(paths).await?;
        let builder = RuntimeBuilder::new().store(Arc::new(store));
        #[cfg(feature = "local")]
        let builder = builder.local_config(envrt::local::LocalConfig {
            root: Some(config.local_root.clone()),
            ..Default::default()
        });
        let (runtime, skipped) = builder.build_lenient().await;
        for environment in &config.environments {
            runtime.put_environment(environment.clone()).await?;
        }
        Ok(App {
            runtime,
            config,
            skipped,
        })
    }

    /// Fails with the set-up error when driver `key` is enabled but could not be set up
    /// (so the user sees why, not just "not registered").
    pub(crate) fn check_driver(&self, key: &str) -> Result<(), CliError> {
        match self.skipped.iter().find(|s| s.key == key) {
            Some(s) => Err(CliError::Failure(format!(
                "Environment driver \"{}\" could not be set up: {}",
                s.key, s.error
            ))),
            None => Ok(()),
        }
    }

    /// The environment `target` names: `--env-id`, else the first configured environment
    /// with `--driver`'s key (or an unconfigured one named after it), else the default.
    pub(crate) async fn environment_id(&self, target: &Target) -> Result<String, CliError> {
        if let Some(id) = &target.env_id {
            return Ok(id.clone());
        }
        if let Some(key) = &target.driver {
            if let Some(e) = self.config.environments.iter().find(|e| &e.driver == key) {
                return Ok(e.id.clone());
            }
            let adhoc = Environment::new(key.clone(), key.clone(), key.clone());
            if self.runtime.environment(key).await?.is_none() {
                self.runtime.put_environment(adhoc).await?;
            }
            return Ok(key.clone());
        }
        Ok(self.config.default_environment.clone())
    }

    /// The driver an environment uses, when it is known.
    pub(crate) async fn environment_driver(&self, id: &str) -> Result<Option<String>, CliError> {
        Ok(self.runtime.environment(id).await?.map(|e| e.driver))
    }

    /// Acquires a lease on `environment_id` held by `holder` (none: gc never touches it).
    pub(crate) async fn acquire(
        &self,
        environment_id: &str,
        policy: LeasePolicy,
        run_id: Option<String>,
        holder: Option<Holder>,
        purpose: &str,
    ) -> Result<Lease, CliError> {
        if let Some(driver) = self.environment_driver(environment_id).await? {
            self.check_driver(&driver)?;
        }
        let mut metadata = JsonMap::new();
        metadata.insert("acquiredBy".into(), purpose.into());
        if let Some(holder) = holder {
            holder.write_to(&mut metadata);
        }
        let request = AcquireRequest {
            environment_id: environment_id.to_owned(),
            company_id: self.config.company.clone(),
            run_id,
            policy,
            metadata,
            ..Default::default()
        };
        Ok(self.runtime.acquire_lease(request).await?)
    }

    /// Checks that lease `id` exists and that its driver was set up.
    pub(crate) async fn existing_lease(&self, id: &str) -> Result<Lease, CliError> {
        let lease = self
            .runtime
            .lease(id)
            .await?
            .ok_or_else(|| RuntimeError::LeaseNotFound { id: id.to_owned() })?;
        let environment = match &lease.environment_id {
            Some(e) => self.runtime.environment(e).await?,
            None => None,
        };
        let key = envrt::core::model::resolve_driver_key(&lease, environment.as_ref()).to_owned();
        self.check_driver(&key)?;
        Ok(lease)
    }

    /// Releases a lease this invocation acquired; a failure is reported on stderr (the
    /// lease stays `pending_cleanup` for `envrt gc`) but does not change the exit code.
    pub(crate) async fn release_own(&self, lease: &Lease, status: LeaseStatus) {
        if let Err(e) = self.runtime.release_lease(&lease.id, status).await {
            eprintln!("envrt: releasing lease {} failed: {e}", lease.id);
        }
    }
}
