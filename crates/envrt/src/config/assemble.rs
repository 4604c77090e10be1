//! The runtime a configuration describes: the SQLite store in the state directory, every
//! driver this build enables (set up only when an environment uses it, for those that
//! need a connection or a worker), the configured environments in the store, and the
//! configured warm pools.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use envrt_runtime_core::{EnvironmentRuntime, LeaseStore, PoolSpec};

use super::{Config, ConfigError, Paths};
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

/// The label that scopes the Docker containers of one state directory, so reconciliation
/// only reaps containers leased through this store.
#[cfg(feature = "docker")]
pub const STATE_LABEL: &str = "envrt.cli-state";

/// The Docker driver's configuration: the configured host, labelled with the state dir.
#[cfg(feature = "docker")]
pub fn docker_config(paths: &Paths, config: &Config) -> crate::docker::DockerConfig {
    let mut docker = crate::docker::DockerConfig {
        host: config.docker_host.clone(),
        workspace_mount: match config.docker_bind {
            true => crate::docker::WorkspaceMount::Bind,
            false => crate::docker::WorkspaceMount::Container,
        },
        bind_root: config.docker_bind_root.clone(),
        ..Default::default()
    };
    docker
        .extra_labels
        .insert(STATE_LABEL.into(), paths.state_dir.display().to_string());
    docker
}

/// An executable file named `name` in a directory of `PATH`.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| executable(candidate))
}

/// The reference worker's binary name.
const WORKER: &str = "envrt-sandbox-worker";

/// Directories a host program added to the reference worker's search.
static WORKER_DIRS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Adds `dir` to the directories searched for the reference worker, after the one of the
/// running executable and before `PATH`. The Python package adds its own directory (where
/// its wheel installs the worker): its executable is the interpreter.
pub fn add_worker_search_dir(dir: impl Into<PathBuf>) {
    let dir = dir.into();
    let mut dirs = WORKER_DIRS.lock().unwrap_or_else(|e| e.into_inner());
    if !dirs.contains(&dir) {
        dirs.push(dir);
    }
}

/// The directories searched before `PATH`: the running executable's, then the added ones.
fn worker_search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .into_iter()
        .collect();
    for dir in WORKER_DIRS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        if !dirs.contains(dir) {
            dirs.push(dir.clone());
        }
    }
    dirs
}

/// Whether `path` is an executable file.
fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The reference worker `envrt-sandbox-worker`: next to the running executable, else in a
/// directory added with [`add_worker_search_dir`], else on `PATH`.
pub fn reference_worker() -> Option<PathBuf> {
    locate_reference_worker(None).ok()
}

/// The reference worker to run: `configured` (`[sandbox] worker`) when set, else found as
/// [`reference_worker`] does. The error is the exact text saying which binary, where it
/// was looked for and how to set it.
pub fn locate_reference_worker(configured: Option<&Path>) -> Result<PathBuf, String> {
    locate_in(configured, &worker_search_dirs(), find_in_path(WORKER))
}

fn locate_in(configured: Option<&Path>, dirs: &[PathBuf], on_path: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(path) = configured {
        return match executable(path) {
            true => Ok(path.to_path_buf()),
            false => Err(format!(
                "Sandbox worker \"{}\" (set by [sandbox] worker in envrt.toml) is not an executable file.",
                path.display()
            )),
        };
    }
    if let Some(found) = dirs.iter().map(|dir| dir.join(WORKER)).find(|p| executable(p)) {
        return Ok(found);
    }
    on_path.ok_or_else(|| {
        let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        format!(
            "Sandbox worker \"{WORKER}\" was not found (looked in {}, and on PATH); set [sandbox] worker = \"/path/to/{WORKER}\" in envrt.toml, or put it on PATH.",
            looked.join(", ")
        )
    })
}

/// The plugin manifest of the reference worker, leases under `<state dir>/sandbox`.
#[cfg(feature = "plugin-sandbox")]
fn reference_manifest(worker: &Path, paths: &Paths) -> crate::plugin_sandbox::PluginManifest {
    crate::plugin_sandbox::reference_manifest(worker, &paths.state_dir.join("sandbox"))
}

/// The plugins to start: the configured ones, plus the reference worker when a `needed`
/// driver (environments configured or stored, `extra`) is `sandbox` and no plugin
/// provides it. A plugin no needed driver uses is not started. When the reference worker
/// is needed but not found, the skipped `sandbox` driver says why.
#[cfg(feature = "plugin-sandbox")]
#[allow(clippy::type_complexity)]
fn plugins(
    paths: &Paths,
    config: &Config,
    needed: &BTreeSet<String>,
) -> Result<
    (
        Vec<(
            crate::plugin_sandbox::PluginManifest,
            crate::plugin_sandbox::SandboxOptions,
        )>,
        Option<SkippedDriver>,
    ),
    ConfigError,
> {
    use crate::plugin_sandbox::{PluginManifest, SandboxOptions};
    let mut out = Vec::new();
    for plugin in &config.plugins {
        let manifest = PluginManifest::load(&plugin.manifest)
            .map_err(|e| ConfigError::Invalid(format!("envrt: plugin \"{}\": {e}", plugin.manifest.display())))?;
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
    let default_key = crate::plugin_sandbox::DEFAULT_DRIVER_KEY;
    let mut missing = None;
    if needed.contains(default_key) && !provided(default_key) {
        match locate_reference_worker(config.sandbox_worker.as_deref()) {
            Ok(worker) => out.push((reference_manifest(&worker, paths), SandboxOptions::default())),
            Err(message) => {
                missing = Some(SkippedDriver {
                    key: default_key.to_owned(),
                    error: envrt_runtime_core::DriverError::Unavailable { message, source: None },
                })
            }
        }
    }
    // Only start workers some environment uses.
    out.retain(|(m, o)| needed.contains(&m.driver_key(o.driver_key.as_deref())));
    Ok((out, missing))
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
        let mut builder = RuntimeBuilder::new()
            .store(Arc::new(store))
            .tenant(config.company.clone());
        if !needed.contains("docker") {
            builder = builder.without_driver("docker");
        }
        #[cfg(feature = "local")]
        {
            builder = builder.local_config(crate::local::LocalConfig {
                root: Some(config.local_root.clone()),
                path_scope: match config.local_paths {
                    super::LocalPaths::Workspace => envrt_runtime_core::PathScope::Workspace,
                    super::LocalPaths::Host => envrt_runtime_core::PathScope::WholeEnvironment,
                },
                ..Default::default()
            });
        }
        #[cfg(feature = "docker")]
        {
            builder = builder.docker_config(docker_config(paths, &config));
        }
        #[cfg(feature = "ssh")]
        {
            // Recovery (`envrt gc`) lists the lease directories of every configured host.
            let known_targets = config
                .environments
                .iter()
                .filter(|e| e.driver == "ssh")
                .filter_map(|e| crate::ssh::SshTarget::from_config(&e.config, None).ok())
                .collect();
            builder = builder.ssh_config(crate::ssh::SshConfig {
                known_targets,
                ..Default::default()
            });
        }
        #[cfg(feature = "plugin-sandbox")]
        let (plugins, missing_worker) = plugins(paths, &config, &needed)?;
        #[cfg(feature = "plugin-sandbox")]
        for (manifest, options) in plugins {
            builder = builder.sandbox_plugin(manifest, options);
        }
        #[cfg(not(feature = "plugin-sandbox"))]
        if !config.plugins.is_empty() {
            return Err(ConfigError::Invalid(format!(
                "envrt: config \"{}\": [[plugin]] needs the plugin-sandbox feature, which this build of envrt lacks",
                paths.config.as_deref().unwrap_or(Path::new("")).display()
            )));
        }
        #[allow(unused_mut)]
        let (runtime, mut skipped) = builder.build_lenient().await;
        #[cfg(feature = "plugin-sandbox")]
        skipped.extend(missing_worker);
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

#[cfg(test)]
mod worker_lookup {
    use super::*;

    #[test]
    fn the_reference_worker_is_the_configured_one_else_found_in_the_search_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let (empty, full) = (dir.path().join("empty"), dir.path().join("full"));
        std::fs::create_dir_all(&empty).unwrap();
        std::fs::create_dir_all(&full).unwrap();
        let worker = full.join(WORKER);
        std::fs::write(&worker, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o755)).unwrap();
        let dirs = [empty.clone(), full.clone()];
        assert_eq!(locate_in(None, &dirs, None), Ok(worker.clone()));
        assert_eq!(locate_in(Some(&worker), &[], None), Ok(worker.clone()));
        let on_path = PathBuf::from("/somewhere/envrt-sandbox-worker");
        assert_eq!(
            locate_in(None, std::slice::from_ref(&empty), Some(on_path.clone())),
            Ok(on_path)
        );
        assert_eq!(
            locate_in(None, &[empty.clone(), dir.path().to_path_buf()], None),
            Err(format!(
                "Sandbox worker \"envrt-sandbox-worker\" was not found (looked in {}, {}, and on PATH); set [sandbox] worker = \"/path/to/envrt-sandbox-worker\" in envrt.toml, or put it on PATH.",
                empty.display(),
                dir.path().display()
            ))
        );
        // a configured path is the only one tried
        let missing = empty.join(WORKER);
        assert_eq!(
            locate_in(Some(&missing), &dirs, None),
            Err(format!(
                "Sandbox worker \"{}\" (set by [sandbox] worker in envrt.toml) is not an executable file.",
                missing.display()
            ))
        );
        std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(locate_in(Some(&worker), &dirs, None).is_err());
    }
}
