//! Sync of paths outside `/workspace` (`/tmp/x`, `/etc`, `/usr/lib/...`): the copy runs
//! inside a sandbox of the lease, with the same layout, user and permissions as the
//! lease's commands, so every path is resolved in the sandbox's own mount namespace and no
//! link planted by a command (`/tmp/l -> /etc/shadow`, a link to a host path) can lead it
//! anywhere a command could not go. The worker only moves bytes between the host side and
//! a private transfer directory bound into that one sandbox at [`XFER`]; it never opens a
//! sandbox path itself.
//!
//! Copy-out: in the sandbox, `cp -pR` (links kept, or followed with `followSymlinks`)
//! copies the source into the transfer directory; the worker then copies that tree to the
//! host target without following any link (what `cp` copied as a link is checked to stay
//! inside the tree, as for `/workspace`). Copy-in: the worker stages the host source in
//! the transfer directory (handed to the sandbox user); in the sandbox, the target's
//! parent is created, the tree copied beside the target under a hidden name and renamed
//! onto it (a replaced entry is moved aside first and put back on failure). A write the
//! sandbox refuses (a read-only bind such as `/usr`, a directory the sandbox user may not
//! write) fails with `Writing "{path}" in the sandbox: {os error}`.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use envrt_driver_api::DriverError;
use envrt_driver_api::sync::{ExcludeSet, SyncFile, SyncKind};

use super::sandbox::Sandbox;
use super::sync::{Counts, Direction, place_copied, stage_in};

/// Syncs one file or tree whose sandbox side is `path` (normalized, outside `/workspace`).
pub(crate) async fn sync(
    sandbox: &Sandbox,
    lease_dir: &Path,
    file: &SyncFile,
    excludes: ExcludeSet,
    direction: Direction,
    path: &str,
) -> Result<Counts, DriverError> {
    let transfer = Transfer::new(lease_dir)?;
    let (owned, dir) = (file.clone(), transfer.dir.clone());
    match direction {
        Direction::In => {
            super::sync::check_kind(Path::new(&file.source_path), file)?;
            let owner = sandbox.policy.ids.owner_of(lease_dir)?;
            let counts = blocking(move || {
                let counts = stage_in(&owned, excludes, owner, &dir.join("in"))?;
                owner
                    .hand_over(&dir)
                    .map_err(|e| DriverError::io(format!("Handing over {}", dir.display()), e))?;
                Ok(counts)
            })
            .await?;
            copy_in(sandbox, lease_dir, &transfer, path, &file.target_path).await?;
            Ok(counts)
        }
        Direction::Out => {
            let copied = copy_out(sandbox, lease_dir, &transfer, path, file).await?;
            let name = path.rsplit('/').next().unwrap_or("").to_owned();
            blocking(move || place_copied(&copied, &name, &owned, excludes)).await
        }
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DriverError> + Send + 'static,
) -> Result<T, DriverError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| DriverError::other(format!("sync task failed: {e}")))?
}

/// Where the transfer directory appears in the copying sandbox.
pub(crate) const XFER: &str = "/.envrt-sync";

/// The copy-out script: `$1` source, `$2` destination, `$3` kind, `$4` 1 to follow links.
const OUT_SCRIPT: &str = r#"src=$1 dst=$2 kind=$3 follow=$4
if [ "$follow" = 1 ]; then
  [ -e "$src" ] || exit 70
  if [ "$kind" = directory ]; then [ -d "$src" ] || exit 71; else [ -f "$src" ] || exit 71; fi
  exec cp -pRL -- "$src" "$dst"
fi
[ -e "$src" ] || [ -L "$src" ] || exit 70
if [ "$kind" = directory ]; then
  { [ -d "$src" ] && [ ! -L "$src" ]; } || exit 71
else
  [ -f "$src" ] || [ -L "$src" ] || exit 71
fi
exec cp -pRP -- "$src" "$dst"
"#;

/// The copy-in script: `$1` staged source, `$2` target, `$3` its parent, `$4` a hidden
/// name for the copy beside the target, `$5` one for a replaced entry.
const IN_SCRIPT: &str = r#"src=$1 dst=$2 parent=$3 tmp=$3/$4 trash=$3/$5
mkdir -p -- "$parent" || exit 72
cp -pRP -- "$src" "$tmp" || { rm -rf -- "$tmp"; exit 72; }
aside=0
if [ -e "$dst" ] || [ -L "$dst" ]; then
  if [ -d "$dst" ] && [ ! -L "$dst" ] || [ -d "$tmp" ]; then
    mv -T -- "$dst" "$trash" || { rm -rf -- "$tmp"; exit 72; }
    aside=1
  fi
fi
if ! mv -T -- "$tmp" "$dst"; then
  [ "$aside" = 1 ] && mv -T -- "$trash" "$dst"
  rm -rf -- "$tmp"
  exit 72
fi
[ "$aside" = 1 ] && rm -rf -- "$trash"
exit 0
"#;

/// A private transfer directory beside the lease directories (never bound anywhere but
/// into the one copying sandbox), removed when dropped.
struct Transfer {
    dir: PathBuf,
}

impl Transfer {
    /// Makes a fresh transfer directory under the lease root.
    fn new(lease_dir: &Path) -> Result<Transfer, DriverError> {
        use std::os::unix::fs::DirBuilderExt;
        let root = lease_dir.parent().unwrap_or(Path::new("/"));
        let dir = root.join(format!(".envrt-xfer-{}", uuid::Uuid::new_v4()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| DriverError::io(format!("Creating {}", dir.display()), e))?;
        Ok(Transfer { dir })
    }
}

impl Drop for Transfer {
    fn drop(&mut self) {
        // best effort: our own directory
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Copies the sandbox path `source` of `file` into `transfer` (as `out`) inside a sandbox
/// of the lease; the host path of the copy.
async fn copy_out(
    sandbox: &Sandbox,
    lease_dir: &Path,
    transfer: &Transfer,
    source: &str,
    file: &SyncFile,
) -> Result<PathBuf, DriverError> {
    sandbox
        .policy
        .ids
        .owner_of(lease_dir)?
        .hand_over(&transfer.dir)
        .map_err(|e| DriverError::io(format!("Handing over {}", transfer.dir.display()), e))?;
    let kind = match file.kind {
        SyncKind::File => "file",
        SyncKind::Directory => "directory",
    };
    let follow = if file.follows_symlinks() { "1" } else { "0" };
    let dest = format!("{XFER}/out");
    let (code, stderr) = run_script(sandbox, lease_dir, transfer, OUT_SCRIPT, &[source, &dest, kind, follow]).await?;
    match code {
        Some(0) => Ok(transfer.dir.join("out")),
        Some(70) => Err(DriverError::SourceMissing {
            path: file.source_path.clone(),
        }),
        Some(71) => Err(DriverError::SourceKind {
            path: file.source_path.clone(),
            expected: kind,
        }),
        _ => Err(failure("Reading", &file.source_path, &stderr)),
    }
}

/// Places the staged `transfer/in` at the sandbox path `target` inside a sandbox of the
/// lease, replacing what is there.
async fn copy_in(
    sandbox: &Sandbox,
    lease_dir: &Path,
    transfer: &Transfer,
    target: &str,
    given: &str,
) -> Result<(), DriverError> {
    let (parent, _) = target.rsplit_once('/').unwrap_or(("", target));
    let parent = if parent.is_empty() { "/" } else { parent };
    let id = uuid::Uuid::new_v4();
    let (tmp, trash) = (format!(".envrt-sync-{id}"), format!(".envrt-trash-{id}"));
    let staged = format!("{XFER}/in");
    let (code, stderr) = run_script(
        sandbox,
        lease_dir,
        transfer,
        IN_SCRIPT,
        &[&staged, target, parent, &tmp, &trash],
    )
    .await?;
    match code {
        Some(0) => Ok(()),
        _ => Err(failure("Writing", given, &stderr)),
    }
}

/// The error of a copy the sandbox refused: the operating-system error `cp`, `mkdir` or
/// `mv` named (so its kind survives), else the tools' own words.
fn failure(what: &str, path: &str, stderr: &str) -> DriverError {
    let known = [
        ("Read-only file system", rustix::io::Errno::ROFS),
        ("Permission denied", rustix::io::Errno::ACCESS),
        ("Operation not permitted", rustix::io::Errno::PERM),
        ("No space left on device", rustix::io::Errno::NOSPC),
        ("Not a directory", rustix::io::Errno::NOTDIR),
        ("Is a directory", rustix::io::Errno::ISDIR),
        ("No such file or directory", rustix::io::Errno::NOENT),
    ];
    match known.iter().find(|(text, _)| stderr.contains(text)) {
        Some((_, errno)) => DriverError::io(
            format!("{what} \"{path}\" in the sandbox"),
            std::io::Error::from_raw_os_error(errno.raw_os_error()),
        ),
        None => DriverError::other(format!("{what} \"{path}\" in the sandbox failed: {}", stderr.trim())),
    }
}

/// Runs `sh -c SCRIPT sh ARGS...` in a sandbox of the lease with the transfer directory
/// bound at [`XFER`]; the exit code the sandbox init reported and the stderr.
async fn run_script(
    sandbox: &Sandbox,
    lease_dir: &Path,
    transfer: &Transfer,
    script: &str,
    args: &[&str],
) -> Result<(Option<i32>, String), DriverError> {
    let mut argv = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        script.to_owned(),
        "sh".to_owned(),
    ];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    let (child, tracked) = sandbox
        .spawn_as(
            lease_dir,
            "/",
            &[],
            &argv,
            [Stdio::null(), Stdio::null(), Stdio::piped()],
            super::sandbox::SpawnAs {
                user: None,
                bind: Some(&transfer.dir),
                fd_binds: &[],
                detached: None,
            },
        )
        .map_err(|e| DriverError::io("Starting bwrap", e))?;
    let output = child
        .wait_with_output()
        .await
        .map_err(|e| DriverError::io("Waiting for bwrap", e))?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let code = match tracked.reported() {
        Some(super::init::Reported::Exited(code)) => Some(code),
        Some(super::init::Reported::Signaled(_)) => None,
        None => output.status.code(),
    };
    Ok((code, stderr))
}
