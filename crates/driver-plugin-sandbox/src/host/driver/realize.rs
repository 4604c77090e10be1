//! Realize over the worker: `environmentRealizeWorkspace`.

use async_trait::async_trait;
use envrt_driver_api::{DriverError, LeaseContext, RealizeWorkspace, RealizedWorkspace, WorkspaceRequest};

use super::SandboxDriver;
use crate::host::error::SandboxError;
use crate::protocol::environment::RealizeWorkspaceParams;
use crate::protocol::methods;

#[async_trait]
impl RealizeWorkspace for SandboxDriver {
    async fn realize_workspace(
        &self,
        context: &LeaseContext,
        request: &WorkspaceRequest,
    ) -> Result<RealizedWorkspace, DriverError> {
        self.require(methods::REALIZE_WORKSPACE)?;
        let params = RealizeWorkspaceParams {
            base: self.base(context),
            lease: Self::lease(context),
            workspace: request.clone(),
        };
        let value = self
            .rpc(methods::REALIZE_WORKSPACE, &params, &context.lease.company_id)
            .await?;
        Ok(serde_json::from_value(value).map_err(|e| SandboxError::InvalidResult {
            method: methods::REALIZE_WORKSPACE.into(),
            message: e.to_string(),
        })?)
    }
}
