//! Forking a live lease into copies: an optional driver group, [`ForkLease`], reached
//! through [`EnvironmentDriver::as_fork`](crate::EnvironmentDriver::as_fork) (contract
//! section 8, "Fork").

use async_trait::async_trait;

use super::{AcquireInput, LeaseContext, LeaseGrant};
use crate::error::DriverError;

/// The most copies one fork makes; the facade refuses a larger count before any driver
/// is called (`Invalid input: a fork makes at most 16 copies, not {count}`).
pub const MAX_FORK_COUNT: usize = 16;

/// The lease metadata key that records, on each copy, the id of the lease it was forked
/// from (the facade writes it).
pub const FORKED_FROM_KEY: &str = "forkedFrom";

/// The fork group: new leases whose workspace is the source lease's state at the fork
/// point.
#[async_trait]
pub trait ForkLease: Send + Sync {
    /// Makes one new lease per entry of `copies`, each seeded with the state of
    /// `source`'s workspace (on a container driver, its whole file system) as it is at
    /// the call, and returns their grants in the same order.
    ///
    /// Needs no capability key (fork is a group). Before the call the facade has checked,
    /// in the gate's order, that the driver has the group (else `Environment driver
    /// "{key}" does not support lease fork.`), that the source is not past its expiry and
    /// that it is active (section 3), and that the count is between 1 and
    /// [`MAX_FORK_COUNT`]. Each [`AcquireInput`] carries the copy's new id, the source's
    /// tenant, environment, policy, network policy and the source's expiry, which each
    /// copy MUST honour as an acquire does.
    ///
    /// - All copies MUST show the same state, the source's at the fork point; what the
    ///   source or one copy writes afterwards MUST NOT reach another.
    /// - The source MUST stay unchanged and usable; its processes keep running and are
    ///   NOT copied: a copy starts with no process.
    /// - MUST be all or nothing: when copy `k` fails, every copy made so far is ended
    ///   before the error returns, and nothing of them (a directory, a container, an
    ///   image) is left.
    /// - Whatever the copies share (a committed image) MUST be removed when the last
    ///   copy ends.
    async fn fork_lease(&self, source: &LeaseContext, copies: &[AcquireInput]) -> Result<Vec<LeaseGrant>, DriverError>;
}
