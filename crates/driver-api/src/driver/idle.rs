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

/// Resets a host-side activity stamp, the file whose modification time an idle watchdog
/// reads as the lease's last activity and which holds `paused` while the lease is paused
/// (the local and Docker drivers keep one per lease, out of the lease's reach).
///
/// Never creates the stamp: `Ok(false)` says it is missing, which means its watchdog has
/// ended the lease (or none was armed). At most once a second (or when the paused state
/// changes) it opens and rewrites the file; otherwise it is one `stat`.
pub fn touch_stamp(stamp: &std::path::Path, paused: bool) -> std::io::Result<bool> {
    use std::time::SystemTime;
    let Ok(meta) = std::fs::metadata(stamp) else {
        return Ok(false);
    };
    let fresh = meta
        .modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .is_some_and(|age| age < Duration::from_secs(1));
    if fresh && (meta.len() > 0) == paused {
        return Ok(true);
    }
    let Ok(file) = std::fs::File::options().write(true).truncate(!paused).open(stamp) else {
        return Ok(false);
    };
    if paused && meta.len() == 0 {
        use std::io::Write;
        (&file).write_all(b"paused")?;
    }
    file.set_modified(SystemTime::now())?;
    Ok(true)
}
