//! Copying one sync entry into a private staging path beside its target, checking links,
//! and committing staged entries with atomic renames (or rolling them back).
//!
//! Staged files are created `0600` and directories `0700`, filled, then given their final
//! mode, so no target is ever readable by others before it is complete.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use envrt_driver_api::DriverError;
use envrt_driver_api::sync::{ExcludeSet, SyncKind};
use envrt_driver_files::tree;
use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};

use envrt_driver_files::sparse::{ByteBudget, CopyError, copy_file_sparse};

use crate::workspace::remove_tree;

/// One entry to copy.
pub(crate) struct CopySpec<'a> {
    /// The source, already resolved (host path, or confined environment path).
    pub(crate) source: &'a Path,
    /// The final target path (absolute).
    pub(crate) target: &'a Path,
    /// The target as the caller wrote it, for error messages.
    pub(crate) target_shown: &'a str,
    /// The source as the caller wrote it, for error messages.
    pub(crate) source_shown: &'a str,
    /// File or directory.
    pub(crate) kind: SyncKind,
    /// Final mode of the target.
    pub(crate) mode: Option<u32>,
    /// Left-out paths.
    pub(crate) exclude: &'a ExcludeSet,
    /// Copy what links point to instead of the links.
    pub(crate) follow: bool,
    /// When the source side is a lease workspace: links followed there must stay in it.
    pub(crate) source_confine: Option<&'a Path>,
    /// The mode bits kept from source entries (special bits only when asked for).
    pub(crate) mask: u32,
    /// The bytes this entry may still write (sync out's bound; unbounded for sync in).
    pub(crate) budget: std::cell::Cell<ByteBudget>,
    /// The fault point after each file copied (`sync_in`, `sync_out`; see
    /// [`envrt_driver_api::fault`]).
    pub(crate) fault: &'static str,
}

/// A staged entry waiting to be renamed into place.
#[derive(Debug)]
pub(crate) struct Staged {
    temp: PathBuf,
    target: PathBuf,
    /// Where the replaced target went (by exchange) once committed.
    replaced: Option<PathBuf>,
    committed: bool,
}

/// Counts of regular files and their bytes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counts {
    pub(crate) files: u64,
    pub(crate) bytes: u64,
}

/// The start of the hidden siblings of `target` tagged `tag`; each is followed by the pid
/// of the process that made it, `-`, and a unique part.
fn sibling_prefix(target: &Path, tag: &str) -> String {
    let name = target.file_name().map(OsStr::to_string_lossy).unwrap_or_default();
    let short: String = name.chars().take(40).collect();
    format!(".{short}.envrt-{tag}-")
}

/// A unique hidden sibling of `target`, naming this process: `.{name}.envrt-{tag}-{pid}-{unique}`.
fn sibling(target: &Path, tag: &str) -> PathBuf {
    let unique = uuid::Uuid::new_v4().simple().to_string();
    target.with_file_name(format!(
        "{}{}-{}",
        sibling_prefix(target, tag),
        std::process::id(),
        &unique[..12]
    ))
}

/// Removes the hidden siblings of `target` that a process killed mid-sync left (a staged
/// copy, or the target it had replaced and not yet removed).
fn sweep_dead_siblings(target: &Path) {
    if let Some(parent) = target.parent() {
        for tag in ["new", "old"] {
            envrt_driver_files::stale::remove_entries_of_dead_pids(parent, &sibling_prefix(target, tag));
        }
    }
}

fn io_err(what: &str, path: &Path, e: io::Error) -> DriverError {
    DriverError::io(format!("cannot {what} {}", path.display()), e)
}

/// Stages `spec` beside its target; on error nothing staged remains.
pub(crate) fn stage(spec: &CopySpec<'_>, counts: &mut Counts) -> Result<Staged, DriverError> {
    let meta = fs::metadata(spec.source).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => DriverError::SourceMissing {
            path: spec.source_shown.to_owned(),
        },
        _ => io_err("inspect", spec.source, e),
    })?;
    sweep_dead_siblings(spec.target);
    let temp = sibling(spec.target, "new");
    let result = match spec.kind {
        SyncKind::File if meta.is_file() => {
            let mode = spec.mode.unwrap_or(meta.mode() & spec.mask);
            copy_file(spec, spec.source, &temp, mode, counts)
        }
        SyncKind::File => Err(DriverError::SourceKind {
            path: spec.source_shown.to_owned(),
            expected: "file",
        }),
        SyncKind::Directory if meta.is_dir() => stage_tree(spec, &meta, &temp, counts),
        SyncKind::Directory => Err(DriverError::SourceKind {
            path: spec.source_shown.to_owned(),
            expected: "directory",
        }),
    };
    match result {
        Ok(()) => Ok(Staged {
            temp,
            target: spec.target.to_path_buf(),
            replaced: None,
            committed: false,
        }),
        Err(e) => {
            let _ = remove_tree(&temp);
            Err(e)
        }
    }
}

/// Copies one regular file keeping its holes, charging its length to the entry's budget.
fn copy_file(
    spec: &CopySpec<'_>,
    source: &Path,
    dest: &Path,
    mode: u32,
    counts: &mut Counts,
) -> Result<(), DriverError> {
    let mut input = File::open(source).map_err(|e| io_err("read", source, e))?;
    let mut output = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dest)
        .map_err(|e| io_err("create", dest, e))?;
    let mut budget = spec.budget.get();
    let n = match copy_file_sparse(&mut input, &mut output, &mut budget) {
        Ok(n) => n,
        Err(CopyError::OverLimit) => {
            return Err(DriverError::SyncTooLarge {
                path: spec.source_shown.to_owned(),
                limit: budget.limit(),
            });
        }
        Err(CopyError::Io(e)) => return Err(io_err("copy to", dest, e)),
    };
    spec.budget.set(budget);
    output
        .set_permissions(fs::Permissions::from_mode(mode & 0o7777))
        .map_err(|e| io_err("set the mode of", dest, e))?;
    counts.files += 1;
    counts.bytes += n;
    envrt_driver_api::fault::point(spec.fault);
    Ok(())
}

fn make_dir(path: &Path) -> Result<(), DriverError> {
    fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(|e| io_err("create", path, e))
}

fn set_mode(path: &Path, mode: u32) -> Result<(), DriverError> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode & 0o7777)).map_err(|e| io_err("set the mode of", path, e))
}

/// A copied link: where it sits in the staged tree and what it says.
struct CopiedLink {
    relative: Vec<OsString>,
    shown: String,
    text: PathBuf,
}

/// One step of the (iterative) tree copy.
enum Step {
    /// Copy the directory `source` (identified by `id`) into the new directory `dest`.
    Enter {
        source: PathBuf,
        dest: PathBuf,
        relative: Vec<OsString>,
        id: (u64, u64),
        mode: u32,
    },
    /// Everything below `dest` is copied: give it its mode and leave it.
    Leave { dest: PathBuf, mode: u32 },
}

struct TreeWalk<'a, 'b> {
    spec: &'a CopySpec<'b>,
    counts: &'a mut Counts,
    links: Vec<CopiedLink>,
    /// (device, inode) of the directories on the current path, against link cycles.
    ancestors: Vec<(u64, u64)>,
    /// (device, inode) of the staging directory, skipped when the source contains it.
    staging: (u64, u64),
    /// Steps still to take (a stack: no recursion, whatever the tree's depth).
    steps: Vec<Step>,
}

fn stage_tree(spec: &CopySpec<'_>, meta: &fs::Metadata, temp: &Path, counts: &mut Counts) -> Result<(), DriverError> {
    make_dir(temp)?;
    let staged = fs::symlink_metadata(temp).map_err(|e| io_err("inspect", temp, e))?;
    let mut walk = TreeWalk {
        spec,
        counts,
        links: Vec::new(),
        ancestors: Vec::new(),
        staging: (staged.dev(), staged.ino()),
        steps: Vec::new(),
    };
    walk.run(spec.source, temp, (meta.dev(), meta.ino()))?;
    walk.links.sort_by(|a, b| a.relative.cmp(&b.relative));
    for link in &walk.links {
        if tree::link_escapes(temp, spec.target, &link.relative, &link.text) {
            return Err(DriverError::EntryEscapesTarget {
                entry: link.shown.clone(),
                target: spec.target_shown.to_owned(),
            });
        }
    }
    set_mode(temp, spec.mode.unwrap_or(meta.mode() & spec.mask))
}

impl TreeWalk<'_, '_> {
    /// Copies the tree at `source` into the existing directory `dest`.
    fn run(&mut self, source: &Path, dest: &Path, id: (u64, u64)) -> Result<(), DriverError> {
        self.ancestors.push(id);
        self.copy_dir(source, dest, &[])?;
        while let Some(step) = self.steps.pop() {
            match step {
                Step::Enter {
                    source,
                    dest,
                    relative,
                    id,
                    mode,
                } => {
                    if self.ancestors.contains(&id) {
                        return Err(DriverError::invalid(format!(
                            "following links at {} loops back to a parent directory",
                            source.display()
                        )));
                    }
                    if relative.len() > tree::MAX_TREE_DEPTH {
                        return Err(tree::too_deep(self.spec.source_shown));
                    }
                    make_dir(&dest)?;
                    self.ancestors.push(id);
                    self.steps.push(Step::Leave {
                        dest: dest.clone(),
                        mode,
                    });
                    self.copy_dir(&source, &dest, &relative)?;
                }
                Step::Leave { dest, mode } => {
                    self.ancestors.pop();
                    set_mode(&dest, mode)?;
                }
            }
        }
        Ok(())
    }

    /// Copies the files and links of one directory; its subdirectories become steps.
    fn copy_dir(&mut self, source: &Path, dest: &Path, relative: &[OsString]) -> Result<(), DriverError> {
        let entries = fs::read_dir(source).map_err(|e| io_err("read", source, e))?;
        let mut subdirs = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_err("read", source, e))?;
            let name = entry.file_name();
            let mut child = relative.to_vec();
            child.push(name.clone());
            if let Some(step) = self.copy_entry(&entry.path(), &dest.join(&name), child)? {
                subdirs.push(step);
            }
        }
        // Reversed, so that the stack takes them in directory order.
        self.steps.extend(subdirs.into_iter().rev());
        Ok(())
    }

    /// Copies one non-directory entry, or returns the step that will copy a directory.
    fn copy_entry(&mut self, source: &Path, dest: &Path, relative: Vec<OsString>) -> Result<Option<Step>, DriverError> {
        let shown = tree::shown(&relative);
        if self.spec.exclude.is_excluded(&shown) {
            return Ok(None);
        }
        let mut meta = fs::symlink_metadata(source).map_err(|e| io_err("inspect", source, e))?;
        if meta.file_type().is_symlink() {
            if !self.spec.follow {
                let text = fs::read_link(source).map_err(|e| io_err("read link", source, e))?;
                std::os::unix::fs::symlink(&text, dest).map_err(|e| io_err("create link", dest, e))?;
                self.links.push(CopiedLink { relative, shown, text });
                return Ok(None);
            }
            if let Some(root) = self.spec.source_confine {
                let outside = || DriverError::PathOutsideWorkspace {
                    path: source.to_string_lossy().into_owned(),
                };
                let real = fs::canonicalize(source).map_err(|_| outside())?;
                if !real.starts_with(root) {
                    return Err(outside());
                }
            }
            meta = fs::metadata(source).map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => DriverError::SourceMissing {
                    path: source.to_string_lossy().into_owned(),
                },
                _ => io_err("inspect", source, e),
            })?;
        }
        if meta.is_dir() {
            let id = (meta.dev(), meta.ino());
            if id == self.staging {
                // The target lies inside the source: do not copy the copy into itself.
                return Ok(None);
            }
            Ok(Some(Step::Enter {
                source: source.to_path_buf(),
                dest: dest.to_path_buf(),
                relative,
                id,
                mode: meta.mode() & self.spec.mask,
            }))
        } else if meta.is_file() {
            copy_file(self.spec, source, dest, meta.mode() & self.spec.mask, self.counts)?;
            Ok(None)
        } else {
            // FIFOs, sockets and devices are not copied.
            Ok(None)
        }
    }
}

/// Renames every staged entry into place (an existing target is exchanged atomically and
/// removed afterwards). When one rename fails, the ones done are undone and every staged
/// path removed.
pub(crate) fn commit(staged: &mut [Staged]) -> Result<(), DriverError> {
    for index in 0..staged.len() {
        if let Err(e) = commit_one(&mut staged[index]) {
            rollback(staged);
            return Err(e);
        }
    }
    for entry in staged.iter_mut() {
        if let Some(old) = entry.replaced.take() {
            let _ = remove_tree(&old);
        }
    }
    Ok(())
}

fn commit_one(entry: &mut Staged) -> Result<(), DriverError> {
    let exists = fs::symlink_metadata(&entry.target).is_ok();
    if exists {
        exchange(&entry.temp, &entry.target).map_err(|e| io_err("replace", &entry.target, e))?;
        entry.replaced = Some(entry.temp.clone());
    } else {
        rename_new(&entry.temp, &entry.target).map_err(|e| io_err("create", &entry.target, e))?;
    }
    entry.committed = true;
    envrt_driver_api::fault::point("sync_place");
    Ok(())
}

/// Whether a `renameat2` flag is unsupported by the file system (overlayfs, old kernels).
fn unsupported(e: nix::errno::Errno) -> bool {
    matches!(e, nix::errno::Errno::EINVAL | nix::errno::Errno::ENOSYS)
}

/// Swaps two existing paths atomically; where the file system cannot, moves the old one
/// aside first (a short window without the target).
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    match renameat2(AT_FDCWD, a, AT_FDCWD, b, RenameFlags::RENAME_EXCHANGE) {
        Ok(()) => Ok(()),
        Err(e) if unsupported(e) => {
            let aside = sibling(b, "old");
            fs::rename(b, &aside)?;
            if let Err(e) = fs::rename(a, b) {
                let _ = fs::rename(&aside, b);
                return Err(e);
            }
            fs::rename(&aside, a)
        }
        Err(e) => Err(io::Error::from(e)),
    }
}

/// Renames onto a path that must not exist.
fn rename_new(from: &Path, to: &Path) -> io::Result<()> {
    match renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE) {
        Ok(()) => Ok(()),
        Err(e) if unsupported(e) => {
            if fs::symlink_metadata(to).is_ok() {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
            fs::rename(from, to)
        }
        Err(e) => Err(io::Error::from(e)),
    }
}

/// Undoes committed entries (restoring what they replaced) and removes staged paths.
pub(crate) fn rollback(staged: &mut [Staged]) {
    for entry in staged.iter_mut().rev() {
        if entry.committed {
            match entry.replaced.take() {
                Some(old) => {
                    let _ = exchange(&old, &entry.target);
                    let _ = remove_tree(&old);
                }
                None => {
                    let _ = remove_tree(&entry.target);
                }
            }
            entry.committed = false;
        } else {
            let _ = remove_tree(&entry.temp);
        }
    }
}

/// Creates the missing parents of `target` (mode `0755` less the umask, like `mkdir -p`),
/// returning those it created, deepest last, so a failed operation can remove them. With
/// a `floor` (a lease workspace), only directories strictly below it are created: a
/// workspace removed by a concurrent release is never brought back.
pub(crate) fn create_parents(target: &Path, floor: Option<&Path>) -> Result<Vec<PathBuf>, DriverError> {
    let mut missing = Vec::new();
    let mut probe = target.parent();
    while let Some(dir) = probe {
        if fs::symlink_metadata(dir).is_ok() {
            break;
        }
        if let Some(floor) = floor.filter(|f| !dir.starts_with(f) || dir == *f) {
            return Err(DriverError::ResourceGone {
                id: floor
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            });
        }
        missing.push(dir.to_path_buf());
        probe = dir.parent();
    }
    missing.reverse();
    let mut created = Vec::new();
    for dir in missing {
        match fs::DirBuilder::new().mode(0o755).create(&dir) {
            Ok(()) => created.push(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                remove_created(&created);
                return Err(io_err("create", &dir, e));
            }
        }
    }
    Ok(created)
}

/// Removes directories made by [`create_parents`] (only if still empty).
pub(crate) fn remove_created(created: &[PathBuf]) {
    for dir in created.iter().rev() {
        let _ = fs::remove_dir(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("envrt-local-unit-{tag}-{}", uuid::Uuid::new_v4().simple()));
        fs::create_dir(&dir).unwrap();
        dir
    }

    #[test]
    fn parents_are_created_below_the_floor_only() {
        let base = scratch("floor");
        let floor = base.join("lease-x");
        let err = create_parents(&floor.join("a/b/file"), Some(&floor)).unwrap_err();
        assert_eq!(err.to_string(), "Lease resource \"lease-x\" does not exist.");
        assert!(!floor.exists());
        fs::create_dir(&floor).unwrap();
        let created = create_parents(&floor.join("a/b/file"), Some(&floor)).unwrap();
        assert_eq!(created, vec![floor.join("a"), floor.join("a/b")]);
        remove_created(&created);
        assert!(!floor.join("a").exists());
        remove_tree(&base).unwrap();
    }
}
