//! Staging names beside a sync target, the atomic exchange that puts a staged entry in
//! place, and the sweep of what a worker killed mid-sync left staged.
//!
//! A staging name carries its writer's pid (`.envrt-sync-{pid}-{uuid}`), so a later worker
//! can tell an entry whose writer died (SIGKILLed mid-copy: nothing of it was renamed
//! anywhere visible) from one a live worker is still filling, and remove it
//! ([`sweep_dead`]; a recycled pid only delays that, it never removes a live entry).

use std::fs;
use std::path::{Path, PathBuf};

use envrt_driver_api::DriverError;

/// The prefix of every staging and trash name.
const PREFIX: &str = ".envrt-sync-";

fn io(context: &str, path: &Path, e: std::io::Error) -> DriverError {
    DriverError::io(format!("{context} {}", path.display()), e)
}

/// A fresh hidden name in `dir`, naming this process (`.envrt-sync-{pid}-{uuid}`).
pub(crate) fn staging_name(dir: &Path) -> PathBuf {
    dir.join(format!(
        "{PREFIX}{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ))
}

/// Removes, from `dir`, every staging entry whose writer is gone (a worker killed
/// mid-sync); best effort, entries of live writers and every other name are kept.
pub(crate) fn sweep_dead(dir: &Path) {
    envrt_driver_files::stale::remove_entries_of_dead_pids(dir, PREFIX);
}

/// A sync's I/O failure because the file system it writes (the host target's for a sync
/// out, the lease's for a sync in) is full or read-only, typed
/// ([`DriverError::HostFileSystem`] / [`DriverError::LeaseFileSystem`], the texts local
/// and Docker give; the staged entry is already removed). Any other error passes
/// unchanged.
pub(crate) fn file_system(error: DriverError, direction: crate::sync::Direction, target: &str) -> DriverError {
    let DriverError::Io { source, .. } = &error else {
        return error;
    };
    let why = match source.kind() {
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => "full",
        std::io::ErrorKind::ReadOnlyFilesystem => "read-only",
        _ => return error,
    };
    let target = target.to_owned();
    match direction {
        crate::sync::Direction::Out => DriverError::HostFileSystem { target, why },
        crate::sync::Direction::In => DriverError::LeaseFileSystem { target, why },
    }
}

/// Removes our own staging or trash entry, whatever it is.
pub(crate) fn remove_any(path: &Path) {
    // Best effort clean-up of our own staging or trash entry.
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            let _ = fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = fs::remove_file(path);
        }
        Err(_) => {}
    }
}

/// The worker's fault point of `operation` (`sync_in`, `sync_out`): it SIGKILLs itself
/// there when the test hook `ENVRT_TEST_ABORT_AT` names this point.
pub(crate) fn fault_point(operation: &'static str) {
    if envrt_driver_api::fault::reached(operation) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}

/// Puts `staged` at `target`, replacing whatever is there in one atomic step: the two are
/// exchanged (`renameat2` `RENAME_EXCHANGE`), then the previous target, now at the staged
/// name, is removed. A process killed at any moment leaves `target` either as it was or
/// complete. Where the file system cannot exchange, a replaced directory is moved to
/// `scratch` first and put back on failure (not atomic against a kill).
pub(crate) fn replace(
    staged: &Path,
    target: &Path,
    scratch: &Path,
    operation: &'static str,
) -> Result<(), DriverError> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    match renameat_with(CWD, staged, CWD, target, RenameFlags::EXCHANGE) {
        Ok(()) => {
            fault_point(operation);
            remove_any(staged);
            return Ok(());
        }
        // nothing to replace: a plain rename
        Err(rustix::io::Errno::NOENT) if fs::symlink_metadata(target).is_err() => {
            return fs::rename(staged, target).map_err(|e| io("Renaming into", target, e));
        }
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS | rustix::io::Errno::OPNOTSUPP) => {}
        Err(e) => return Err(io("Renaming into", target, e.into())),
    }
    let existing = fs::symlink_metadata(target).ok();
    let staged_is_dir = fs::symlink_metadata(staged).is_ok_and(|m| m.is_dir());
    let trash = match existing {
        Some(m) if m.is_dir() || staged_is_dir => {
            let trash = staging_name(scratch);
            fs::rename(target, &trash).map_err(|e| io("Moving aside", target, e))?;
            Some(trash)
        }
        _ => None,
    };
    if let Err(e) = fs::rename(staged, target) {
        if let Some(trash) = &trash {
            // Put the previous target back: the failure must not lose it.
            let _ = fs::rename(trash, target);
        }
        return Err(io("Renaming into", target, e));
    }
    if let Some(trash) = trash {
        remove_any(&trash);
    }
    Ok(())
}
