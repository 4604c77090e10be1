//! The start lock of a lease's supervisor, the same for every driver that starts one on
//! this host: two programs spawning at once in a lease with no supervisor start one.

use std::fs::File;
use std::path::PathBuf;

use envrt_driver_api::DriverError;

/// Takes the exclusive `flock` on `path` (made when missing), waiting for whoever holds
/// it; released when the returned file is dropped. `path` must be out of the lease's reach
/// (a command that could replace it could hold the start up).
pub async fn start_lock(path: PathBuf) -> Result<File, DriverError> {
    tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
        Ok::<_, std::io::Error>(file)
    })
    .await
    .map_err(|e| DriverError::other(format!("the start lock task failed: {e}")))?
    .map_err(|e| DriverError::io("cannot lock the process supervisor's start", e))
}
