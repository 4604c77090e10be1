//! The optional driver group behind pause and unpause (contract section 8, "Pause and
//! unpause"): every process of a lease stopped without ending the lease, and continued
//! again. Named apart from [`ResumeLease`](crate::ResumeLease), which brings back an
//! ended, reusable lease.

use async_trait::async_trait;

use crate::driver::LeaseContext;
use crate::error::DriverError;

/// Pausing and unpausing a live lease.
#[async_trait]
pub trait PauseLease: Send + Sync {
    /// Stops every process of the lease where it stands (a frozen cgroup, a paused
    /// container, stopped process groups), without ending any of them.
    ///
    /// Before the call the facade has checked that the driver has the group, that the
    /// lease is not past its expiry, that it is active (section 3) and not paused already
    /// (pausing a paused lease is a no-op that never reaches the driver).
    ///
    /// - MUST leave no process of the lease making progress once it returns (the kit's
    ///   `pause_stops_progress`).
    /// - MUST keep every process and its output buffers: after
    ///   [`unpause_lease`](Self::unpause_lease) they go on where they stood.
    /// - MUST keep release, destroy and the lease's expiry working on the paused lease:
    ///   they end its processes as they would a running lease's (a driver whose expiry
    ///   cannot reach a paused lease refuses to pause one that has an expiry).
    async fn pause_lease(&self, context: &LeaseContext) -> Result<(), DriverError>;

    /// Continues every process [`pause_lease`](Self::pause_lease) stopped.
    ///
    /// Before the call the facade has checked the group, expiry and activity as for a
    /// pause, and that the lease is paused (unpausing a running lease is a no-op).
    ///
    /// - MUST let every process of the lease make progress again (`pause_stops_progress`).
    async fn unpause_lease(&self, context: &LeaseContext) -> Result<(), DriverError>;
}
