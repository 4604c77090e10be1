//! Sync in: the host-side sources are checked (kinds, links that would escape their
//! target, depth) and streamed as one tar archive over a channel into a staging directory
//! of the lease; the remote side checks that every target's parent resolves inside the
//! workspace, and only then renames every entry into place.

use std::collections::HashSet;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use envrt_driver_api::sync::{ExcludeSet, SyncKind, confine_to_workspace, is_within, normalize_absolute};
use envrt_driver_api::{DriverError, SyncFile};
use envrt_driver_files::tree::{MAX_TREE_DEPTH, check_tree_links_except, too_deep};

use crate::connection::{Host, exit_code};
use crate::remote::quote;

/// One entry, checked.
pub(crate) struct Planned {
    pub(crate) source: PathBuf,
    pub(crate) source_shown: String,
    pub(crate) target: String,
    pub(crate) target_shown: String,
    pub(crate) kind: SyncKind,
    pub(crate) mode: Option<u32>,
    /// The mode bits kept from the host's entries (special bits only when asked for).
    pub(crate) mask: u32,
    pub(crate) exclude: ExcludeSet,
    pub(crate) follow: bool,
}

/// A host-side path: absolute, no `..`, not `/`.
pub(crate) fn host_path(path: &str) -> Result<PathBuf, DriverError> {
    match normalize_absolute(path) {
        Some(p) if p != "/" && !path.contains('\0') => Ok(PathBuf::from(p)),
        _ => Err(DriverError::invalid(format!(
            "host path {path:?} must be absolute, without '..', and not the root"
        ))),
    }
}

/// Refuses a target equal to the workspace itself (sync in), and targets that overlap.
pub(crate) fn check_distinct(targets: &[(String, String)], workspace: Option<&str>) -> Result<(), DriverError> {
    for (i, (a, a_shown)) in targets.iter().enumerate() {
        if workspace == Some(a.as_str()) {
            return Err(DriverError::invalid(format!(
                "sync target {a_shown:?} is the lease workspace itself; name a path inside it"
            )));
        }
        for (b, b_shown) in &targets[i + 1..] {
            if is_within(a, b) || is_within(b, a) {
                return Err(DriverError::invalid(format!(
                    "sync targets {a_shown:?} and {b_shown:?} overlap"
                )));
            }
        }
    }
    Ok(())
}

/// Checks one entry of a sync in.
pub(crate) fn plan(file: &SyncFile, workspace: &str) -> Result<Planned, DriverError> {
    let source = host_path(&file.source_path)?;
    let target = confine_to_workspace(workspace, &file.target_path)?;
    let meta = std::fs::metadata(&source).map_err(|_| DriverError::SourceMissing {
        path: file.source_path.clone(),
    })?;
    let ok = match file.kind {
        SyncKind::File => meta.is_file(),
        SyncKind::Directory => meta.is_dir(),
    };
    if !ok {
        return Err(DriverError::SourceKind {
            path: file.source_path.clone(),
            expected: match file.kind {
                SyncKind::File => "file",
                SyncKind::Directory => "directory",
            },
        });
    }
    let exclude = ExcludeSet::new(&file.exclude)?;
    if file.kind == SyncKind::Directory && !file.follows_symlinks() {
        check_tree_links_except(
            &source,
            Path::new(&target),
            &file.source_path,
            &file.target_path,
            &|rel| exclude.is_excluded(rel),
        )?;
    }
    Ok(Planned {
        source,
        source_shown: file.source_path.clone(),
        target,
        target_shown: file.target_path.clone(),
        kind: file.kind,
        mode: file.mode,
        mask: file.mode_mask(),
        exclude,
        follow: file.follows_symlinks(),
    })
}

/// Files and bytes written.
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) files: u64,
    pub(crate) bytes: u64,
}

fn header(kind: tar::EntryType, mode: u32, size: u64, mtime: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode & 0o7777);
    h.set_size(size);
    h.set_mtime(mtime);
    h
}

/// Writes entry `index` of `plans` as the tree `{index}` of the archive (names as raw
/// bytes, so non-UTF-8 names survive), iteratively with the shared depth bound.
fn append<W: Write>(
    builder: &mut tar::Builder<W>,
    index: usize,
    plan: &Planned,
    counts: &mut Counts,
) -> Result<(), DriverError> {
    let io = |p: &Path, e| DriverError::io(format!("cannot read {}", p.display()), e);
    let map_io = |e| DriverError::io("cannot write the archive", e);
    // (path on the host, name in the archive, depth)
    let mut pending: Vec<(PathBuf, PathBuf, usize)> = vec![(plan.source.clone(), PathBuf::from(index.to_string()), 0)];
    let mut seen_dirs: HashSet<(u64, u64)> = HashSet::new();
    while let Some((path, name, depth)) = pending.pop() {
        if depth > MAX_TREE_DEPTH {
            return Err(too_deep(&plan.source_shown));
        }
        // The top-level source is always resolved.
        let meta = if depth == 0 || plan.follow {
            std::fs::metadata(&path)
        } else {
            std::fs::symlink_metadata(&path)
        }
        .map_err(|e| io(&path, e))?;
        let mode = match (depth, plan.mode) {
            (0, Some(mode)) => mode,
            _ => meta.mode() & plan.mask,
        };
        let mtime = meta.mtime().max(0) as u64;
        if meta.file_type().is_symlink() {
            let text = std::fs::read_link(&path).map_err(|e| io(&path, e))?;
            let mut h = header(tar::EntryType::Symlink, 0o777, 0, mtime);
            builder.append_link(&mut h, &name, &text).map_err(map_io)?;
        } else if meta.is_dir() {
            if !seen_dirs.insert((meta.dev(), meta.ino())) {
                return Err(DriverError::invalid(format!(
                    "sync source {:?} has a link loop",
                    plan.source_shown
                )));
            }
            let mut h = header(tar::EntryType::Directory, mode, 0, mtime);
            builder.append_data(&mut h, &name, std::io::empty()).map_err(map_io)?;
            let mut children = Vec::new();
            for entry in std::fs::read_dir(&path).map_err(|e| io(&path, e))? {
                children.push(entry.map_err(|e| io(&path, e))?.file_name());
            }
            children.sort();
            for child in children.into_iter().rev() {
                let child_name = name.join(&child);
                let relative: PathBuf = child_name.components().skip(1).collect();
                if plan.exclude.is_excluded(&relative.to_string_lossy()) {
                    continue;
                }
                pending.push((path.join(&child), child_name, depth + 1));
            }
        } else if meta.is_file() {
            let file = std::fs::File::open(&path).map_err(|e| io(&path, e))?;
            let mut h = header(tar::EntryType::Regular, mode, meta.len(), mtime);
            builder.append_data(&mut h, &name, file).map_err(map_io)?;
            counts.files += 1;
            counts.bytes += meta.len();
        }
        // FIFOs, sockets and devices are skipped.
    }
    Ok(())
}

/// The archive's last entry, which says the archive is whole.
const COMPLETE: &str = "complete";

/// Exit code of the remote side when a target resolves outside the workspace; stderr
/// names the entry's index.
const OUTSIDE_CODE: i32 = 121;

/// The remote side: extract into a staging directory, check every target's parent,
/// then rename every entry into place.
fn remote_script(workspace: &str, lease_dir: &str, plans: &[Planned]) -> String {
    let stage = format!("{lease_dir}/run/stage-{}", uuid::Uuid::new_v4().simple());
    let mut s = format!(
        "w={w}; s={s}\numask 077\n[ -d \"$w\" ] || exit {gone}\nmkdir -- \"$s\" || exit 1\ntrap 'rm -rf -- \"$s\"' EXIT\n\
         tar -x -p --no-same-owner -f - -C \"$s\" || exit 1\n\
         [ -f \"$s/{complete}\" ] || exit 1\n\
         inside() {{ case \"$(pwd -P)/\" in \"$w\"/*) return 0;; esac; return 1; }}\n\
         check() {{ a=$1; while [ ! -e \"$a\" ] && [ ! -L \"$a\" ]; do a=$(dirname -- \"$a\"); done\n\
           (cd -P -- \"$a\" 2>/dev/null && inside) || {{ echo \"outside $2\" >&2; exit {code}; }}\n\
           mkdir -p -- \"$1\" && (cd -P -- \"$1\" && inside) || {{ echo \"outside $2\" >&2; exit {code}; }}; }}\n",
        w = quote(workspace),
        s = quote(&stage),
        code = OUTSIDE_CODE,
        gone = crate::remote::GONE_CODE,
        complete = COMPLETE,
    );
    for (i, plan) in plans.iter().enumerate() {
        let parent = Path::new(&plan.target)
            .parent()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|| "/".into());
        s.push_str(&format!("check {} {i}\n", quote(&parent)));
    }
    for (i, plan) in plans.iter().enumerate() {
        s.push_str(&format!(
            "t={t}; if [ -e \"$t\" ] || [ -L \"$t\" ]; then mv -f -- \"$t\" \"$s/old-{i}\" || exit 1; fi; mv -- \"$s/{i}\" \"$t\" || exit 1\n",
            t = quote(&plan.target)
        ));
    }
    s.push_str("exit 0\n");
    s
}

/// Streams `plans` to the lease and commits them; returns the counts.
pub(crate) async fn transfer(
    host: &Host,
    workspace: &str,
    lease_dir: &str,
    plans: Vec<Planned>,
) -> Result<Counts, DriverError> {
    let script = remote_script(workspace, lease_dir, &plans);
    let mut remote = host.spawn(&script).await?;
    // The archive is written straight into the channel's stdin (a blocking fd on the
    // blocking pool): no copy through the async side.
    let stdin = remote
        .child
        .stdin()
        .take()
        .ok_or_else(|| DriverError::other("the channel has no stdin"))?
        .into_owned_fd()
        .map_err(|e| DriverError::io("cannot take the channel's stdin", e))?;
    let builder = tokio::task::spawn_blocking(move || {
        let mut counts = Counts::default();
        let pipe = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::from(stdin));
        let mut builder = tar::Builder::new(pipe);
        builder.follow_symlinks(false);
        for (i, plan) in plans.iter().enumerate() {
            append(&mut builder, i, plan, &mut counts)?;
        }
        // Last: the mark that every entry before it is complete. An archive cut short (a
        // source unreadable half-way) has none, and the remote side then commits nothing.
        let mut mark = header(tar::EntryType::Regular, 0o600, 0, 0);
        builder
            .append_data(&mut mark, COMPLETE, std::io::empty())
            .map_err(|e| DriverError::io("cannot write the archive", e))?;
        let mut pipe = builder
            .into_inner()
            .map_err(|e| DriverError::io("cannot finish the archive", e))?;
        pipe.flush()
            .map_err(|e| DriverError::io("cannot send the archive", e))?;
        Ok::<_, DriverError>((counts, plans))
    });
    let mut stderr = remote.child.stderr().take();
    let mut stdout = remote.child.stdout().take();
    let mut err = Vec::new();
    let read_err = async {
        use tokio::io::AsyncReadExt;
        if let Some(pipe) = stderr.as_mut() {
            let _ = pipe.read_to_end(&mut err).await;
        }
        if let Some(pipe) = stdout.as_mut() {
            let _ = pipe.read_to_end(&mut Vec::new()).await;
        }
    };
    read_err.await;
    let built = builder
        .await
        .map_err(|e| DriverError::other(format!("the archive task failed: {e}")))?;
    let code = exit_code(remote.child.wait().await);
    // A lost lease's remote side exits before reading the archive, so the writer may have
    // met a closed pipe: the remote verdict explains that failure.
    if code == Some(crate::remote::GONE_CODE) {
        return Err(crate::remote::lease_gone(workspace));
    }
    let (counts, plans) = built?;
    match code {
        Some(0) => Ok(counts),
        Some(OUTSIDE_CODE) => {
            let text = String::from_utf8_lossy(&err);
            let index: usize = text
                .trim()
                .strip_prefix("outside ")
                .and_then(|i| i.parse().ok())
                .unwrap_or(0);
            Err(DriverError::PathOutsideWorkspace {
                path: plans.get(index).map(|p| p.target_shown.clone()).unwrap_or_default(),
            })
        }
        other => Err(host.unavailable(
            "the sync in failed on the remote side",
            format!("exit {other:?}: {}", String::from_utf8_lossy(&err).trim()),
        )),
    }
}
