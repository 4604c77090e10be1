//! The lease's own `/tmp` and `/var/tmp` directories: siblings of the lease directory
//! (`.tmp-<lease>` and `.vartmp-<lease>`), made on first use (mode `1777`, the lease's
//! sandbox user's), kept across the lease's commands and removed with the lease directory; fresh
//! tmpfs mounts under `--fresh-tmp`. Programs that keep files in `/var/tmp` across
//! commands find it (Inspect AI injects its tools there).

use std::path::{Path, PathBuf};

use super::policy::Policy;
use super::uids::Owner;

/// Name prefix of a lease's `/tmp` directory beside its lease directory.
pub(crate) const TMP_PREFIX: &str = ".tmp-";

/// The host directory behind a lease's `/tmp`: a sibling of the lease directory, so the
/// workspace does not hold it.
pub(crate) fn tmp_of(lease_dir: &Path) -> PathBuf {
    let name = lease_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    lease_dir.with_file_name(format!("{TMP_PREFIX}{name}"))
}

/// Removes a lease directory, its `/tmp` and its `/var/tmp` (any may be gone already).
pub(crate) fn remove_lease_dir(lease_dir: &Path) -> std::io::Result<()> {
    for dir in [tmp_of(lease_dir), var_tmp_of(lease_dir)] {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    std::fs::remove_dir_all(lease_dir)
}

/// Name prefix of a lease's `/var/tmp` directory beside its lease directory.
pub(crate) const VAR_TMP_PREFIX: &str = ".vartmp-";

/// The host directory behind a lease's `/var/tmp`.
pub(crate) fn var_tmp_of(lease_dir: &Path) -> PathBuf {
    of_tmp(&tmp_of(lease_dir))
}

/// [`var_tmp_of`] from the lease's `/tmp` directory (as `bwrap` reaches either).
fn of_tmp(tmp: &Path) -> PathBuf {
    let name = tmp
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let lease = name.strip_prefix(TMP_PREFIX).unwrap_or(&name);
    tmp.with_file_name(format!("{VAR_TMP_PREFIX}{lease}"))
}

/// The `bwrap` options for `/var/tmp`, given the lease's `/tmp` directory as `bwrap`
/// reaches it (`None` under `--fresh-tmp`).
pub(crate) fn var_tmp_options(policy: &Policy, tmp: Option<&Path>) -> Vec<String> {
    match tmp {
        Some(tmp) => vec![
            "--bind".into(),
            of_tmp(tmp).to_string_lossy().into_owned(),
            "/var/tmp".into(),
        ],
        None => vec![
            "--size".into(),
            policy.tmp_bytes.to_string(),
            "--tmpfs".into(),
            "/var/tmp".into(),
        ],
    }
}

/// Makes the lease's `/tmp` and `/var/tmp` directories if they are not there yet; returns
/// the `/tmp` one.
pub(crate) fn make(owner: Owner, lease_dir: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tmp_of(lease_dir);
    for dir in [tmp.clone(), var_tmp_of(lease_dir)] {
        match std::fs::create_dir(&dir) {
            Ok(()) => {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777))?;
                owner.hand_over(&dir)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(tmp)
}
