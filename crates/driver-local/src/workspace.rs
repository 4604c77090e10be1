//! Lease workspaces on disk: where a lease's directory lives, how an environment-side path
//! is confined to it (lexically, then against the real file system so that an existing
//! symlink cannot lead out), and removal that does not trip over read-only directories.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use envrt_driver_api::sync::{confine_to_workspace, is_within};
use envrt_driver_api::{DriverError, PathScope};

use crate::LocalDriver;

/// Prefix of every lease directory under the root.
pub(crate) const LEASE_DIR_PREFIX: &str = "lease-";

/// The directory name of a lease: `lease-{id}`. Ids are minted by the runtime (UUIDs);
/// anything that could name another place (`/`, `..`, control bytes) is refused.
pub(crate) fn lease_dir_name(lease_id: &str) -> Result<String, DriverError> {
    let ok = !lease_id.is_empty()
        && lease_id.len() <= 128
        && lease_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(format!("{LEASE_DIR_PREFIX}{lease_id}"))
    } else {
        Err(DriverError::invalid(format!(
            "lease id {lease_id:?} cannot name a local workspace (allowed: ASCII letters, digits, '-' and '_')"
        )))
    }
}

/// Creates a private (0700) directory; fails when it exists.
pub(crate) fn create_private_dir(path: &Path) -> io::Result<()> {
    fs::DirBuilder::new().mode(0o700).create(path)
}

/// The UTF-8 text of a path, or an invalid-input error.
pub(crate) fn path_str(path: &Path) -> Result<&str, DriverError> {
    path.to_str()
        .ok_or_else(|| DriverError::invalid(format!("path {} is not valid UTF-8", path.display())))
}

/// Resolves an environment-side `path` inside the workspace `root` (canonical, absolute):
/// lexically first ([`confine_to_workspace`]), then on disk: the longest existing prefix of
/// the result is canonicalized and must still lie inside `root`, so no existing symlink
/// component (including the last one) leads out. Refusals are
/// [`DriverError::PathOutsideWorkspace`] naming `path` as given.
pub(crate) fn resolve_in_workspace(root: &Path, path: &str) -> Result<PathBuf, DriverError> {
    let root_str = path_str(root)?;
    let confined = confine_to_workspace(root_str, path)?;
    check_no_escape(root, Path::new(&confined), path)?;
    Ok(PathBuf::from(confined))
}

/// Checks that the longest existing prefix of `candidate` (absolute, lexically inside
/// `root`) resolves inside `root` on disk.
pub(crate) fn check_no_escape(root: &Path, candidate: &Path, shown: &str) -> Result<(), DriverError> {
    let outside = || DriverError::PathOutsideWorkspace { path: shown.to_owned() };
    let mut probe = candidate.to_path_buf();
    loop {
        match fs::symlink_metadata(&probe) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::NotADirectory => {
                if !probe.pop() {
                    return Err(outside());
                }
            }
            Err(e) => return Err(DriverError::io(format!("cannot inspect {}", probe.display()), e)),
        }
    }
    let real = match fs::canonicalize(&probe) {
        Ok(real) => real,
        // A dangling link (or a loop): it names something we cannot see; refuse.
        Err(_) => return Err(outside()),
    };
    let real = real.to_str().ok_or_else(outside)?;
    let root = root.to_str().ok_or_else(outside)?;
    if is_within(root, real) { Ok(()) } else { Err(outside()) }
}

/// Removes a file or tree; a missing path is success. Directories whose mode would stop
/// the removal (no write or search permission) are opened up first.
pub(crate) fn remove_tree(path: &Path) -> io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.is_dir() {
        return ignore_missing(fs::remove_file(path));
    }
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(_) => {
            open_up(path);
            ignore_missing(fs::remove_dir_all(path))
        }
    }
}

fn ignore_missing(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Gives the owner rwx on every directory of a tree (links are not followed). Iterative,
/// so a tree of any depth is fine.
fn open_up(top: &Path) {
    let mut pending = vec![top.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let _ = fs::set_permissions(&dir, fs::Permissions::from_mode(0o700));
        if let Ok(entries) = fs::read_dir(&dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    pending.push(entry.path());
                }
            }
        }
    }
}

impl LocalDriver {
    /// Resolves an environment-side sync path under the configured path scope: inside the
    /// workspace (lexically and on disk) by default; lexically anywhere on the host under
    /// the host scope.
    pub(crate) fn resolve_path(&self, workspace: &Path, path: &str) -> Result<PathBuf, DriverError> {
        if self.config().path_scope.any_file_path() {
            Ok(PathBuf::from(
                PathScope::WholeEnvironment.resolve(path_str(workspace)?, path)?,
            ))
        } else {
            resolve_in_workspace(workspace, path)
        }
    }

    /// Resolves a command's `cwd` under the configured path scope.
    pub(crate) fn resolve_cwd(&self, workspace: &Path, cwd: &str) -> Result<PathBuf, DriverError> {
        if self.config().path_scope.any_cwd() {
            Ok(PathBuf::from(
                PathScope::WholeEnvironment.resolve(path_str(workspace)?, cwd)?,
            ))
        } else {
            resolve_in_workspace(workspace, cwd)
        }
    }

    /// The workspace sync paths must stay in, or `None` under the host scope.
    pub(crate) fn confinement<'a>(&self, workspace: &'a Path) -> Option<&'a Path> {
        (!self.config().path_scope.any_file_path()).then_some(workspace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_dir_names_refuse_anything_path_like() {
        assert_eq!(lease_dir_name("abc-123_x").unwrap(), "lease-abc-123_x");
        for bad in ["", "../x", "a/b", ".", "a b", "é"] {
            let err = lease_dir_name(bad).unwrap_err();
            assert!(matches!(err, DriverError::InvalidInput { .. }), "{bad}");
        }
    }
}
