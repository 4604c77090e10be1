//! How `envrt cp` puts a copied tree into a directory that already exists without deleting
//! anything there that the copy does not name.
//!
//! The library's sync replaces its target whole (the contract's section 6), so a merge is
//! built on top of it in two steps: the tree is first synced complete into a fresh staging
//! directory *inside* the destination directory (same filesystem, same path scope), and
//! only then moved into place entry by entry, each by one `rename` (a file or link of the
//! same name is replaced atomically; a directory of the same name is merged into; nothing
//! else is touched). A transfer that fails leaves the destination as it was; a move that
//! stops half-way leaves every entry either old or new, never gone, and what was not moved
//! yet stays in the staging directory, which the error names. A directory in the copy over
//! a non-directory of the same name (or the reverse) is refused before anything moves.
//!
//! On the host the moves are done here; in the lease, by a small `sh` script run through
//! execute as the lease's own command user (it can do nothing the lease's commands cannot).

use std::io;
use std::path::{Path, PathBuf};

use envrt::{EnvironmentRuntime, ExecuteRequest};

use crate::error::CliError;

/// `SRC/.` (or `.`): the source names its directory's content. The path without the `/.`.
pub(crate) fn content_form(path: &str) -> Option<&str> {
    if path == "." {
        return Some(".");
    }
    path.strip_suffix("/.").map(|p| if p.is_empty() { "/" } else { p })
}

/// The last component of a lease path, unless it is none of a name (`/`, `.`, `..`).
pub(crate) fn lease_basename(path: &str) -> Option<&str> {
    let name = path.trim_end_matches('/').rsplit('/').next()?;
    (!name.is_empty() && name != "." && name != "..").then_some(name)
}

/// `base/name`, for a path as the user wrote it or a lease path.
pub(crate) fn join_shown(base: &str, name: &str) -> String {
    format!("{}/{name}", base.trim_end_matches('/'))
}

/// A lease path that cannot be looked at is not merged into blindly.
pub(crate) fn cannot_look(shown: &str) -> CliError {
    CliError::Usage(format!(
        "envrt: cannot look at \"{shown}\" in the lease (it runs no sh probe), so envrt cp does not merge into it; pass --replace to replace it whole"
    ))
}

/// A file SRC to a missing DST that ends in `/`.
pub(crate) fn missing_directory(shown: &str) -> CliError {
    CliError::Usage(format!(
        "envrt: \"{shown}\" does not exist: a destination ending in / must be an existing directory"
    ))
}

/// A name for a staging directory no one else uses.
pub(crate) fn staging_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(".envrt-cp-{}-{nanos}", std::process::id())
}

/// The refusal of a directory of the copy over a non-directory.
pub(crate) fn not_a_directory(shown: &str) -> CliError {
    CliError::Usage(format!(
        "envrt: \"{shown}\" exists and is not a directory: a copied directory does not replace it"
    ))
}

/// The refusal of a file of the copy over a directory (inside a merge).
pub(crate) fn is_a_directory(shown: &str) -> CliError {
    CliError::Usage(format!(
        "envrt: \"{shown}\" is a directory: a copied file of that name does not replace it"
    ))
}

/// A move that stopped half-way: nothing is lost, the rest waits in `staging`.
fn stopped(shown: &str, error: &str, staging: &str) -> CliError {
    CliError::Failure(format!(
        "envrt: merging into \"{shown}\" stopped: {error}; what was not moved yet is in \"{staging}\""
    ))
}

fn is_real_dir(path: &Path) -> Option<bool> {
    std::fs::symlink_metadata(path).ok().map(|m| m.is_dir())
}

/// The first entry of `from` whose kind clashes with the entry of the same name below
/// `to`: `(path below to, the path there is a directory)`.
fn host_conflict(from: &Path, to: &Path) -> io::Result<Option<(PathBuf, bool)>> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let source_dir = entry.file_type()?.is_dir();
        match (source_dir, is_real_dir(&target)) {
            (true, Some(true)) => {
                if let Some(found) = host_conflict(&entry.path(), &target)? {
                    return Ok(Some(found));
                }
            }
            (true, Some(false)) => return Ok(Some((target, false))),
            (false, Some(true)) => return Ok(Some((target, true))),
            _ => {}
        }
    }
    Ok(None)
}

fn host_move(from: &Path, to: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() && is_real_dir(&target) == Some(true) {
            host_move(&entry.path(), &target)?;
            std::fs::remove_dir(entry.path())?;
        } else {
            // rename never removes a non-empty directory, and replaces a file atomically.
            std::fs::rename(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Merges the staged tree `from` (inside `staging`) into the existing host directory `to`,
/// then removes the (empty) staging directory. `shown` names `to` in errors the way the
/// user wrote it; `shown_of` names a path below `to`.
pub(crate) fn merge_host(
    from: &Path,
    to: &Path,
    staging: &Path,
    shown: &str,
    shown_of: impl Fn(&Path) -> String,
) -> Result<(), CliError> {
    let failed = |e: io::Error| stopped(shown, &e.to_string(), &staging.to_string_lossy());
    match host_conflict(from, to).map_err(failed)? {
        Some((path, true)) => {
            let _ = std::fs::remove_dir_all(staging);
            return Err(is_a_directory(&shown_of(&path)));
        }
        Some((path, false)) => {
            let _ = std::fs::remove_dir_all(staging);
            return Err(not_a_directory(&shown_of(&path)));
        }
        None => {}
    }
    host_move(from, to).map_err(failed)?;
    std::fs::remove_dir(from).map_err(failed)?;
    std::fs::remove_dir(staging).map_err(failed)?;
    Ok(())
}

/// `sh -c MERGE envrt-cp STAGING DEST`: checks every entry first (exit 2 and `isdir PATH`
/// or `notdir PATH` on a clash, nothing moved), then moves. A subshell per directory keeps
/// the loop variables of the level above.
const MERGE: &str = r#"walk() {
  for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    t=$2/${e##*/}
    if [ -d "$e" ] && [ ! -L "$e" ]; then
      if [ -d "$t" ] && [ ! -L "$t" ]; then
        ( walk "$e" "$t" "$3" ) || return $?
        if [ "$3" = move ]; then rmdir -- "$e" || return 1; fi
      elif [ -e "$t" ] || [ -L "$t" ]; then
        echo "notdir $t"; return 2
      elif [ "$3" = move ]; then
        mv -f -T -- "$e" "$t" || return 1
      fi
    elif [ -d "$t" ] && [ ! -L "$t" ]; then
      echo "isdir $t"; return 2
    elif [ "$3" = move ]; then
      mv -f -T -- "$e" "$t" || return 1
    fi
  done
}
walk "$1" "$2" check || exit $?
walk "$1" "$2" move || exit 1
rmdir -- "$1""#;

/// Merges the staged tree `staging` (inside `to`) into the lease's existing directory
/// `to`. `shown_of` names a lease path in errors.
pub(crate) async fn merge_lease(
    runtime: &EnvironmentRuntime,
    lease_id: &str,
    staging: &str,
    to: &str,
    shown: &str,
    shown_of: impl Fn(&str) -> String,
) -> Result<(), CliError> {
    let mut request = ExecuteRequest::new("sh", ["-c", MERGE, "envrt-cp", staging, to]);
    request.max_output_bytes = Some(64 * 1024);
    let result = runtime.execute(lease_id, request).await;
    let result = match result {
        Ok(result) => result,
        Err(e) => return Err(stopped(shown, &e.to_string(), staging)),
    };
    let stdout = String::from_utf8_lossy(&result.stdout);
    let clash = stdout.lines().find_map(|line| {
        line.strip_prefix("isdir ")
            .map(|p| is_a_directory(&shown_of(p)))
            .or_else(|| line.strip_prefix("notdir ").map(|p| not_a_directory(&shown_of(p))))
    });
    match (result.exit_code, clash) {
        (Some(0), _) => Ok(()),
        (Some(2), Some(refusal)) => {
            // Nothing was moved: the staged copy goes.
            let mut remove = ExecuteRequest::new("rm", ["-rf", "--", staging]);
            remove.max_output_bytes = Some(4096);
            let _ = runtime.execute(lease_id, remove).await;
            Err(refusal)
        }
        _ => {
            let stderr = String::from_utf8_lossy(&result.stderr);
            let why = match stderr.trim() {
                "" => match result.exit_code {
                    Some(code) => format!("the move exited with status {code}"),
                    None => "the move did not finish".to_owned(),
                },
                text => text.to_owned(),
            };
            Err(stopped(shown, &why, staging))
        }
    }
}
