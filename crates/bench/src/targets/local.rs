//! The local target: the local driver (workspaces under a given root, per-command cgroups
//! on or off) and one lease on it through the facade.

use std::path::PathBuf;
use std::sync::Arc;

use envrt_driver_local::{LocalConfig, LocalDriver};
use envrt_runtime_core::JsonMap;

use crate::facade::Leased;

/// A local lease and the driver behind it.
pub(crate) struct Local {
    pub(crate) leased: Leased,
    driver: Arc<LocalDriver>,
}

impl Local {
    /// A local driver (workspaces under `root`, else its default) and one lease.
    pub(crate) async fn open(root: Option<PathBuf>) -> Result<Local, String> {
        Local::open_contained(root, true).await
    }

    /// [`open`](Self::open), with the per-command cgroups on or off.
    pub(crate) async fn open_contained(root: Option<PathBuf>, cgroups: bool) -> Result<Local, String> {
        let config = LocalConfig {
            root,
            cgroups,
            ..Default::default()
        };
        let driver = Arc::new(LocalDriver::new(config).map_err(|e| e.to_string())?);
        let leased = Leased::open(driver.clone(), JsonMap::new()).await?;
        Ok(Local { leased, driver })
    }

    /// The host path of a lease's workspace.
    pub(crate) fn workspace(&self, lease: &str) -> Result<PathBuf, String> {
        self.driver.workspace_of(lease).map_err(|e| e.to_string())
    }
}
