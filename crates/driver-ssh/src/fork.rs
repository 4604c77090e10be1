//! Fork of an SSH lease (contract section 8, "Fork"): each copy is a new lease directory
//! on the source's host, acquired as any lease is, whose workspace is filled by a remote
//! `cp -a` (links kept as links, modes and times kept). The first copy is taken from the
//! source; the others from the first, which no process touches yet, so every copy holds
//! the same state even while the source's commands keep writing. Nothing crosses the
//! connection but the commands: the files are copied on the remote host.

use async_trait::async_trait;
use envrt_driver_api::{AcquireInput, DriverError, EnvironmentDriver, ForkLease, LeaseContext, LeaseGrant};

use crate::SshDriver;
use crate::remote::quote;

#[async_trait]
impl ForkLease for SshDriver {
    async fn fork_lease(&self, source: &LeaseContext, copies: &[AcquireInput]) -> Result<Vec<LeaseGrant>, DriverError> {
        let place = self.find(source).await?.ok_or_else(|| DriverError::ResourceGone {
            id: source
                .lease
                .provider_lease_id
                .clone()
                .unwrap_or_else(|| source.lease.id.clone()),
        })?;
        let host_of_source = self.target_of_lease(&source.lease, source.environment.as_ref())?;
        let mut seed = place.workspace.clone();
        let mut made: Vec<String> = Vec::with_capacity(copies.len());
        let mut grants = Vec::with_capacity(copies.len());
        for input in copies {
            let copied = async {
                if self.target_of(&input.environment.config)? != host_of_source {
                    return Err(DriverError::invalid(
                        "a fork's copies live on the source's host, and this environment names another",
                    ));
                }
                let grant = self.acquire_lease(input).await?;
                let workspace = grant
                    .metadata
                    .get("workspace")
                    .and_then(|w| w.as_str())
                    .unwrap_or_default()
                    .to_owned();
                made.push(workspace.trim_end_matches("/work").to_owned());
                place
                    .host
                    .run_ok(
                        "copy the workspace for a fork",
                        &format!("cp -a -- {}/. {}/", quote(&seed), quote(&workspace)),
                    )
                    .await?;
                Ok::<_, DriverError>((grant, workspace))
            }
            .await;
            match copied {
                Ok((grant, workspace)) => {
                    if grants.is_empty() {
                        seed = workspace;
                    }
                    grants.push(grant);
                }
                Err(error) => {
                    // All or nothing: the copies made so far hold no process yet; their
                    // directories go.
                    for dir in &made {
                        let _ = place
                            .host
                            .run_ok("remove a fork's copy", &format!("rm -rf -- {}", quote(dir)))
                            .await;
                    }
                    return Err(error);
                }
            }
        }
        Ok(grants)
    }
}
