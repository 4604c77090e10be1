//! Pause and unpause of a Docker lease (contract section 8, "Pause and unpause"):
//! `docker pause` and `docker unpause` through the engine API, which freeze and thaw the
//! container's whole cgroup (every exec, the lease's `envrt-agent` and what they run).
//!
//! A paused container's own expiry (its main process, a `sleep`) is frozen with it, so a
//! lease with an expiry is paused only when a host watchdog (local engine, see
//! [`crate::expiry`]) watches the container: its `SIGKILL` ends the frozen init, and with
//! it the container, at the expiry. With a remote engine such a lease is refused with
//! [`NO_PAUSED_EXPIRY`]. Release and destroy remove the container by force, which the
//! engine does to a paused one too; a `reuse_by_environment` release, which keeps the
//! container stopped, unpauses it first.

use async_trait::async_trait;
use envrt_driver_api::{DriverError, LeaseContext, PauseLease};

use crate::DockerDriver;
use crate::engine::{has_status, is_not_found};

/// The refusal of a pause where nothing would end the paused container at its expiry.
pub(crate) const NO_PAUSED_EXPIRY: &str = "the Docker driver pauses a lease with an expiry only on a local engine, where a host watchdog ends the paused container at its expiry";

#[async_trait]
impl PauseLease for DockerDriver {
    async fn pause_lease(&self, context: &LeaseContext) -> Result<(), DriverError> {
        let id = Self::container_of(context)?;
        if let Some(at) = context.lease.expires_at
            && !crate::expiry::guarded(&self.engine, id, at).await
        {
            return Err(DriverError::invalid(NO_PAUSED_EXPIRY));
        }
        match self.engine.retry(|| self.engine.docker.pause_container(id)).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Err(DriverError::ResourceGone { id: id.to_owned() }),
            Err(e) => Err(self.engine.error("pausing a container", e)),
        }
    }

    async fn unpause_lease(&self, context: &LeaseContext) -> Result<(), DriverError> {
        let id = Self::container_of(context)?;
        self.unpause(id).await
    }
}

impl DockerDriver {
    /// Unpauses the container; one that is not paused (the engine answers 500 for it,
    /// not 409, on the engines we run) is left as it is, so this asks first.
    pub(crate) async fn unpause(&self, id: &str) -> Result<(), DriverError> {
        let paused = match self
            .engine
            .retry(|| self.engine.docker.inspect_container(id, None))
            .await
        {
            Ok(inspected) => inspected.state.and_then(|s| s.paused).unwrap_or(false),
            Err(e) if is_not_found(&e) => return Err(DriverError::ResourceGone { id: id.to_owned() }),
            Err(e) => return Err(self.engine.error("inspecting a container", e)),
        };
        if !paused {
            return Ok(());
        }
        match self.engine.retry(|| self.engine.docker.unpause_container(id)).await {
            Ok(()) => Ok(()),
            Err(e) if has_status(&e, 409) => Ok(()),
            Err(e) if is_not_found(&e) => Err(DriverError::ResourceGone { id: id.to_owned() }),
            Err(e) => Err(self.engine.error("unpausing a container", e)),
        }
    }
}
