//! The optional driver group behind idle timeouts and keep-alive (contract section 8,
//! "Idle timeout and keep-alive"): a lease that sees no operation and runs no process for
//! its idle timeout is ended by the driver, with no host program of the holder alive.

use std::time::Duration;

use async_trait::async_trait;

use crate::driver::LeaseContext;
use crate::error::DriverError;

/// Ending a live lease after it has been idle for a while.
#[async_trait]
pub trait IdleTimeout: Send + Sync {
    /// Arms (or re-arms with a new length) the lease's idle timeout: from now on, once
    /// `idle` has passed since the last [`touch_idle`](Self::touch_idle) while the lease
    /// runs no process and is not paused, the lease is ended as its expiry ends it.
    ///
    /// - MUST end the idle lease even when the program that armed it is gone.
    /// - MUST NOT end it while a process of the lease runs, nor while it is paused.
    /// - MUST NOT let anything inside the lease reset the clock, unless the driver
    ///   documents that its leases are not isolated from the host.
    async fn arm_idle(&self, context: &LeaseContext, idle: Duration) -> Result<(), DriverError>;

    /// Resets the idle clock; `paused` says whether the lease is paused now (idle time
    /// does not count while it is). Cheap: the facade calls it on every operation.
    ///
    /// - MUST fail with an invalid-input error when the lease's idle timeout has already
    ///   ended it (or none is armed), so the facade can record the end.
    async fn touch_idle(&self, context: &LeaseContext, paused: bool) -> Result<(), DriverError>;
}
