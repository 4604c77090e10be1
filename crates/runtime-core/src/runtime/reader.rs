//! An attached reader is idle-time activity (contract section 8, "Idle timeout and
//! keep-alive"): while a [`ProcessOutputStream`](super::ProcessOutputStream) of a lease
//! with an idle timeout is open, a [`ReaderKeeper`] resets the lease's idle clock.
//!
//! Opening the stream is a gated operation and resets the clock already. From then on
//! the keeper touches it every [`interval`] (a third of the timeout, 200 ms to 60 s), so
//! the driver's watchdog never finds the clock run out while the reader is there: one
//! touch per interval whatever the output, none per chunk. It skips a lease the store no
//! longer has as active or has as paused (idle time does not count while paused, and a
//! touch must not tell the driver the lease runs), and stops once the driver says the
//! lease has ended. It stops when the stream reaches the process's exit and when the
//! stream is dropped; a reader whose program dies (a `SIGKILL`ed `envrt logs --follow`)
//! takes its keeper with it, and the lease is idle again from its last touch.

use std::sync::Arc;
use std::time::Duration;

use crate::driver::{EnvironmentDriver, LeaseContext};
use crate::error::DriverError;
use crate::model::LeaseStatus;
use crate::store::LeaseStore;

use super::Resolved;
use super::idle::idle_timeout;
use super::pause::is_paused;

/// The shortest and longest time between two touches of a reader.
const MIN_INTERVAL: Duration = Duration::from_millis(200);
const MAX_INTERVAL: Duration = Duration::from_secs(60);

/// How often a reader touches the idle clock of a lease whose idle timeout is `idle`.
pub(super) fn interval(idle: Duration) -> Duration {
    (idle / 3).clamp(MIN_INTERVAL, MAX_INTERVAL)
}

/// Keeps the idle clock of a reader's lease fresh while it lives.
pub(super) struct ReaderKeeper {
    task: tokio::task::JoinHandle<()>,
}

impl ReaderKeeper {
    /// A keeper for the resolved lease, when it has an idle timeout and its driver the
    /// idle group; none otherwise (and outside a tokio runtime).
    pub(super) fn start(resolved: &Resolved) -> Option<ReaderKeeper> {
        let idle = idle_timeout(&resolved.context.lease)?;
        resolved.driver.as_idle()?;
        let handle = tokio::runtime::Handle::try_current().ok()?;
        let task = handle.spawn(keep(
            resolved.driver.clone(),
            resolved.context.clone(),
            resolved.store.clone(),
            interval(idle),
        ));
        Some(ReaderKeeper { task })
    }
}

impl Drop for ReaderKeeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The keeper's loop: a touch every `every` while the store has the lease active and not
/// paused, until the driver says its idle timeout (or anything else) ended it.
async fn keep(driver: Arc<dyn EnvironmentDriver>, context: LeaseContext, store: Arc<dyn LeaseStore>, every: Duration) {
    let id = context.lease.id.clone();
    loop {
        tokio::time::sleep(every).await;
        let Some(group) = driver.as_idle() else { return };
        match store.get_lease(&id).await {
            Ok(Some(lease)) if lease.status != LeaseStatus::Active => return,
            Ok(Some(lease)) if is_paused(&lease) => continue,
            Ok(None) => return,
            Ok(Some(_)) | Err(_) => {}
        }
        match group.touch_idle(&context, false).await {
            Ok(_) => {}
            // Ended (or disarmed): nothing more to keep.
            Err(DriverError::InvalidInput { .. }) => return,
            Err(error) => {
                tracing::warn!(lease_id = %id, %error, "a reader cannot reset the lease's idle clock");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_touches_three_times_per_timeout_within_bounds() {
        assert_eq!(interval(Duration::from_secs(2)), Duration::from_nanos(666_666_666));
        assert_eq!(interval(Duration::from_millis(300)), MIN_INTERVAL);
        assert_eq!(interval(Duration::from_secs(3600)), MAX_INTERVAL);
        assert_eq!(interval(Duration::from_secs(90)), Duration::from_secs(30));
    }
}
