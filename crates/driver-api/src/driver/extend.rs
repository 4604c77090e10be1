//! The optional driver group behind moving a lease's expiry (contract section 8,
//! "Idle timeout and keep-alive", `extend`): a driver whose expiry is enforced by
//! something it can re-arm (the local driver's expiry watchdog) moves it; one whose expiry
//! is fixed when the lease is made (a Docker container's own `sleep`) lacks the group.

use async_trait::async_trait;

use crate::driver::LeaseContext;
use crate::error::DriverError;
use crate::model::Timestamp;

/// Moving a live lease's expiry.
#[async_trait]
pub trait ExtendLease: Send + Sync {
    /// Moves the lease's expiry to `expires_at` (later or earlier; the facade has checked
    /// that it lies in the future and within the environment's `max_ttl`) and returns the
    /// expiry the driver now guarantees (at or before `expires_at`).
    ///
    /// - MUST end the lease at the returned expiry with no host program of the holder
    ///   alive, as at the expiry it had; MUST NOT leave the old expiry armed.
    async fn extend_lease(&self, context: &LeaseContext, expires_at: Timestamp) -> Result<Timestamp, DriverError>;
}
