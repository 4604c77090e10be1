//! Moving a Docker lease's expiry (contract section 8, `extend`), on a local engine.
//!
//! An expiring lease's container has two ends: its main process, `sleep` until the expiry
//! fixed at its creation (the in-container line, and the only one on a remote engine),
//! and the host expiry watchdog ([`crate::expiry`]), which kills the container's init at
//! its time. Extend starts a watchdog for the new time first, then ends every other
//! watchdog of the container, so the container is never unwatched. When the new expiry is
//! later than the one the container was made with, the main `sleep` would still end the
//! container at the old time: the driver stops it (`SIGSTOP` by its host pid) and the
//! watchdog alone ends the container; when it is not later, the `sleep` is continued
//! (`SIGCONT`), a second line again. A command of the lease that continues the stopped
//! `sleep` itself only ends its own lease sooner.
//!
//! Refused: on a remote engine ([`REMOTE`], nothing on this host could end the container
//! at a moved time), and for a `reuse_by_environment` lease ([`REUSED`]: a resume starts
//! its container again, and the new main `sleep` counts to the expiry of its creation).

use async_trait::async_trait;
use envrt_driver_api::{DriverError, ExtendLease, LeaseContext, LeasePolicy, Timestamp};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::DockerDriver;
use crate::container::bounded_expiry;
use crate::driver::LABEL_EXPIRES_AT;

/// The refusal on an engine whose containers' processes this host does not see.
pub(crate) const REMOTE: &str = "the Docker driver moves a lease's expiry only on a local engine, where a host watchdog ends the container at its expiry";

/// The refusal for a lease whose container a resume starts again.
pub(crate) const REUSED: &str = "the Docker driver does not move the expiry of a reuse_by_environment lease: a resume starts its container again, whose own sleep ends it at the expiry fixed at its creation";

#[async_trait]
impl ExtendLease for DockerDriver {
    async fn extend_lease(&self, context: &LeaseContext, expires_at: Timestamp) -> Result<Timestamp, DriverError> {
        if context.lease.lease_policy == LeasePolicy::ReuseByEnvironment {
            return Err(DriverError::invalid(REUSED));
        }
        let container = Self::container_of(context)?;
        let inspected = self.inspect_leased(container).await?;
        let id = inspected.id.clone().unwrap_or_else(|| container.to_owned());
        let init = inspected.state.as_ref().and_then(|s| s.pid).filter(|pid| *pid > 0);
        let (Some(init), true) = (init, crate::process::hostkill::sees(&id)) else {
            return Err(DriverError::invalid(REMOTE));
        };
        let made_for = inspected
            .config
            .as_ref()
            .and_then(|c| c.labels.as_ref())
            .and_then(|labels| labels.get(LABEL_EXPIRES_AT))
            .and_then(|at| Timestamp::parse_rfc3339(at));
        let main = crate::idle::main_process(init).ok_or_else(|| {
            DriverError::other(format!("cannot find the main process of container {id} on this host"))
        })?;
        let at = bounded_expiry(expires_at);
        let started = crate::expiry::start(&id, init, crate::expiry::seconds_until(at))
            .map_err(|e| DriverError::io("cannot start the container's expiry watchdog", e))?;
        if let Some(watchdog) = started {
            crate::expiry::stop_others(&id, watchdog);
        }
        // A container made with no expiry label (none asked at its creation) has no
        // counting sleep to stop.
        if let Some(made_for) = made_for {
            let signal = if at > made_for {
                Signal::SIGSTOP
            } else {
                Signal::SIGCONT
            };
            let pid = i32::try_from(main).unwrap_or_default();
            kill(Pid::from_raw(pid), signal)
                .map_err(|e| DriverError::other(format!("cannot signal the container's own sleep: {e}")))?;
        }
        Ok(at)
    }
}
