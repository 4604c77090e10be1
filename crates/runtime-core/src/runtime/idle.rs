//! Idle timeouts and keep-alive (contract section 8, "Idle timeout and keep-alive"): the
//! facade calls, and the lease-metadata key that records a lease's idle timeout.
//!
//! [`set_idle_timeout`](EnvironmentRuntime::set_idle_timeout) arms the driver's
//! [`IdleTimeout`](crate::driver::IdleTimeout) group and records the length under
//! [`IDLE_TIMEOUT_KEY`]. From then on every gated operation on the lease (and
//! [`keep_alive`](EnvironmentRuntime::keep_alive)) resets the driver's idle clock, and so
//! does an open process output stream, periodically (see `reader`); the
//! driver ends the lease by itself once the clock runs out, with no holder alive. An
//! operation that finds the lease ended that way is refused with `Lease "{id}" ended after
//! its idle timeout.`; `keep_alive` also records the lease as `expired` in the store. With
//! `on_idle = "pause"` ([`ON_IDLE_KEY`]) the driver pauses the idle lease instead; the
//! first operation that finds it so records the pause ([`PAUSED_KEY`](super::PAUSED_KEY))
//! and is refused with `Lease "{id}" is paused.` (pause, unpause, extend and keep-alive go
//! on: they work on a paused lease).

use std::time::Duration;

use crate::driver::{IdleClock, OnIdle};
use crate::error::DriverError;
use crate::error::RuntimeError;
use crate::model::{Lease, LeaseStatus, Timestamp};

use super::gate::{Operation, gate};
use super::pause::is_paused;
use super::{EnvironmentRuntime, Resolved};

/// Lease metadata key of a lease with an idle timeout: its length in milliseconds.
/// Written by the facade only.
pub const IDLE_TIMEOUT_KEY: &str = "envrtIdleTimeoutMs";

/// Lease metadata key of a lease whose idle timeout pauses it: `"pause"`. Written by the
/// facade only.
pub const ON_IDLE_KEY: &str = "envrtOnIdle";

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
/// refuses the operation with [`RuntimeError::LeaseIdleEnded`]; a lease its idle timeout
/// paused is recorded as paused and the operation refused with
/// [`RuntimeError::LeasePaused`]; any other failure to touch it is logged and does not
/// fail the operation.
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
        Ok(IdleClock::Reset) => Ok(()),
        Ok(IdleClock::PausedWhileIdle) => {
            record_idle_pause(resolved).await?;
            Err(RuntimeError::LeasePaused { id: lease.id.clone() })
        }
        Err(DriverError::InvalidInput { .. }) => Err(RuntimeError::LeaseIdleEnded { id: lease.id.clone() }),
        Err(error) => {
            tracing::warn!(lease_id = %lease.id, %error, "cannot reset the lease's idle clock");
            Ok(())
        }
    }
}

/// Records in the store that the idle timeout paused the lease (it is paused from the
/// facade's view from now on) and acknowledges it to the driver.
async fn record_idle_pause(resolved: &Resolved) -> Result<(), RuntimeError> {
    let id = &resolved.context.lease.id;
    let Some(mut lease) = resolved.store.get_lease(id).await? else {
        return Ok(());
    };
    if !is_paused(&lease) {
        let now = Timestamp::now();
        lease.metadata.insert(super::PAUSED_KEY.into(), now.0.into());
        resolved.store.put_lease(&lease).await?;
    }
    if let Some(group) = resolved.driver.as_idle() {
        group.touch_idle(&resolved.context, true).await?;
    }
    Ok(())
}

/// The lease record as the store has it now (a gate may have just recorded an idle
/// pause), else the resolved one.
pub(super) async fn current(resolved: &Resolved) -> Result<Lease, RuntimeError> {
    Ok(resolved
        .store
        .get_lease(&resolved.context.lease.id)
        .await?
        .unwrap_or_else(|| resolved.context.lease.clone()))
}

impl EnvironmentRuntime {
    /// Arms the lease's idle timeout (or re-arms it with a new length): once the lease
    /// has taken no operation and run no process for `idle` (idle time does not count
    /// while it is paused), its driver ends it, whether or not any program of the holder
    /// is alive. Without the driver's idle group: `Environment driver "{key}" does not
    /// support idle timeouts.`
    pub async fn set_idle_timeout(&self, lease_id: &str, idle: Duration) -> Result<Lease, RuntimeError> {
        self.set_idle_timeout_on(lease_id, idle, OnIdle::Release).await
    }

    /// [`set_idle_timeout`](Self::set_idle_timeout), saying what the timeout does to the
    /// idle lease: with [`OnIdle::Pause`] the driver pauses it instead of ending it (the
    /// lease records `envrtOnIdle = "pause"`); a driver that cannot is refused with its
    /// own invalid-input text, and one without pause with
    /// `Environment driver "{key}" does not support pause.`
    pub async fn set_idle_timeout_on(
        &self,
        lease_id: &str,
        idle: Duration,
        on_idle: OnIdle,
    ) -> Result<Lease, RuntimeError> {
        self.traced("set_idle_timeout", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let group = gate(&resolved, Operation::Idle, |d| d.as_idle(), |_| true).await?;
            if on_idle == OnIdle::Pause {
                gate(&resolved, Operation::Pause, |d| d.as_pause(), |_| true).await?;
            }
            let millis = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
            group.arm_idle(&resolved.context, idle, on_idle).await?;
            let mut lease = current(&resolved).await?;
            if is_paused(&lease) {
                group.touch_idle(&resolved.context, true).await?;
            }
            lease.metadata.insert(IDLE_TIMEOUT_KEY.into(), millis.into());
            match on_idle {
                OnIdle::Pause => lease.metadata.insert(ON_IDLE_KEY.into(), "pause".into()),
                OnIdle::Release => lease.metadata.remove(ON_IDLE_KEY),
            };
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
            if idle_timeout(&resolved.context.lease).is_none() {
                return Err(DriverError::invalid(format!("lease \"{lease_id}\" has no idle timeout")).into());
            }
            match touch(&resolved).await {
                // Paused by its idle timeout (now recorded): kept, and still paused.
                Ok(()) | Err(RuntimeError::LeasePaused { .. }) => {}
                Err(ended @ RuntimeError::LeaseIdleEnded { .. }) => {
                    self.release_lease(lease_id, LeaseStatus::Expired).await?;
                    return Err(ended);
                }
                Err(other) => return Err(other),
            }
            let mut lease = current(&resolved).await?;
            lease.last_used_at = Timestamp::now();
            self.store.put_lease(&lease).await?;
            Ok(lease)
        })
        .await
    }
}
