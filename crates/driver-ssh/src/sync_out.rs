//! Sync out: each source is checked on the remote side (it exists, has the right kind and
//! resolves inside the workspace; with `followSymlinks`, every link it follows stays
//! inside too) and streamed as a tar archive over a channel of its own; the host extracts
//! it into a staging directory beside the target (leaving out excluded paths), checks its
//! links, and renames every entry of the operation into place once all are staged.

use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use envrt_runtime_core::sync::{ExcludeSet, SyncKind, confine_to_workspace};
use envrt_runtime_core::tree::{MAX_TREE_DEPTH, check_tree_links, too_deep};
use envrt_runtime_core::{DriverError, SyncFile};
use tokio::io::AsyncReadExt;

use crate::connection::{Host, exit_code};
use crate::remote::quote;
use crate::sync_in::{Counts, host_path};

/// One entry of a sync out, checked.
pub(crate) struct Planned {
    source: String,
    source_shown: String,
    target: PathBuf,
    target_shown: String,
    kind: SyncKind,
    mode: Option<u32>,
    exclude: ExcludeSet,
    follow: bool,
}

pub(crate) fn plan(file: &SyncFile, workspace: &str) -> Result<Planned, DriverError> {
    Ok(Planned {
        source: confine_to_workspace(workspace, &file.source_path)?,
        source_shown: file.source_path.clone(),
        target: host_path(&file.target_path)?,
        target_shown: file.target_path.clone(),
        kind: file.kind,
        mode: file.mode,
        exclude: ExcludeSet::new(&file.exclude)?,
        follow: file.follows_symlinks(),
    })
}

impl Planned {
    /// The host-side target (normalized) and as the caller gave it.
    pub(crate) fn target(&self) -> (String, String) {
        (self.target.to_string_lossy().into_owned(), self.target_shown.clone())
    }
}

const MISSING: i32 = 122;
const KIND: i32 = 123;
const OUTSIDE: i32 = 121;

fn remote_script(workspace: &str, plan: &Planned) -> String {
    let test = match plan.kind {
        SyncKind::File => "-f",
        SyncKind::Directory => "-d",
    };
    let follow_check = if plan.follow && plan.kind == SyncKind::Directory {
        format!(
            "find \"$r\" -type l | while IFS= read -r l; do t=$(readlink -f -- \"$l\") || exit {OUTSIDE}; \
             case \"$t/\" in \"$w\"/*) ;; *) exit {OUTSIDE};; esac; done || exit {OUTSIDE}\n"
        )
    } else {
        String::new()
    };
    format!(
        "w={w}; p={p}\n[ -e \"$p\" ] || exit {MISSING}\nr=$(readlink -f -- \"$p\") || exit {MISSING}\n\
         case \"$r/\" in \"$w\"/*) ;; *) exit {OUTSIDE};; esac\n[ {test} \"$r\" ] || exit {KIND}\n{follow_check}\
         cd -P -- \"$(dirname -- \"$r\")\" && exec tar -c {h} -f - -- \"$(basename -- \"$r\")\"",
        w = quote(workspace),
        p = quote(&plan.source),
        h = if plan.follow { "-h" } else { "" },
    )
}

/// A staged entry: its staging directory (beside the target) and the staged tree in it.
struct Staged {
    dir: PathBuf,
    entry: PathBuf,
    target: PathBuf,
}

fn stage_dir_for(target: &Path) -> Result<PathBuf, DriverError> {
    let parent = target
        .parent()
        .ok_or_else(|| DriverError::invalid("a sync target needs a parent directory"))?;
    std::fs::create_dir_all(parent).map_err(|e| DriverError::io(format!("cannot create {}", parent.display()), e))?;
    let dir = parent.join(format!(".envrt-stage-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir(&dir).map_err(|e| DriverError::io(format!("cannot create {}", dir.display()), e))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| DriverError::io(format!("cannot protect {}", dir.display()), e))?;
    Ok(dir)
}

/// Extracts one archive (blocking) into `stage/e`, renaming its top entry; returns counts.
fn extract(bytes: &[u8], plan: &Planned, stage: &Path, counts: &mut Counts) -> Result<PathBuf, DriverError> {
    let top = stage.join("e");
    let mut archive = tar::Archive::new(bytes);
    let mut dir_modes: Vec<(PathBuf, u32)> = Vec::new();
    let mut excluded: Vec<PathBuf> = Vec::new();
    let bad = |e: std::io::Error| DriverError::io("cannot read the archive from the remote side", e);
    for entry in archive.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let path = entry.path().map_err(bad)?.into_owned();
        let mut parts = Vec::new();
        for component in path.components() {
            match component {
                Component::Normal(p) => parts.push(p.to_os_string()),
                Component::CurDir => {}
                _ => return Err(DriverError::other("the remote archive holds an unsafe path")),
            }
        }
        if parts.is_empty() {
            continue;
        }
        let relative: PathBuf = parts[1..].iter().collect();
        if parts.len() > MAX_TREE_DEPTH + 1 {
            return Err(too_deep(&plan.source_shown));
        }
        if parts.len() > 1
            && (excluded.iter().any(|e| relative.starts_with(e))
                || plan.exclude.is_excluded(&relative.to_string_lossy()))
        {
            excluded.push(relative);
            continue;
        }
        let dest = if relative.as_os_str().is_empty() {
            top.clone()
        } else {
            top.join(&relative)
        };
        let header_mode = entry.header().mode().unwrap_or(0o600) & 0o7777;
        let mode = if parts.len() == 1 {
            plan.mode.unwrap_or(header_mode)
        } else {
            header_mode
        };
        let kind = entry.header().entry_type();
        let io = |e| DriverError::io(format!("cannot write {}", dest.display()), e);
        match kind {
            tar::EntryType::Directory => {
                std::fs::create_dir_all(&dest).map_err(io)?;
                std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
                dir_modes.push((dest.clone(), mode));
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode_0600()
                    .open(&dest)
                    .map_err(io)?;
                let n = std::io::copy(&mut entry, &mut file).map_err(io)?;
                std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(mode)).map_err(io)?;
                counts.files += 1;
                counts.bytes += n;
            }
            tar::EntryType::Symlink => {
                let text = entry
                    .link_name()
                    .map_err(bad)?
                    .ok_or_else(|| DriverError::other("the remote archive holds a link without a target"))?;
                std::os::unix::fs::symlink(&text, &dest).map_err(io)?;
            }
            // Hard links, FIFOs, devices: skipped, like the other drivers' copies.
            _ => {}
        }
    }
    for (dir, mode) in dir_modes.into_iter().rev() {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
            .map_err(|e| DriverError::io(format!("cannot set the mode of {}", dir.display()), e))?;
    }
    if !top.exists() && std::fs::symlink_metadata(&top).is_err() {
        return Err(DriverError::other("the remote archive was empty"));
    }
    check_tree_links(&top, &plan.target, &plan.source_shown, &plan.target_shown)?;
    Ok(top)
}

trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}
impl Mode0600 for std::fs::OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.mode(0o600)
    }
}

fn remove_any(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            let _ = make_writable(path);
            let _ = std::fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(path);
        }
        Err(_) => {}
    }
}

/// Gives the owner write access to every directory below `path`, so a staged tree with
/// read-only directories can be removed.
fn make_writable(path: &Path) -> std::io::Result<()> {
    let mut pending = vec![path.to_path_buf()];
    while let Some(dir) = pending.pop() {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    Ok(())
}

/// Fetches every planned entry, stages it, then renames all into place; all or nothing.
pub(crate) async fn transfer(host: &Host, workspace: &str, plans: Vec<Planned>) -> Result<Counts, DriverError> {
    let mut staged: Vec<Staged> = Vec::new();
    let mut counts = Counts::default();
    let outcome = async {
        for plan in &plans {
            let (code, bytes, err) = fetch(host, workspace, plan).await?;
            match code {
                Some(0) => {}
                Some(MISSING) => {
                    return Err(DriverError::SourceMissing {
                        path: plan.source_shown.clone(),
                    });
                }
                Some(KIND) => {
                    return Err(DriverError::SourceKind {
                        path: plan.source_shown.clone(),
                        expected: match plan.kind {
                            SyncKind::File => "file",
                            SyncKind::Directory => "directory",
                        },
                    });
                }
                Some(OUTSIDE) => {
                    return Err(DriverError::PathOutsideWorkspace {
                        path: plan.source_shown.clone(),
                    });
                }
                other => {
                    return Err(host.unavailable(
                        "the sync out failed on the remote side",
                        format!("exit {other:?}: {}", String::from_utf8_lossy(&err).trim()),
                    ));
                }
            }
            let dir = stage_dir_for(&plan.target)?;
            staged.push(Staged {
                dir: dir.clone(),
                entry: dir.join("e"),
                target: plan.target.clone(),
            });
            extract(&bytes, plan, &dir, &mut counts)?;
        }
        for s in &staged {
            if std::fs::symlink_metadata(&s.target).is_ok() {
                std::fs::rename(&s.target, s.dir.join("old"))
                    .map_err(|e| DriverError::io(format!("cannot replace {}", s.target.display()), e))?;
            }
            std::fs::rename(&s.entry, &s.target)
                .map_err(|e| DriverError::io(format!("cannot write {}", s.target.display()), e))?;
        }
        Ok(())
    }
    .await;
    for s in &staged {
        remove_any(&s.dir);
    }
    outcome.map(|()| counts)
}

async fn fetch(host: &Host, workspace: &str, plan: &Planned) -> Result<(Option<i32>, Vec<u8>, Vec<u8>), DriverError> {
    let mut remote = host.spawn(&remote_script(workspace, plan)).await?;
    drop(remote.child.stdin().take());
    let mut out = Vec::new();
    let mut err = Vec::new();
    let mut stdout = remote.child.stdout().take();
    let mut stderr = remote.child.stderr().take();
    let read_out = async {
        if let Some(pipe) = stdout.as_mut() {
            pipe.read_to_end(&mut out).await.map(|_| ())
        } else {
            Ok(())
        }
    };
    let read_err = async {
        if let Some(pipe) = stderr.as_mut() {
            let _ = pipe.read_to_end(&mut err).await;
        }
    };
    let (read, ()) = tokio::join!(read_out, read_err);
    read.map_err(|e| DriverError::io("cannot read the archive from the remote side", e))?;
    Ok((exit_code(remote.child.wait().await), out, err))
}
