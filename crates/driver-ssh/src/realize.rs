//! Realize (contract section 4): the lease's workspace, or a directory created inside
//! it by one remote script that refuses a path leading out of the workspace.

use async_trait::async_trait;
use envrt_driver_api::sync::confine_to_workspace;
use envrt_driver_api::{DriverError, JsonMap, LeaseContext, RealizeWorkspace, RealizedWorkspace, WorkspaceRequest};

use crate::{SshDriver, remote};

#[async_trait]
impl RealizeWorkspace for SshDriver {
    async fn realize_workspace(
        &self,
        context: &LeaseContext,
        request: &WorkspaceRequest,
    ) -> Result<RealizedWorkspace, DriverError> {
        let place = self.place(context).await?;
        let cwd = match &request.remote_path {
            None => place.workspace.clone(),
            Some(remote_path) => {
                let dir = confine_to_workspace(&place.workspace, remote_path)?;
                let script = format!(
                    "w={w}; d={d}; a=$d; while [ ! -e \"$a\" ] && [ ! -L \"$a\" ]; do a=$(dirname -- \"$a\"); done\n\
                     ok() {{ case \"$(pwd -P)/\" in \"$w\"/*) return 0;; esac; return 1; }}\n\
                     (cd -P -- \"$a\" 2>/dev/null && ok) || exit 121\nmkdir -p -- \"$d\" && (cd -P -- \"$d\" && ok) || exit 121",
                    w = remote::quote(&place.workspace),
                    d = remote::quote(&dir)
                );
                let (code, _, err) = place.host.run(&script, &[]).await?;
                match code {
                    0 => dir,
                    121 => {
                        return Err(DriverError::PathOutsideWorkspace {
                            path: remote_path.clone(),
                        });
                    }
                    _ => {
                        return Err(DriverError::other(format!(
                            "cannot create {dir}: {}",
                            String::from_utf8_lossy(&err).trim()
                        )));
                    }
                }
            }
        };
        let mut metadata = JsonMap::new();
        metadata.insert("workspace".into(), place.workspace.clone().into());
        Ok(RealizedWorkspace {
            cwd,
            metadata: Some(metadata),
        })
    }
}
