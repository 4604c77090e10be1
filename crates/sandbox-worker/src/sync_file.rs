//! Copying one regular file of a sync: opened without following a link, created `0600`
//! and given its final mode before it is renamed anywhere visible, its holes kept and its
//! bytes charged to the entry's bound.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use envrt_driver_api::DriverError;
use envrt_driver_files::sparse::{ByteBudget, CopyError, copy_file_sparse};

use super::sync::io;

/// Copies one regular file; the copy is created 0600 and gets its final mode before it is
/// renamed anywhere visible.
pub(crate) fn copy_file(
    source: &Path,
    dest: &Path,
    mode: u32,
    budget: &mut ByteBudget,
    source_display: &str,
) -> Result<u64, DriverError> {
    let flags = (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits();
    let mut input = OpenOptions::new()
        .read(true)
        .custom_flags(flags as i32)
        .open(source)
        .map_err(|e| io("Opening", source, e))?;
    let meta = input.metadata().map_err(|e| io("Reading", source, e))?;
    if !meta.is_file() {
        return Err(DriverError::invalid(format!(
            "{} is not a regular file",
            source.display()
        )));
    }
    let mut output: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dest)
        .map_err(|e| io("Creating", dest, e))?;
    // Holes stay holes; every byte is charged to the entry's bound.
    let bytes = match copy_file_sparse(&mut input, &mut output, budget) {
        Ok(bytes) => bytes,
        Err(CopyError::OverLimit) => {
            return Err(DriverError::SyncTooLarge {
                path: source_display.to_owned(),
                limit: budget.limit(),
            });
        }
        Err(CopyError::Io(e)) => return Err(io("Copying to", dest, e)),
    };
    output
        .set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| io("Setting mode of", dest, e))?;
    Ok(bytes)
}
