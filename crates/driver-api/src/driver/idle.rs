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
    ///
    /// With [`OnIdle::Pause`] the idle lease is paused instead (its processes stopped as
    /// [`PauseLease`](crate::PauseLease) stops them), with no holder alive, and the clock
    /// reports [`IdleClock::PausedWhileIdle`] until the facade acknowledges the pause; a
    /// driver that cannot do that refuses with an invalid-input error.
    async fn arm_idle(&self, context: &LeaseContext, idle: Duration, on_idle: OnIdle) -> Result<(), DriverError>;

    /// Resets the idle clock; `paused` says whether the lease is paused now (idle time
    /// does not count while it is). Cheap: the facade calls it on every operation.
    ///
    /// - MUST fail with an invalid-input error when the lease's idle timeout has already
    ///   ended it (or none is armed), so the facade can record the end.
    /// - MUST answer [`IdleClock::PausedWhileIdle`], and reset nothing, when the idle
    ///   timeout has paused the lease (`on_idle = "pause"`) and `paused` is false (the
    ///   facade does not know yet); with `paused` true the pause is acknowledged and the
    ///   lease counts as paused by the facade from then on.
    async fn touch_idle(&self, context: &LeaseContext, paused: bool) -> Result<IdleClock, DriverError>;
}

/// What an idle timeout does to an idle lease.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnIdle {
    /// Ends it, as its expiry would (`on_idle = "release"`, the default).
    #[default]
    Release,
    /// Pauses it (`on_idle = "pause"`).
    Pause,
}

/// What a touch of the idle clock found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleClock {
    /// The clock was reset (or the lease is paused and the facade knows it).
    Reset,
    /// The idle timeout has paused the lease; the clock was not reset.
    PausedWhileIdle,
}

/// The content of an activity stamp whose lease the idle watchdog paused.
pub const IDLE_PAUSED_STAMP: &[u8] = b"idle-paused";

/// Resets a host-side activity stamp, the file whose modification time an idle watchdog
/// reads as the lease's last activity and which holds `paused` while the lease is paused
/// (the local and Docker drivers keep one per lease, out of the lease's reach), or
/// [`IDLE_PAUSED_STAMP`] once the watchdog paused the idle lease itself.
///
/// Never creates the stamp: `Ok(None)` says it is missing, which means its watchdog has
/// ended the lease (or none was armed). A stamp the watchdog paused is left as it is
/// while `paused` is false ([`IdleClock::PausedWhileIdle`]) and acknowledged (rewritten
/// `paused`) once it is true. At most once a second (or when the paused state changes)
/// it opens and rewrites the file; otherwise it is one `stat` (and a read of a non-empty
/// stamp).
pub fn touch_stamp(stamp: &std::path::Path, paused: bool) -> std::io::Result<Option<IdleClock>> {
    use std::io::Write;
    use std::time::SystemTime;
    let Ok(meta) = std::fs::metadata(stamp) else {
        return Ok(None);
    };
    let idle_paused = meta.len() > 0 && std::fs::read(stamp).is_ok_and(|text| text == IDLE_PAUSED_STAMP);
    if idle_paused && !paused {
        return Ok(Some(IdleClock::PausedWhileIdle));
    }
    let fresh = meta
        .modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .is_some_and(|age| age < Duration::from_secs(1));
    if fresh && !idle_paused && (meta.len() > 0) == paused {
        return Ok(Some(IdleClock::Reset));
    }
    let Ok(file) = std::fs::File::options().write(true).truncate(true).open(stamp) else {
        return Ok(None);
    };
    if paused {
        (&file).write_all(b"paused")?;
    }
    file.set_modified(SystemTime::now())?;
    Ok(Some(IdleClock::Reset))
}
