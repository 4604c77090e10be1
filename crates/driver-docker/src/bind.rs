//! The opt-in bind-mounted workspace ([`WorkspaceMount::Bind`]): each lease's workspace is
//! a host directory `{bind_root}/{container name}` mounted at the workspace path. The
//! base directory is the driver's own (made mode 0700, refused when it is a link or not
//! a directory), so no other host user can reach anything a container makes in a lease
//! directory (a setuid file included). Files still move through the engine's archive
//! API only; the host side never opens a path inside a lease directory, it only makes,
//! hands over (`chown` to the command user) and removes ([`std::fs::remove_dir_all`]
//! never follows links) the directory itself.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use envrt_driver_api::DriverError;

use crate::config::{DockerConfig, WorkspaceMount};

/// The host directory of the lease whose container is named `name`, when the driver binds
/// workspaces.
pub(crate) fn lease_dir(config: &DockerConfig, name: &str) -> Option<PathBuf> {
    (config.workspace_mount == WorkspaceMount::Bind).then(|| config.resolved_bind_root().join(name))
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> DriverError {
    DriverError::other(format!(
        "Could not {what} the workspace directory \"{}\": {e}",
        path.display()
    ))
}

/// What the base of the bind-mounted workspaces is called in a refusal.
pub(crate) const WORKSPACE_ROOT: &str = "Docker workspace bind root";

/// Makes the base directory (mode 0700) when missing and refuses one that is a link, not
/// a directory, or not the driver's own with mode 0700 (`root_name` says which base it is:
/// [`WORKSPACE_ROOT`], or the process supervisors' of [`crate::processes`]); then makes
/// the lease directory `dir`, which must not exist yet.
pub(crate) fn create(dir: &Path, root_name: &str) -> Result<(), DriverError> {
    let Some(root) = dir.parent() else {
        return Err(io_error("place", dir, std::io::Error::other("it has no parent")));
    };
    match std::fs::symlink_metadata(root) {
        Ok(meta) if meta.is_dir() => {
            // The driver's own: owned by this process's user (`/proc/self` is), no access
            // for anybody else. Never changed here: a configured directory is the
            // operator's to fix.
            let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
            if me.is_some_and(|me| me != meta.uid()) || meta.mode() & 0o077 != 0 {
                return Err(DriverError::other(format!(
                    "The {root_name} \"{}\" must belong to the driver's user with mode 0700, it has owner {} and mode {:o}.",
                    root.display(),
                    meta.uid(),
                    meta.mode() & 0o7777
                )));
            }
        }
        Ok(_) => {
            return Err(DriverError::other(format!(
                "The {root_name} \"{}\" is not a directory (a link or a file).",
                root.display()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(root)
                .map_err(|e| io_error("create the base of", dir, e))?;
            // The mode asked for is masked by the umask; 0700 is never widened by it.
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| io_error("protect the base of", dir, e))?;
        }
        Err(e) => return Err(io_error("inspect the base of", dir, e)),
    }
    // Never an existing one: lease ids are unique, so it would be another lease's.
    std::fs::create_dir(dir).map_err(|e| io_error("create", dir, e))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).map_err(|e| io_error("set up", dir, e))
}

/// Hands the lease directory to the container's command user.
pub(crate) fn give(dir: &Path, owner: (u64, u64)) -> Result<(), DriverError> {
    let id = |n: u64| u32::try_from(n).ok();
    std::os::unix::fs::chown(dir, id(owner.0), id(owner.1)).map_err(|e| io_error("hand over", dir, e))
}

/// Removes the lease directory and everything in it; a missing one is fine.
pub(crate) fn remove(dir: &Path) -> Result<(), DriverError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error("remove", dir, e)),
    }
}

/// Removes the lease directory a failed acquire made, if it made one.
pub(crate) fn remove_made(dir: Option<&Path>) {
    if let Some(dir) = dir
        && let Err(error) = remove(dir)
    {
        tracing::warn!(%error, "removing a failed acquire's workspace directory failed");
    }
}
