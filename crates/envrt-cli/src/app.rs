//! The runtime as the tool sees it: the configured environments in the SQLite store, every
//! driver this build enables, and lease helpers shared by the subcommands.

use std::sync::Arc;

use envrt::sqlite::holder::Holder;
use envrt::{
    AcquireRequest, Environment, EnvironmentRuntime, JsonMap, Lease, LeasePolicy, LeaseStatus, LeaseStore,
    RuntimeBuilder, RuntimeError, SkippedDriver, SqliteStore,
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

/// The label that scopes the Docker containers of one state directory, so `gc` only
/// reaps containers leased through this store.
pub(crate) const STATE_LABEL: &str = "envrt.cli-state";

/// The Docker driver's configuration: the configured host, labelled with the state dir.
pub(crate) fn docker_config(paths: &Paths, config: &Config) -> envrt::docker::DockerConfig {
    let mut docker = envrt::docker::DockerConfig {
        host: config.docker_host.clone(),
        ..Default::default()
    };
    docker
        .extra_labels
        .insert(STATE_LABEL.into(), paths.state_dir.display().to_string());
    docker
}

/// The reference worker: next to this executable, else on `PATH`.
pub(crate) fn reference_worker() -> Option<std::path::PathBuf> {
    const NAME: &str = envrt::plugin_sandbox::REFERENCE_WORKER_BINARY;
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(NAME)))
        .filter(|p| p.is_file());
    beside.or_else(|| crate::doctor::find_in_path(NAME))
}

/// The plugin manifest of the reference worker, leases under `<state dir>/sandbox`.
fn reference_manifest(worker: &std::path::Path, paths: &Paths) -> envrt::plugin_sandbox::PluginManifest {
    envrt::plugin_sandbox::reference_manifest(worker, &paths.state_dir.join("sandbox"))
}

/// The plugins to start: the configured ones, plus the reference worker when an
/// `needed` driver (environments configured or stored, `--driver`) is `sandbox` and no
/// plugin provides it. A plugin no needed driver uses is not started.
fn plugins(
    paths: &Paths,
    config: &Config,
    needed: &std::collections::BTreeSet<String>,
) -> Result<
    Vec<(
        envrt::plugin_sandbox::PluginManifest,
        envrt::plugin_sandbox::SandboxOptions,
    )>,
    CliError,
> {
    use envrt::plugin_sandbox::{PluginManifest, SandboxOptions};
    let mut out = Vec::new();
    for plugin in &config.plugins {
        let manifest = PluginManifest::load(&plugin.manifest)
            .map_err(|e| CliError::Usage(format!("envrt: plugin \"{}\": {e}", plugin.manifest.display())))?;
        let options = SandboxOptions {
            driver_key: plugin.driver_key.clone(),
            config: plugin.config.clone(),
            ..Default::default()
        };
        out.push((manifest, options));
    }
    let provided = |key: &str| {
        out.iter().any(|(m, o): &(PluginManifest, SandboxOptions)| {
            o.driver_key.as_deref() == Some(key) || m.environment_drivers.iter().any(|d| d.driver_key == key)
        })
    };
    let default_key = envrt::plugin_sandbox::DEFAULT_DRIVER_KEY;
    if needed.contains(default_key)
        && !provided(default_key)
        && let Some(worker) = reference_worker()
    {
        out.push((reference_manifest(&worker, paths), SandboxOptions::default()));
    }
    // Only start workers some environment uses.
    out.retain(|(m, o)| needed.contains(&m.driver_key(o.driver_key.as_deref())));
    Ok(out)
}

impl App {
    /// Loads the configuration, opens the store, registers the drivers and records the
    /// configured environments in the store.
    pub(crate) async fn open(paths: &Paths) -> Result<App, CliError> {
        Self::open_for(paths, None).await
    }

    /// Like [`open`](Self::open), also setting up driver `extra` (from `--driver`). A
    /// driver that needs a connection or a worker (docker, plugins) is set up only when an
    /// environment (configured, or recorded in the store) or `extra` uses it.
    pub(crate) async fn open_for(paths: &Paths, extra: Option<&str>) -> Result<App, CliError> {
        let config = Config::load(paths)?;
        let store = open_store(paths).await?;
        let mut needed: std::collections::BTreeSet<String> =
            config.environments.iter().map(|e| e.driver.clone()).collect();
        needed.extend(store.list_environments().await?.into_iter().map(|e| e.driver));
        needed.extend(extra.map(str::to_owned));
        let mut builder = RuntimeBuilder::new().store(Arc::new(store));
        if !needed.contains("docker") {
            builder = builder.without_driver("docker");
        }
        let builder = builder.local_config(envrt::local::LocalConfig {
            root: Some(config.local_root.clone()),
            ..Default::default()
        });
        let builder = builder.docker_config(docker_config(paths, &config));
        let mut builder = builder;
        for (manifest, options) in plugins(paths, &config, &needed)? {
            builder = builder.sandbox_plugin(manifest, options);
        }
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

    /// Acquires a lease on `environment_id` held by `holder` (none: gc never touches it),
    /// expiring after `ttl`, else after the environment's configured `ttl`, else never.
    pub(crate) async fn acquire(
        &self,
        environment_id: &str,
        policy: LeasePolicy,
        run_id: Option<String>,
        holder: Option<Holder>,
        ttl: Option<std::time::Duration>,
        purpose: &str,
    ) -> Result<Lease, CliError> {
        let ttl = ttl.or_else(|| self.config.ttls.get(environment_id).copied());
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
            requested_expires_at: ttl.map(|ttl| envrt::Timestamp::now().after(ttl)),
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
