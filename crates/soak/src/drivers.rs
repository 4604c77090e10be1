//! One driver of each kind, scoped to the soak's scratch directory (local workspaces,
//! sandbox lease dirs) or run label (Docker containers), behind a runtime on a SQLite
//! store.

use std::path::Path;
use std::sync::Arc;

use envrt_driver_docker::{DockerConfig, DockerDriver};
use envrt_driver_local::{LocalConfig, LocalDriver};
use envrt_driver_plugin_sandbox::{SandboxDriver, SandboxOptions};
use envrt_runtime_core::{Environment, EnvironmentRuntime, JsonMap};
use envrt_store_sqlite::SqliteStore;

use envrt_soak::RUN_LABEL;
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
            other => return Err(format!("unknown driver {other}")),
        }
        runtime
            .put_environment(Environment::new(ENVIRONMENT, "Soak", key).with_config(config))
            .await
            .map_err(|e| e.to_string())?;
        Ok(Setup { runtime, sandbox })
    }

    /// Stops what runs beside the runtime (the sandbox worker).
    pub(crate) async fn shutdown(&self) {
        if let Some(driver) = &self.sandbox {
            driver.shutdown().await;
        }
    }
}
