//! Realize (contract section 4): the lease's workspace directory, or a directory created
//! inside it.

use async_trait::async_trait;
use envrt_driver_api::{DriverError, LeaseContext, RealizeWorkspace, RealizedWorkspace, WorkspaceRequest};

use crate::LocalDriver;
use crate::workspace::{check_no_escape, path_str, resolve_in_workspace};

/// Realizing a workspace: the lease's directory, or a directory created inside it.
#[async_trait]
impl RealizeWorkspace for LocalDriver {
    async fn realize_workspace(
        &self,
        context: &LeaseContext,
        request: &WorkspaceRequest,
    ) -> Result<RealizedWorkspace, DriverError> {
        let workspace = self.live_workspace(context)?;
        let cwd = match &request.remote_path {
            None => workspace.clone(),
            Some(remote) => {
                let dir = resolve_in_workspace(&workspace, remote)?;
                std::fs::create_dir_all(&dir)
                    .map_err(|e| DriverError::io(format!("cannot create {}", dir.display()), e))?;
                // Re-check: creation followed whatever existed on the way.
                check_no_escape(&workspace, &dir, remote)?;
                dir
            }
        };
        let mut metadata = envrt_driver_api::JsonMap::new();
        metadata.insert(
            envrt_driver_api::model::WORKSPACE_METADATA_KEY.into(),
            path_str(&workspace)?.into(),
        );
        Ok(RealizedWorkspace {
            cwd: path_str(&cwd)?.to_owned(),
            metadata: Some(metadata),
        })
    }
}
