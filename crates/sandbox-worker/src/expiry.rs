//! Lease expiry in the reference worker. A lease acquired with `requestedExpiresAt` is
//! bounded at exactly that time (returned as `expiresAt`): the worker records the expiry
//! next to the lease directory (`{root}/.expiry-{lease id}`, milliseconds since the epoch)
//! and arms a timer that, at the expiry, kills every sandbox of the lease and removes its
//! directory and the record.
//!
//! Every worker started over a root re-arms the timers of the records it finds (one whose
//! time has passed fires at once), so a worker restarted by its host after a crash, or the
//! next worker of a later host process (`envrt gc` starts one), ends what a dead worker
//! left. A worker's sandboxes never outlive it (`bwrap --die-with-parent`, and the host
//! kills the worker's cgroup), but for the lease's process supervisor, which does (see
//! `supervisor`): the timer ends it from its record, whichever worker started it.
//! Release and destroy disarm the timer and remove the record (a released reusable lease
//! keeps its files); a timer whose record is gone when it fires (another worker over the
//! same root released the lease) does nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use envrt_driver_api::{DriverError, Timestamp};

use super::sandbox::Sandbox;

/// Prefix of the expiry records in the root.
pub(crate) const RECORD_PREFIX: &str = ".expiry-";

/// The pending expiries of the leases under one root: their timers.
#[derive(Default)]
pub(crate) struct Expiries {
    timers: Mutex<HashMap<PathBuf, tokio::task::AbortHandle>>,
}

fn record_of(lease_dir: &Path) -> Option<PathBuf> {
    let name = lease_dir.file_name()?.to_str()?;
    Some(lease_dir.parent()?.join(format!("{RECORD_PREFIX}{name}")))
}

impl Expiries {
    /// Bounds the lease at `dir` at `at`: records the expiry and arms its timer.
    pub(crate) fn watch(&self, sandbox: &Arc<Sandbox>, dir: &Path, at: Timestamp) -> Result<(), DriverError> {
        let record = record_of(dir).ok_or_else(|| DriverError::invalid("the lease directory has no name"))?;
        std::fs::write(&record, at.0.to_string())
            .map_err(|e| DriverError::io(format!("Recording the lease expiry in {}", record.display()), e))?;
        self.arm(sandbox, dir, at);
        Ok(())
    }

    fn arm(&self, sandbox: &Arc<Sandbox>, dir: &Path, at: Timestamp) {
        let left = at.0.saturating_sub(Timestamp::now().0);
        let (sandbox, owned) = (Arc::clone(sandbox), dir.to_path_buf());
        let timer = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(left)).await;
            // The record decides: another worker over the same root may have released the
            // lease meanwhile (and dropped the record).
            let Some(record) = record_of(&owned).filter(|r| r.exists()) else {
                return;
            };
            sandbox.kill_lease(&owned);
            // its supervisor too, whichever worker started it
            super::supervisor::end(&owned, false);
            super::egress::end(&owned);
            let _ = super::sandbox::remove_lease_dir(&owned);
            let _ = std::fs::remove_file(record);
        });
        let previous = self
            .timers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(dir.to_path_buf(), timer.abort_handle());
        if let Some(previous) = previous {
            previous.abort();
        }
    }

    /// Re-arms the timer of every expiry recorded under `root` (a worker's start); drops
    /// the records of leases that are gone.
    pub(crate) fn rearm(&self, sandbox: &Arc<Sandbox>, root: &Path) {
        let Ok(entries) = std::fs::read_dir(root) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_prefix(RECORD_PREFIX)) else {
                continue;
            };
            let dir = root.join(id);
            let at = std::fs::read_to_string(entry.path())
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok());
            match at {
                Some(at) if dir.is_dir() => self.arm(sandbox, &dir, Timestamp(at)),
                _ => {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }

    /// Disarms the lease's timer and drops its record (release and destroy).
    pub(crate) fn forget(&self, dir: &Path) {
        if let Some(timer) = self.timers.lock().unwrap_or_else(|p| p.into_inner()).remove(dir) {
            timer.abort();
        }
        if let Some(record) = record_of(dir) {
            let _ = std::fs::remove_file(record);
        }
    }
}
