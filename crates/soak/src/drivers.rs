//! One driver of each kind, scoped to the soak's scratch directory (local workspaces,
//! sandbox lease dirs), run label (Docker containers) or remote root (ssh), behind a runtime on a SQLite
//! store.

use std::path::Path;
use std::sync::Arc;

use envrt_driver_docker::{DockerConfig, DockerDriver};
use envrt_driver_local::{LocalConfig, LocalDriver};
use envrt_driver_plugin_sandbox::{SandboxDriver, SandboxOptions};
use envrt_driver_ssh::{SshConfig, SshDriver};
use envrt_runtime_core::{Environment, EnvironmentRuntime, JsonMap};
use envrt_store_sqlite::SqliteStore;

use envrt_soak::RUN_LABEL;
use envrt_soak::ssh::Host;
/// The environment every cycle leases.
pub(crate) const ENVIRONMENT: &str = "soak";

/// The test image.
pub(crate) fn image() -> String {
    std::env::var("ENVRT_TEST_IMAGE").unwrap_or_else(|_| "envrt-test:latest".into())
}

/// A runtime with the driver registered and the environment put.
pub(crate) struct Setup {
    pub(crate) runtime: Arc<EnvironmentRuntime>,
    sandbox: Option<Arc<SandboxDriver>>,
    ssh: Option<Arc<SshDriver>>,
}

/// The `[environment.config]` of an ssh environment on the test sshd, as TOML lines.
pub(crate) fn ssh_config(host: &Host) -> JsonMap {
    let mut config = JsonMap::new();
    config.insert("host".into(), host.host.clone().into());
    config.insert("port".into(), host.port.into());
    config.insert("user".into(), host.user.clone().into());
    config.insert("key".into(), host.key.clone().into());
    config.insert("knownHosts".into(), host.known_hosts.clone().into());
    config
}

impl Setup {
    pub(crate) async fn start(key: &str, scratch: &Path, run: &str) -> Result<Setup, String> {
        let state = scratch.join("state");
        std::fs::create_dir_all(&state).map_err(|e| e.to_string())?;
        let store = SqliteStore::open(state.join("leases.db"))
            .await
            .map_err(|e| e.to_string())?;
        let runtime = Arc::new(EnvironmentRuntime::with_store(Arc::new(store)));
        let mut config = JsonMap::new();
        let mut sandbox = None;
        let mut ssh = None;
        match key {
            "local" => {
                let driver = LocalDriver::new(LocalConfig {
                    root: Some(scratch.join("local")),
                    ..Default::default()
                })
                .map_err(|e| e.to_string())?;
                runtime.register_driver(Arc::new(driver));
            }
            "docker" => {
                let mut docker = DockerConfig::default();
                docker.extra_labels.insert(RUN_LABEL.into(), run.into());
                let driver = DockerDriver::connect(docker).await.map_err(|e| e.to_string())?;
                if !driver.image_exists(&image()).await.map_err(|e| e.to_string())? {
                    return Err(format!("image {} is missing", image()));
                }
                runtime.register_driver(Arc::new(driver));
                config.insert("image".into(), image().into());
            }
            "sandbox" => {
                let worker = crate::sibling(envrt_driver_plugin_sandbox::REFERENCE_WORKER_BINARY)?;
                let manifest = envrt_driver_plugin_sandbox::reference_manifest(&worker, &scratch.join("sandbox"));
                let driver = Arc::new(
                    SandboxDriver::start(manifest, SandboxOptions::default())
                        .await
                        .map_err(|e| e.to_string())?,
                );
                runtime.register_driver(driver.clone());
                sandbox = Some(driver);
            }
            "ssh" => {
                let host = Host::from_env_file()?;
                let home = host.home()?;
                // Its own remote root: everything under it is this run's.
                let own_root = home.join(format!(".envrt/soak-{run}"));
                envrt_soak::ssh::remember(scratch, &own_root, &home.join(".envrt/leases"))
                    .map_err(|e| format!("cannot write down the ssh host's lease directories: {e}"))?;
                let driver = Arc::new(
                    SshDriver::new(SshConfig {
                        root: own_root.display().to_string(),
                        // Under the scratch directory: a master left running is counted.
                        control_dir: Some(scratch.join("ssh")),
                        ..Default::default()
                    })
                    .map_err(|e| e.to_string())?,
                );
                runtime.register_driver(driver.clone());
                config = ssh_config(&host);
                ssh = Some(driver);
            }
            other => return Err(format!("unknown driver {other}")),
        }
        runtime
            .put_environment(Environment::new(ENVIRONMENT, "Soak", key).with_config(config))
            .await
            .map_err(|e| e.to_string())?;
        Ok(Setup { runtime, sandbox, ssh })
    }

    /// Stops what runs beside the runtime (the sandbox worker, the ssh masters).
    pub(crate) async fn shutdown(&self) {
        if let Some(driver) = &self.sandbox {
            driver.shutdown().await;
        }
        if let Some(driver) = &self.ssh {
            driver.shutdown().await;
        }
    }
}
