//! `environmentSyncIn` / `environmentSyncOut` (contract section 6). The worker itself is not
//! sandboxed: it copies between host paths given by the host and the lease directory.
//! Sandbox-side paths are confined to `/workspace` with links read in sandbox terms; each
//! entry is built in a hidden sibling and renamed into place, so a failure leaves no
//! half-written target; links copied as links must stay inside the copied tree.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::time::Duration;

use envrt_driver_api::DriverError;
use envrt_driver_api::sync::{ExcludeSet, SyncFile, SyncKind, check_post_upload_cwd, is_within, normalize_absolute};
use envrt_driver_files::sparse::ByteBudget;
use serde_json::{Value, json};

use super::exec::{check_argv, check_cwd, run};
use super::lease::{Beneath, beneath_error, link_stays_inside, open_parent, resolve};
use super::sandbox::{Sandbox, WORKSPACE};
use super::staging::{fault_point, file_system, remove_any, replace, staging_name, sweep_dead};
use super::sync_file::copy_file;
use super::uids::Owner;

/// Timeout of a post-upload command that does not set its own.
const POST_UPLOAD_TIMEOUT: Duration = Duration::from_secs(300);

pub(crate) use envrt_plugin_protocol::environment::SyncParams;

/// Which way files move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Host → lease.
    In,
    /// Lease → host.
    Out,
}

/// Applies every operation in order; the first failure stops the call.
pub(crate) async fn sync(
    sandbox: &Sandbox,
    lease_dir: &Path,
    params: SyncParams,
    direction: Direction,
) -> Result<Value, DriverError> {
    let mut results = Vec::new();
    for op in params.operations {
        let excludes = op
            .files
            .iter()
            .map(|f| ExcludeSet::new(&f.exclude))
            .collect::<Result<Vec<_>, _>>()?;
        if direction == Direction::Out && !op.post_upload_commands.is_empty() {
            return Err(DriverError::invalid(
                "postUploadCommands are only run by environmentSyncIn",
            ));
        }
        let environment_paths = op
            .files
            .iter()
            .map(|f| {
                let p = match direction {
                    Direction::In => &f.target_path,
                    Direction::Out => &f.source_path,
                };
                envrt_driver_api::PathScope::WholeEnvironment.resolve(WORKSPACE, p)
            })
            .collect::<Result<Vec<_>, _>>()?;
        for command in &op.post_upload_commands {
            if let Some(cwd) = &command.cwd {
                check_post_upload_cwd(cwd, &environment_paths)?;
            }
            // checked before any file is written
            check_argv(&["/bin/sh".to_owned(), "-c".to_owned(), command.command.clone()], &[])?;
        }
        for file in &op.files {
            let host = match direction {
                Direction::In => &file.source_path,
                Direction::Out => &file.target_path,
            };
            if host.contains('\0') {
                return Err(DriverError::invalid(format!("host path {host:?} contains a NUL byte")));
            }
            if normalize_absolute(host).is_none() {
                return Err(DriverError::invalid(format!(
                    "host path \"{host}\" must be absolute and free of \"..\""
                )));
            }
        }
        let mut counts = Counts::default();
        for ((file, excludes), path) in op.files.iter().zip(&excludes).zip(&environment_paths) {
            if !is_within(WORKSPACE, path) {
                let done =
                    super::sync_sandboxed::sync(sandbox, lease_dir, file, excludes.clone(), direction, path).await?;
                counts.files += done.files;
                counts.bytes += done.bytes;
                continue;
            }
            let (dir, owned, kept) = (lease_dir.to_path_buf(), file.clone(), excludes.clone());
            let owner = sandbox.policy.ids.owner_of(lease_dir)?;
            let done = tokio::task::spawn_blocking(move || match direction {
                Direction::In => copy_in(&dir, &owned, kept, owner),
                Direction::Out => copy_out(&dir, &owned, kept),
            })
            .await
            .map_err(|e| DriverError::other(format!("sync task failed: {e}")))?;
            // A link in the workspace that leads elsewhere in the sandbox: nothing was
            // placed, and the copy runs in the sandbox, where the link leads.
            let done = match done.map_err(|e| file_system(e, direction, &file.target_path)) {
                Err(DriverError::PathOutsideWorkspace { .. }) => {
                    super::sync_sandboxed::sync(sandbox, lease_dir, file, excludes.clone(), direction, path).await?
                }
                done => done?,
            };
            counts.files += done.files;
            counts.bytes += done.bytes;
        }
        for command in &op.post_upload_commands {
            let cwd = check_cwd(lease_dir, command.cwd.as_deref())?;
            let argv = vec!["/bin/sh".to_owned(), "-c".to_owned(), command.command.clone()];
            let timeout = command
                .timeout_ms
                .map(Duration::from_millis)
                .unwrap_or(POST_UPLOAD_TIMEOUT);
            let outcome = run(
                sandbox,
                lease_dir,
                &cwd,
                &[],
                &argv,
                None,
                Some(timeout),
                64 * 1024,
                None,
                None,
                None,
            )
            .await?;
            envrt_driver_api::sync::post_upload_verdict(
                &command.command,
                outcome.timed_out,
                outcome.signal.as_deref(),
                outcome.exit_code,
            )?;
        }
        results.push(json!({
            "operationId": op.operation_id,
            "filesTransferred": counts.files,
            "bytesTransferred": counts.bytes,
        }));
    }
    Ok(json!({ "operations": results }))
}

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counts {
    pub(crate) files: u64,
    pub(crate) bytes: u64,
}

/// Where a copied tree's links are read: on the host as they are, or in sandbox terms.
enum Source<'a> {
    Host,
    Lease(&'a Path),
}

struct Copier<'a> {
    source: Source<'a>,
    follow: bool,
    excludes: ExcludeSet,
    target_display: String,
    /// The synced source as given (for messages).
    source_display: String,
    /// The mode bits kept from source entries (special bits only when asked for).
    mask: u32,
    /// The bytes this entry may still write (sync out's bound; unbounded for sync in).
    budget: ByteBudget,
    ancestors: Vec<(u64, u64)>,
    counts: Counts,
    /// The fault-point operation (`sync_in`, `sync_out`): one point after each file.
    fault: &'static str,
}

fn copy_in(lease_dir: &Path, file: &SyncFile, excludes: ExcludeSet, owner: Owner) -> Result<Counts, DriverError> {
    let target = resolve(lease_dir, &file.target_path, false)?;
    check_kind(Path::new(&file.source_path), file)?;
    if target.sandbox == WORKSPACE && file.kind == SyncKind::File {
        return Err(DriverError::invalid("a file cannot replace the workspace root"));
    }
    // Built where the sandbox cannot see it (the lease root, beside the lease
    // directories), then renamed into a parent opened link-free beneath the lease.
    let scratch = scratch_dir(lease_dir);
    let staged = staging_name(&scratch);
    let placed = stage_in(file, excludes, owner, &staged)
        .and_then(|counts| Ok((counts, open_parent(lease_dir, &file.target_path, &target, Some(owner))?)))
        .and_then(|(counts, (parent, last))| {
            match last {
                Some(last) => replace(&staged, &parent.join(&last), &scratch, "sync_in")?,
                None => {
                    let entries = fs::read_dir(&staged).map_err(|e| io("Reading", &staged, e))?;
                    for entry in entries {
                        let entry = entry.map_err(|e| io("Reading", &staged, e))?;
                        replace(&entry.path(), &parent.join(entry.file_name()), &scratch, "sync_in")?;
                    }
                }
            }
            Ok(counts)
        });
    remove_any(&staged);
    placed
}

/// Copies the host source of `file` to `staged` and hands it to the lease's sandbox user
/// `owner` (what lands in the sandbox belongs to that user, so it can change it).
pub(crate) fn stage_in(
    file: &SyncFile,
    excludes: ExcludeSet,
    owner: Owner,
    staged: &Path,
) -> Result<Counts, DriverError> {
    let source = PathBuf::from(&file.source_path);
    let mut copier = Copier {
        source: Source::Host,
        follow: file.follows_symlinks(),
        excludes,
        target_display: file.target_path.clone(),
        source_display: file.source_path.clone(),
        ancestors: Vec::new(),
        counts: Counts::default(),
        mask: file.mode_mask(),
        budget: ByteBudget::new(u64::MAX),
        fault: "sync_in",
    };
    let name = source
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    copier.copy_entry(&source, None, staged, "", &name, file.mode)?;
    owner
        .hand_over_tree(staged)
        .map_err(|e| io("Handing over", staged, e))?;
    Ok(copier.counts)
}

fn copy_out(lease_dir: &Path, file: &SyncFile, excludes: ExcludeSet) -> Result<Counts, DriverError> {
    let resolved = resolve(lease_dir, &file.source_path, file.follows_symlinks())?;
    // a missing directory on the way means a missing source
    let (parent, last) = open_parent(lease_dir, &file.source_path, &resolved, None).map_err(|e| match e {
        DriverError::Io { source, .. }
            if matches!(
                source.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            DriverError::SourceMissing {
                path: file.source_path.clone(),
            }
        }
        e => e,
    })?;
    let source = match &last {
        Some(last) => parent.join(last),
        None => parent.path(),
    };
    check_kind(&source, file)?;
    let copier = Copier {
        source: Source::Lease(lease_dir),
        follow: file.follows_symlinks(),
        excludes,
        target_display: file.target_path.clone(),
        source_display: file.source_path.clone(),
        ancestors: Vec::new(),
        counts: Counts::default(),
        mask: file.mode_mask(),
        budget: ByteBudget::new(file.byte_limit()),
        fault: "sync_out",
    };
    place_out(
        copier,
        &source,
        Some(resolved.sandbox),
        last.as_deref().unwrap_or(""),
        file,
    )
}

/// Copies a host-side tree (a copy made in the sandbox, see `sync_sandboxed`) to the host
/// target of `file`, following no link.
pub(crate) fn place_copied(
    source: &Path,
    name: &str,
    file: &SyncFile,
    excludes: ExcludeSet,
) -> Result<Counts, DriverError> {
    let copier = Copier {
        source: Source::Host,
        follow: false,
        excludes,
        target_display: file.target_path.clone(),
        source_display: file.source_path.clone(),
        ancestors: Vec::new(),
        counts: Counts::default(),
        mask: file.mode_mask(),
        budget: ByteBudget::new(file.byte_limit()),
        fault: "sync_out",
    };
    place_out(copier, source, None, name, file)
}

fn place_out(
    mut copier: Copier<'_>,
    source: &Path,
    sandbox_path: Option<String>,
    name: &str,
    file: &SyncFile,
) -> Result<Counts, DriverError> {
    let target = Path::new(&file.target_path);
    let target_parent = target.parent().unwrap_or(Path::new("/"));
    fs::create_dir_all(target_parent).map_err(|e| io("Creating", target_parent, e))?;
    // what a worker killed mid-sync left staged here goes first
    sweep_dead(target_parent);
    let staged = staging_name(target_parent);
    let placed = copier
        .copy_entry(source, sandbox_path, &staged, "", name, file.mode)
        .and_then(|()| replace(&staged, target, target_parent, "sync_out"));
    if placed.is_err() {
        remove_any(&staged);
    }
    placed.map(|()| copier.counts)
}

/// The worker's private scratch space for a lease: its root, which is never bound into a
/// sandbox.
fn scratch_dir(lease_dir: &Path) -> PathBuf {
    lease_dir.parent().unwrap_or(Path::new("/")).to_path_buf()
}

pub(crate) fn check_kind(source: &Path, file: &SyncFile) -> Result<(), DriverError> {
    let meta = if file.follows_symlinks() {
        fs::metadata(source)
    } else {
        fs::symlink_metadata(source)
    };
    let meta = meta.map_err(|_| DriverError::SourceMissing {
        path: file.source_path.clone(),
    })?;
    let ok = match file.kind {
        SyncKind::File => meta.is_file() || meta.file_type().is_symlink(),
        SyncKind::Directory => meta.is_dir(),
    };
    if ok {
        Ok(())
    } else {
        Err(DriverError::SourceKind {
            path: file.source_path.clone(),
            expected: match file.kind {
                SyncKind::File => "file",
                SyncKind::Directory => "directory",
            },
        })
    }
}

pub(crate) fn io(context: &str, path: &Path, e: std::io::Error) -> DriverError {
    DriverError::io(format!("{context} {}", path.display()), e)
}

/// How deep a synced tree may go: runtime-core's bound for every driver's walk. Deeper
/// trees are refused with [`DriverError::TreeTooDeep`] before anything is placed; the walk
/// itself is iterative, so depth never costs stack (the worker raises its open-file limit
/// at start: a walk in a lease holds one descriptor per level).
pub(crate) use envrt_driver_files::tree::MAX_TREE_DEPTH;

/// One step of the iterative walk.
enum Step {
    /// Copy an entry (a directory pushes its children and a `Leave`).
    Visit {
        source: PathBuf,
        sandbox_path: Option<String>,
        dest: PathBuf,
        rel: String,
        name: String,
        mode: Option<u32>,
        depth: usize,
    },
    /// All children of a directory are done: give it its final mode.
    Leave {
        dest: PathBuf,
        mode: u32,
        /// The directory opened beneath the lease, kept open while its children are
        /// copied through it.
        _dir: Option<Beneath>,
    },
}

impl Copier<'_> {
    /// Copies `source` (and, for a directory, everything below it) to `dest`. Names are
    /// carried as bytes (`OsString`), so non-UTF-8 names survive both ways.
    fn copy_entry(
        &mut self,
        source: &Path,
        sandbox_path: Option<String>,
        dest: &Path,
        rel: &str,
        name: &str,
        mode: Option<u32>,
    ) -> Result<(), DriverError> {
        let mut stack = vec![Step::Visit {
            source: source.to_path_buf(),
            sandbox_path,
            dest: dest.to_path_buf(),
            rel: rel.to_owned(),
            name: name.to_owned(),
            mode,
            depth: 0,
        }];
        while let Some(step) = stack.pop() {
            match step {
                Step::Leave { dest, mode, _dir } => {
                    self.ancestors.pop();
                    fs::set_permissions(&dest, fs::Permissions::from_mode(mode))
                        .map_err(|e| io("Setting mode of", &dest, e))?;
                }
                Step::Visit {
                    source,
                    sandbox_path,
                    dest,
                    rel,
                    name,
                    mode,
                    depth,
                } => self.visit(&mut stack, &source, sandbox_path, &dest, &rel, &name, mode, depth)?,
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn visit(
        &mut self,
        stack: &mut Vec<Step>,
        source: &Path,
        sandbox_path: Option<String>,
        dest: &Path,
        rel: &str,
        name: &str,
        mode: Option<u32>,
        depth: usize,
    ) -> Result<(), DriverError> {
        let lmeta = fs::symlink_metadata(source).map_err(|e| io("Reading", source, e))?;
        // Keeps a directory opened beneath the lease alive while paths through it are used.
        let mut _held: Option<Beneath> = None;
        let (real, sandbox_path, meta) = if lmeta.file_type().is_symlink() {
            if !self.follow {
                let target = fs::read_link(source).map_err(|e| io("Reading link", source, e))?;
                let entry = if rel.is_empty() { name } else { rel };
                if !link_stays_inside(entry, &target) {
                    return Err(DriverError::EntryEscapesTarget {
                        entry: entry.to_owned(),
                        target: self.target_display.clone(),
                    });
                }
                return symlink(&target, dest).map_err(|e| io("Creating link", dest, e));
            }
            match (&self.source, &sandbox_path) {
                (Source::Lease(lease_dir), Some(path)) => {
                    let resolved = resolve(lease_dir, path, true)?;
                    let (parent, last) = open_parent(lease_dir, path, &resolved, None)?;
                    let real = match &last {
                        Some(last) => parent.join(last),
                        None => parent.path(),
                    };
                    let meta =
                        fs::symlink_metadata(&real).map_err(|_| DriverError::SourceMissing { path: path.clone() })?;
                    _held = Some(parent);
                    (real, Some(resolved.sandbox), meta)
                }
                _ => {
                    let missing = || DriverError::SourceMissing {
                        path: source.display().to_string(),
                    };
                    let real = fs::canonicalize(source).map_err(|_| missing())?;
                    let meta = fs::metadata(&real).map_err(|_| missing())?;
                    (real, None, meta)
                }
            }
        } else {
            (source.to_path_buf(), sandbox_path, lmeta)
        };
        if meta.is_dir() {
            if depth >= MAX_TREE_DEPTH {
                return Err(envrt_driver_files::tree::too_deep(&self.source_display));
            }
            let key = (meta.dev(), meta.ino());
            if self.ancestors.contains(&key) {
                return Err(DriverError::invalid(format!(
                    "sync source {} loops back on itself through a symlink",
                    source.display()
                )));
            }
            fs::create_dir(dest).map_err(|e| io("Creating", dest, e))?;
            fs::set_permissions(dest, fs::Permissions::from_mode(0o700)).map_err(|e| io("Setting mode of", dest, e))?;
            self.ancestors.push(key);
            // Inside a lease, walk through an opened descriptor so that no link swapped in
            // later can lead the walk out of the lease.
            let dir = match self.source {
                Source::Lease(_) => Some(
                    Beneath::open_path(&real)
                        .map_err(|e| beneath_error(&sandbox_path.clone().unwrap_or_default(), e))?,
                ),
                Source::Host => None,
            };
            let real = dir.as_ref().map(Beneath::path).unwrap_or(real);
            let mut names: Vec<_> = fs::read_dir(&real)
                .map_err(|e| io("Reading", &real, e))?
                .map(|e| e.map(|e| e.file_name()))
                .collect::<Result<_, _>>()
                .map_err(|e| io("Reading", &real, e))?;
            names.sort();
            let mut children = Vec::with_capacity(names.len());
            for child in names {
                // The lossy form is for globs, link checks and messages only: every file
                // system operation uses the name's own bytes.
                let child_name = child.to_string_lossy().into_owned();
                let child_rel = if rel.is_empty() {
                    child_name.clone()
                } else {
                    format!("{rel}/{child_name}")
                };
                if self.excludes.is_excluded(&child_rel) {
                    continue;
                }
                let child_sandbox = sandbox_path.as_ref().map(|p| format!("{p}/{child_name}"));
                let child_path = match &dir {
                    Some(dir) => dir.join(&child),
                    None => real.join(&child),
                };
                children.push(Step::Visit {
                    source: child_path,
                    sandbox_path: child_sandbox,
                    dest: dest.join(&child),
                    rel: child_rel,
                    name: child_name,
                    mode: None,
                    depth: depth + 1,
                });
            }
            stack.push(Step::Leave {
                dest: dest.to_path_buf(),
                mode: mode.unwrap_or(meta.mode() & self.mask),
                _dir: dir,
            });
            // popped in name order
            stack.extend(children.into_iter().rev());
            Ok(())
        } else if meta.is_file() {
            let bytes = copy_file(
                &real,
                dest,
                mode.unwrap_or(meta.mode() & self.mask),
                &mut self.budget,
                &self.source_display,
            )?;
            self.counts.files += 1;
            self.counts.bytes += bytes;
            fault_point(self.fault);
            Ok(())
        } else {
            // FIFOs, sockets and devices are not copied (reading a FIFO could block forever).
            Ok(())
        }
    }
}
