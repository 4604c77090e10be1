//! Realizing a workspace in a container: the lease's workspace, or a directory created in
//! it by one exec.

use async_trait::async_trait;
use envrt_driver_api::sync::confine_to_workspace;
use envrt_driver_api::{DriverError, JsonMap, LeaseContext, RealizeWorkspace, RealizedWorkspace, WorkspaceRequest};

use crate::driver::DockerDriver;
use crate::process::run_script;

#[async_trait]
impl RealizeWorkspace for DockerDriver {
    async fn realize_workspace(
        &self,
        context: &LeaseContext,
        request: &WorkspaceRequest,
    ) -> Result<RealizedWorkspace, DriverError> {
        let container = Self::container_of(context)?;
        let workspace = Self::workspace_of(context);
        let cwd = match request.remote_path.as_deref() {
            Some(path) => confine_to_workspace(&workspace, path)?,
            None => workspace.clone(),
        };
        let (_, stderr, code) = run_script(
            &self.engine,
            container,
            None,
            "mkdir -p -- \"$1\"",
            &[&cwd],
            "realizing a workspace",
        )
        .await?;
        if code != Some(0) {
            return Err(DriverError::other(format!(
                "Could not create \"{cwd}\" in the container: {}",
                String::from_utf8_lossy(&stderr).trim()
            )));
        }
        let mut metadata = JsonMap::new();
        metadata.insert("containerId".into(), container.into());
        Ok(RealizedWorkspace {
            cwd,
            metadata: Some(metadata),
        })
    }
}
