//! Idle timeouts and keep-alive (contract section 8, "Idle timeout and keep-alive"): the
//! facade calls, and the lease-metadata key that records a lease's idle timeout.
//!
//! [`set_idle_timeout`](EnvironmentRuntime::set_idle_timeout) arms the driver's
//! [`IdleTimeout`](crate::driver::IdleTimeout) group and records the length under
//! [`IDLE_TIMEOUT_KEY`]. From then on every gated operation on the lease (and
//! [`keep_alive`](EnvironmentRuntime::keep_alive)) resets the driver's idle clock; the
//! driver ends the lease by itself once the clock runs out, with no holder alive. An
//! operation that finds the lease ended that way is refused with `Lease "{id}" ended after
//! its idle timeout.`; `keep_alive` also records the lease as `expired` in the store.

use std::time::Duration;

use crate::error::DriverError;
use crate::error::RuntimeError;
use crate::model::{Lease, LeaseStatus, Timestamp};

use super::gate::{Operation, gate};
use super::pause::is_paused;
use super::{EnvironmentRuntime, Resolved};

/// Lease metadata key of a lease with an idle timeout: its length in milliseconds.
/// Written by the facade only.
pub const IDLE_TIMEOUT_KEY: &str = "envrtIdleTimeoutMs";

/// The lease's idle timeout, if it has one.
pub fn idle_timeout(lease: &Lease) -> Option<Duration> {
    lease
        .metadata
        .get(IDLE_TIMEOUT_KEY)
        .and_then(|v| v.as_u64())
        .map(Duration::from_millis)
}

/// Resets the idle clock of the resolved lease, when it has an idle timeout: every gated
/// operation calls it once its checks passed. A clock the driver reports as run out
/// refuses the operation with [`RuntimeError::LeaseIdleEnded`]; any other failure to
/// touch it is logged and does not fail the operation.
pub(super) async fn touch(resolved: &Resolved) -> Result<(), RuntimeError> {
    touch_as(resolved, is_paused(&resolved.context.lease)).await
}

/// [`touch`], saying whether the lease is paused now (pause and unpause call it after the
/// driver paused or unpaused, since idle time does not count while a lease is paused).
pub(super) async fn touch_as(resolved: &Resolved, paused: bool) -> Result<(), RuntimeError> {
    let lease = &resolved.context.lease;
    let Some(group) = resolved.driver.as_idle().filter(|_| idle_timeout(lease).is_some()) else {
        return Ok(());
    };
    match group.touch_idle(&resolved.context, paused).await {
        Ok(()) => Ok(()),
        Err(DriverError::InvalidInput { .. }) => Err(RuntimeError::LeaseIdleEnded { id: lease.id.clone() }),
        Err(error) => {
            tracing::warn!(lease_id = %lease.id, %error, "cannot reset the lease's idle clock");
            Ok(())
        }
    }
}

impl EnvironmentRuntime {
    /// Arms the lease's idle timeout (or re-arms it with a new length): once the lease
    /// has taken no operation and run no process for `idle` (idle time does not count
    /// while it is paused), its driver ends it, whether or not any program of the holder
    /// is alive. Without the driver's idle group: `Environment driver "{key}" does not
    /// support idle timeouts.`
    pub async fn set_idle_timeout(&self, lease_id: &str, idle: Duration) -> Result<Lease, RuntimeError> {
        self.traced("set_idle_timeout", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let group = gate(&resolved, Operation::Idle, |d| d.as_idle(), |_| true).await?;
            let millis = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
            group.arm_idle(&resolved.context, idle).await?;
            let mut lease = resolved.context.lease.clone();
            if is_paused(&lease) {
                group.touch_idle(&resolved.context, true).await?;
            }
            lease.metadata.insert(IDLE_TIMEOUT_KEY.into(), millis.into());
            lease.last_used_at = Timestamp::now();
            self.store.put_lease(&lease).await?;
            Ok(lease)
        })
        .await
    }

    /// Resets the lease's idle clock. Refused with `Invalid input: lease "{id}" has no
    /// idle timeout` when none is armed; a lease its idle timeout has already ended is
    /// recorded as `expired` (its clean-up finished as a release does) and refused with
    /// `Lease "{id}" ended after its idle timeout.`
    pub async fn keep_alive(&self, lease_id: &str) -> Result<Lease, RuntimeError> {
        self.traced("keep_alive", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            gate(&resolved, Operation::Idle, |d| d.as_idle(), |_| true).await?;
            let mut lease = resolved.context.lease.clone();
            if idle_timeout(&lease).is_none() {
                return Err(DriverError::invalid(format!("lease \"{lease_id}\" has no idle timeout")).into());
            }
            match touch(&resolved).await {
                Ok(()) => {}
                Err(ended @ RuntimeError::LeaseIdleEnded { .. }) => {
                    self.release_lease(lease_id, LeaseStatus::Expired).await?;
                    return Err(ended);
                }
                Err(other) => return Err(other),
            }
            lease.last_used_at = Timestamp::now();
            self.store.put_lease(&lease).await?;
            Ok(lease)
        })
        .await
    }
}
