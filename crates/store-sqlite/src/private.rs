//! The store's files are private to their owner: the database is created mode 0600 (SQLite
//! gives its `-wal` and `-shm` files the database's mode), and a database, `-wal` or `-shm`
//! file that other users may read or write is refused before SQLite opens it, since it holds
//! environment configurations (Docker `env` values, credentials among them) and lease
//! metadata.

use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use envrt_runtime_core::StoreError;

/// The mode the store's files are created with.
pub(crate) const FILE_MODE: u32 = 0o600;

/// The permission bits that let a user other than the owner read or write a file.
const SHARED_BITS: u32 = 0o066;

/// `path` with `suffix` appended to its file name (`leases.db` -> `leases.db-wal`).
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// Creates the database file mode 0600 when it is missing (an empty file is a new SQLite
/// database), then refuses the database, `-wal` or `-shm` file whose mode lets other users
/// read or write it. A missing directory is left for SQLite to report.
pub(crate) fn ensure_private(path: &Path) -> Result<(), StoreError> {
    match OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(FILE_MODE)
        .open(path)
    {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            let message = match crate::sql::file_system_refusal(path) {
                Some(why) => format!("cannot open \"{}\": its file system is {why}", path.display()),
                None => format!("cannot open \"{}\": {e}", path.display()),
            };
            return Err(StoreError {
                message,
                source: Some(Box::new(e)),
            });
        }
    }
    for file in [path.to_path_buf(), sibling(path, "-wal"), sibling(path, "-shm")] {
        let Ok(metadata) = std::fs::metadata(&file) else {
            continue;
        };
        let mode = metadata.permissions().mode() & 0o7777;
        if mode & SHARED_BITS != 0 {
            return Err(StoreError::new(shared_message(&file, mode)));
        }
    }
    Ok(())
}

/// The text of the refusal of a store file other users may read or write.
pub(crate) fn shared_message(file: &Path, mode: u32) -> String {
    format!(
        "cannot open \"{}\": its mode {mode:04o} lets other users read or write the lease store; make it private with chmod 600",
        file.display()
    )
}
