//! One file of a lease, read or written with the permissions of the lease's command user.
//!
//! [`sync_in`](EnvironmentRuntime::sync_in) and [`sync_out`](EnvironmentRuntime::sync_out)
//! move files as the driver (the host user of `local`, the Docker engine, the plugin
//! worker), and a sync target is replaced whole, directory or read-only file alike (the
//! contract's section 6). [`write_file`] and [`read_file`] add what a program expects of
//! one file: before moving anything they look at the lease side with a small `sh` probe run
//! through [`execute`](EnvironmentRuntime::execute) as the lease's own command user
//! ([`probe`]), and refuse with a typed [`FileError`]:
//!
//! | case | error |
//! |---|---|
//! | write over an existing directory | [`FileError::IsADirectory`] |
//! | write over a file the user may not write, or below a directory it may not write | [`FileError::PermissionDenied`] |
//! | read of a directory | [`FileError::IsADirectory`] |
//! | read of a file the user may not read | [`FileError::PermissionDenied`] |
//! | read of a missing file (or of a path whose parent is missing) | [`FileError::NotFound`] |
//!
//! The probe is skipped (and the sync alone decides, with its own errors) when the driver
//! has no execute, when the lease's image has no usable `sh`, and when the path lies
//! outside the driver's declared [`PathScope`](crate::core::PathScope) (so a path the driver
//! refuses gets the driver's `Path "{path}" is outside the lease workspace.`, not a probe
//! result). A final symlink is looked at as a link for a write (the sync replaces the link,
//! not what it names) and followed for a read (a sync copies what it names).
//!
//! **Check, then act.** The probe and the sync are two operations: a command of the lease
//! that swaps the path in between (a file for a directory, a mode change) is not caught;
//! the sync then does what the contract says it does. The probe grants nothing: it runs as
//! the user every command of the lease already runs as.

use std::fmt;

use envrt_runtime_core::model::resolve_driver_key;
use envrt_runtime_core::{EnvironmentRuntime, ExecuteRequest, RuntimeError, SyncFile, SyncOperation};

/// Which access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileAccess {
    /// Reading a file.
    Read,
    /// Writing (creating or replacing) a file.
    Write,
}

impl fmt::Display for FileAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileAccess::Read => "read",
            FileAccess::Write => "write",
        })
    }
}

/// Why [`read_file`] or [`write_file`] did not do it. Match on the variant, never on the
/// text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// The path is a directory (a write does not replace it; a read cannot read it).
    #[error("Path \"{path}\" is a directory, not a file.")]
    IsADirectory {
        /// The path as given.
        path: String,
    },
    /// The lease's command user may not read or write the path.
    #[error("The lease's user may not {access} \"{path}\".")]
    PermissionDenied {
        /// The path as given.
        path: String,
        /// What was refused.
        access: FileAccess,
    },
    /// There is no such file (nor, perhaps, its parent directory).
    #[error("File \"{path}\" does not exist.")]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// Staging the file on the host failed.
    #[error("Cannot stage the file on the host: {0}")]
    Staging(#[source] std::io::Error),
    /// The runtime or the driver refused or failed (its exact text).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

impl FileError {
    /// A stable `snake_case` name: `is_a_directory`, `permission_denied`,
    /// `file_not_found`, `io`, or the runtime error's own kind.
    pub fn kind(&self) -> &'static str {
        match self {
            FileError::IsADirectory { .. } => "is_a_directory",
            FileError::PermissionDenied { .. } => "permission_denied",
            FileError::NotFound { .. } => "file_not_found",
            FileError::Staging(_) => "io",
            FileError::Runtime(error) => error.kind(),
        }
    }
}

/// What the path is, as the lease's user sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// Nothing is there.
    Missing,
    /// A directory (or a link to one).
    Directory,
    /// A regular file (or a link to one).
    File,
    /// Something else (a FIFO, a device, a dangling link's target...).
    Other,
}

/// What [`probe`] found at a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The kind, following a final symlink.
    pub kind: EntryKind,
    /// The path itself is a symlink.
    pub link: bool,
    /// The lease's user may read it (`test -r`).
    pub readable: bool,
    /// The lease's user may write it (`test -w`).
    pub writable: bool,
    /// The `ls -ld` mode string of the path itself (link not followed), when it exists and
    /// [`probe`] was asked for it (`with_mode`).
    pub mode: Option<String>,
    /// For a missing path: whether the lease's user may create entries in the nearest
    /// existing ancestor (`None` when that ancestor is not a directory, or the path
    /// exists).
    pub creatable: Option<bool>,
}

impl Probe {
    /// The path itself (not a link) is a directory.
    pub fn is_real_directory(&self) -> bool {
        self.kind == EntryKind::Directory && !self.link
    }

    /// The path itself (not a link) is a regular file with no write bit for anyone.
    pub fn is_read_only_file(&self) -> bool {
        self.kind == EntryKind::File
            && !self.link
            && self.mode.as_deref().is_some_and(|m| m.len() >= 10 && !m.contains('w'))
    }

    fn parse(line: &str) -> Option<Probe> {
        let mut words = line.split_whitespace();
        let kind = match words.next()? {
            "none" => EntryKind::Missing,
            "dir" => EntryKind::Directory,
            "file" => EntryKind::File,
            "other" => EntryKind::Other,
            _ => return None,
        };
        let link = words.next()? == "link";
        let access = words.next()?;
        let creatable = match words.next()? {
            "w" => Some(true),
            "r" => Some(false),
            _ => None,
        };
        let mode = words.next().filter(|m| *m != "-").map(str::to_owned);
        Some(Probe {
            kind,
            link,
            readable: access.starts_with('r'),
            writable: access.ends_with('w'),
            mode,
            creatable,
        })
    }
}

/// The probe: `KIND LINK ACCESS CREATABLE MODE` for `$1` (see [`Probe::parse`]). Only `sh`
/// built-ins, and `ls` when `$2` is `mode`.
const PROBE: &str = r#"p=$1; k=none
if [ -d "$p" ]; then k=dir; elif [ -f "$p" ]; then k=file; elif [ -e "$p" ]; then k=other; fi
l=-; [ -L "$p" ] && l=link
r=-; [ -r "$p" ] && r=r
w=-; [ -w "$p" ] && w=w
m=-; if [ "$2" = mode ] && { [ -e "$p" ] || [ -L "$p" ]; }; then m=$(ls -ld -- "$p" 2>/dev/null); m=${m%% *}; [ -n "$m" ] || m=-; fi
a=-
if [ $k = none ]; then
  d=$p
  while :; do
    case $d in */*) d=${d%/*}; [ -n "$d" ] || d=/ ;; *) d=. ;; esac
    if [ -e "$d" ] || [ "$d" = / ] || [ "$d" = . ]; then break; fi
  done
  if [ -d "$d" ] && [ -w "$d" ] && [ -x "$d" ]; then a=w; elif [ -d "$d" ]; then a=r; fi
fi
echo "$k $l $r$w $a $m""#;

/// Whether `path` lies inside what the lease's driver declares it accepts (checked
/// lexically against the lease's workspace). `false` when that cannot be told. A path
/// outside it gets the driver's own refusal from any sync, so a caller that could not
/// [`probe`] it can tell that case from a lease that runs no probe.
pub async fn in_declared_scope(runtime: &EnvironmentRuntime, lease_id: &str, path: &str) -> bool {
    let Ok(Some(lease)) = runtime.lease(lease_id).await else {
        return false;
    };
    let environment = match &lease.environment_id {
        Some(id) => runtime.environment(id).await.ok().flatten(),
        None => None,
    };
    let Some(driver) = runtime.driver(resolve_driver_key(&lease, environment.as_ref())) else {
        return false;
    };
    let scope = driver.path_scope();
    match lease.workspace() {
        Some(workspace) => scope.resolve(workspace, path).is_ok(),
        None => scope.any_file_path() && path.starts_with('/'),
    }
}

/// Looks at `path` of the lease as the lease's command user (one execute of `sh`; with
/// `with_mode`, also an `ls -ld` for [`Probe::mode`]). `None` when it cannot be told: the
/// driver has no execute, the lease cannot run the probe (no `sh`), or the path lies
/// outside the driver's declared path scope (the sync then refuses it).
pub async fn probe(runtime: &EnvironmentRuntime, lease_id: &str, path: &str, with_mode: bool) -> Option<Probe> {
    if !in_declared_scope(runtime, lease_id, path).await {
        return None;
    }
    let flag = if with_mode { "mode" } else { "-" };
    let mut request = ExecuteRequest::new("sh", ["-c", PROBE, "envrt-probe", path, flag]);
    request.timeout = Some(std::time::Duration::from_secs(30));
    request.max_output_bytes = Some(4096);
    match runtime.execute(lease_id, request).await {
        Ok(result) if result.exit_code == Some(0) => Probe::parse(String::from_utf8_lossy(&result.stdout).trim()),
        _ => None,
    }
}

/// The refusal of a write that `found` calls for, if any.
pub fn check_write(path: &str, found: &Probe) -> Result<(), FileError> {
    let denied = || FileError::PermissionDenied {
        path: path.to_owned(),
        access: FileAccess::Write,
    };
    match found.kind {
        EntryKind::Directory if !found.link => Err(FileError::IsADirectory { path: path.to_owned() }),
        EntryKind::File if !found.link && !found.writable => Err(denied()),
        EntryKind::Missing if found.creatable == Some(false) => Err(denied()),
        _ => Ok(()),
    }
}

/// The refusal of a read that `found` calls for, if any.
pub fn check_read(path: &str, found: &Probe) -> Result<(), FileError> {
    match found.kind {
        EntryKind::Directory => Err(FileError::IsADirectory { path: path.to_owned() }),
        EntryKind::Missing => Err(FileError::NotFound { path: path.to_owned() }),
        EntryKind::File if !found.readable => Err(FileError::PermissionDenied {
            path: path.to_owned(),
            access: FileAccess::Read,
        }),
        _ => Ok(()),
    }
}

fn one(operation_id: &str, file: SyncFile) -> [SyncOperation; 1] {
    [SyncOperation {
        operation_id: operation_id.to_owned(),
        files: vec![file],
        post_upload_commands: Vec::new(),
    }]
}

/// Writes `data` to the lease's file `path` (parents are created; `mode` sets the file's
/// mode), after [`check_write`] on what [`probe`] found. A directory, or a file the lease's
/// user may not write, is refused rather than replaced.
pub async fn write_file(
    runtime: &EnvironmentRuntime,
    lease_id: &str,
    path: &str,
    data: &[u8],
    mode: Option<u32>,
) -> Result<(), FileError> {
    if let Some(found) = probe(runtime, lease_id, path, false).await {
        check_write(path, &found)?;
    }
    let dir = tempfile::tempdir().map_err(FileError::Staging)?;
    let source = dir.path().join("file");
    std::fs::write(&source, data).map_err(FileError::Staging)?;
    let mut file = SyncFile::file(source.to_string_lossy(), path);
    file.mode = mode;
    runtime.sync_in(lease_id, &one("write_file", file)).await?;
    Ok(())
}

/// The bytes of the lease's file `path`, after [`check_read`] on what [`probe`] found.
pub async fn read_file(runtime: &EnvironmentRuntime, lease_id: &str, path: &str) -> Result<Vec<u8>, FileError> {
    if let Some(found) = probe(runtime, lease_id, path, false).await {
        check_read(path, &found)?;
    }
    let dir = tempfile::tempdir().map_err(FileError::Staging)?;
    let target = dir.path().join("file");
    let file = SyncFile::file(path, target.to_string_lossy());
    runtime.sync_out(lease_id, &one("read_file", file)).await?;
    std::fs::read(&target).map_err(FileError::Staging)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_lines_parse() {
        let p = Probe::parse("file - r- - -r--r--r--").unwrap();
        assert_eq!(p.kind, EntryKind::File);
        assert!(p.readable && !p.writable && !p.link && p.is_read_only_file());
        assert_eq!(p.mode.as_deref(), Some("-r--r--r--"));
        let p = Probe::parse("none - -- r -").unwrap();
        assert_eq!((p.kind, p.creatable, p.mode), (EntryKind::Missing, Some(false), None));
        let p = Probe::parse("dir link rw - lrwxrwxrwx").unwrap();
        assert!(p.link && !p.is_real_directory());
        assert_eq!(Probe::parse("what - rw - -"), None);
        assert_eq!(Probe::parse(""), None);
    }

    #[test]
    fn refusals_have_exact_texts() {
        let found = |line: &str| Probe::parse(line).unwrap();
        assert_eq!(
            check_write("d", &found("dir - rw - drwxr-xr-x"))
                .unwrap_err()
                .to_string(),
            "Path \"d\" is a directory, not a file."
        );
        assert_eq!(
            check_write("f", &found("file - r- - -r--r--r--"))
                .unwrap_err()
                .to_string(),
            "The lease's user may not write \"f\"."
        );
        assert_eq!(
            check_write("a/b", &found("none - -- r -")).unwrap_err().to_string(),
            "The lease's user may not write \"a/b\"."
        );
        assert_eq!(
            check_read("f", &found("file - -w - --w-------"))
                .unwrap_err()
                .to_string(),
            "The lease's user may not read \"f\"."
        );
        assert_eq!(
            check_read("x/y", &found("none - -- - -")).unwrap_err().to_string(),
            "File \"x/y\" does not exist."
        );
        assert_eq!(
            check_read("/etc", &found("dir - r- - drwxr-xr-x")).unwrap_err().kind(),
            "is_a_directory"
        );
        // A link is replaced by a write, not followed; a read follows it.
        assert!(check_write("l", &found("dir link rw - lrwxrwxrwx")).is_ok());
        assert!(check_write("l", &found("file link r- - lrwxrwxrwx")).is_ok());
        assert!(check_read("l", &found("dir link r- - lrwxrwxrwx")).is_err());
        assert!(check_write("n", &found("none - -- w -")).is_ok());
    }
}
