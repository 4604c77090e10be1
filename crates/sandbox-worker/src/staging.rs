//! Staging names beside a sync target and the rename that puts a staged entry in place
//! (a replaced directory moved aside first and put back on failure).

use std::fs;
use std::path::{Path, PathBuf};

use envrt_driver_api::DriverError;

fn io(context: &str, path: &Path, e: std::io::Error) -> DriverError {
    DriverError::io(format!("{context} {}", path.display()), e)
}

/// A fresh hidden name in `dir`.
pub(crate) fn staging_name(dir: &Path) -> PathBuf {
    dir.join(format!(".envrt-sync-{}", uuid::Uuid::new_v4()))
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

/// Renames `staged` onto `target`, replacing whatever is there; a replaced directory is
/// moved to `scratch` first and removed there.
pub(crate) fn replace(staged: &Path, target: &Path, scratch: &Path) -> Result<(), DriverError> {
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
