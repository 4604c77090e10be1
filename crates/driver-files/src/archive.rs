//! The one tar extractor behind every driver's sync out that receives an archive (Docker's
//! archive API, the SSH host's `tar`): the stream is hostile bytes, made by whatever runs
//! on the other side.
//!
//! - Every entry is created beneath a private staging directory (`0700`, beside the target)
//!   through descriptors: each path is resolved with `openat2(RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS)`, so nothing is ever written, created or chmod-ed through a link
//!   or `..`, and symbolic links are only created once every other entry is written; then
//!   the tree's links are resolved with the shared resolver ([`crate::tree`]).
//! - The stream must be the archive of one source: its first entry is the top entry (a
//!   directory, or the one regular file of a file sync) and every later entry lies below
//!   it; after the end-of-archive blocks only zero padding may follow.
//! - Modes lose their set-uid, set-gid and sticky bits unless the request keeps them
//!   ([`envrt_driver_api::sync::SyncFile::keep_special_bits`]); runs of zero blocks become holes and
//!   every byte is charged to the entry's bound ([`envrt_driver_api::sync::SyncFile::max_bytes`]).
//!
//! Only a [`Staging::place`] moves the tree onto its target; dropping a [`Staging`] removes
//! everything it holds, so a refusal leaves the target as it was.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};

use crate::sparse::{ByteBudget, CopyError, write_sparse};
use crate::tree;
use envrt_driver_api::error::DriverError;
use envrt_driver_api::sync::{ExcludeSet, SyncKind};

mod beneath;
#[doc(hidden)]
pub mod fuzzing;
mod settle;

pub use settle::settle_tree;

/// Most bytes of padding accepted after the end-of-archive blocks (all zero).
const MAX_TRAILER: u64 = 1 << 20;

/// The name of the staged tree inside its staging directory.
const STAGED: &str = "t";

/// Counts of regular files and their bytes, as a sync reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Regular files written (hard links count too).
    pub files: u64,
    /// Their bytes of content.
    pub bytes: u64,
}

/// Why an extraction stopped: a refusal (an exact contract error) or an I/O failure (with
/// what was being done), kept apart so a driver can tell its transport's failures.
#[derive(Debug)]
pub enum ExtractError {
    /// The archive or the request was refused.
    Refused(DriverError),
    /// Reading the stream or writing the tree failed.
    Io(String, io::Error),
}

impl ExtractError {
    /// The driver error a caller sees.
    pub fn into_driver(self) -> DriverError {
        match self {
            ExtractError::Refused(e) => e,
            ExtractError::Io(context, e) => DriverError::io(context, e),
        }
    }
}

fn io_at(context: impl Into<String>) -> impl FnOnce(io::Error) -> ExtractError {
    let context = context.into();
    move |e| ExtractError::Io(context, e)
}

/// What one entry of a sync out asks for.
pub struct ExtractPlan<'a> {
    /// File or directory.
    pub kind: SyncKind,
    /// The final mode of the top entry, applied as given.
    pub mode: Option<u32>,
    /// Paths left out.
    pub exclude: &'a ExcludeSet,
    /// Keep set-uid, set-gid and sticky bits from the archive.
    pub keep_special_bits: bool,
    /// Most bytes of content the entry may write.
    pub max_bytes: u64,
    /// Where the tree will be (for resolving its absolute links).
    pub final_target: &'a Path,
    /// The source as the caller gave it (for messages).
    pub source_shown: &'a str,
    /// The target as the caller gave it (for messages).
    pub target_shown: &'a str,
}

/// The prefix of a staging directory's name, `.envrt-stage-{pid}-{uuid}`: the pid of the
/// process that made it, so a later one can remove what a killed one left.
pub const STAGING_PREFIX: &str = ".envrt-stage-";

/// A private directory beside a target holding one staged tree until it is placed.
pub struct Staging {
    dir: PathBuf,
    fd: OwnedFd,
    target: PathBuf,
}

impl Staging {
    /// Creates the target's parent directories and a fresh staging directory (`0700`) in it,
    /// after removing the staging directories there whose process is gone (a host program
    /// killed mid-sync cannot remove its own).
    pub fn new(target: &Path) -> Result<Staging, DriverError> {
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            Some(_) => PathBuf::from("."),
            None => return Err(DriverError::invalid("A sync target needs a parent directory.")),
        };
        fs::create_dir_all(&parent).map_err(|e| DriverError::io(format!("Creating {}", parent.display()), e))?;
        crate::stale::remove_entries_of_dead_pids(&parent, STAGING_PREFIX);
        let dir = parent.join(format!(
            "{STAGING_PREFIX}{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| DriverError::io(format!("Creating {}", dir.display()), e))?;
        let fd = rustix::fs::open(
            &dir,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::NOFOLLOW,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| DriverError::io(format!("Opening {}", dir.display()), e.into()));
        let fd = match fd {
            Ok(fd) => fd,
            Err(e) => {
                let _ = fs::remove_dir(&dir);
                return Err(e);
            }
        };
        Ok(Staging {
            dir,
            fd,
            target: target.to_path_buf(),
        })
    }

    /// The staged tree's path.
    pub fn staged(&self) -> PathBuf {
        self.dir.join(STAGED)
    }

    /// Puts the staged tree at the target in one atomic step: the two are exchanged
    /// (`renameat2` `RENAME_EXCHANGE`), and the previous target, now in the staging
    /// directory, goes with it, so a process killed at any moment leaves the target as it
    /// was or complete. A missing target takes a plain rename. Where the file system cannot
    /// exchange, an existing target is moved into the staging directory first (not atomic
    /// against a kill) and back when the move fails.
    pub fn place(&self) -> Result<(), DriverError> {
        use rustix::fs::{CWD, RenameFlags, renameat_with};
        let io = |e| DriverError::io(format!("Replacing {}", self.target.display()), e);
        match renameat_with(CWD, self.staged(), CWD, &self.target, RenameFlags::EXCHANGE) {
            Ok(()) => {
                envrt_driver_api::fault::point("sync_place");
                return Ok(());
            }
            Err(rustix::io::Errno::NOENT) if fs::symlink_metadata(&self.target).is_err() => {
                return fs::rename(self.staged(), &self.target).map_err(io);
            }
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS | rustix::io::Errno::OPNOTSUPP) => {}
            Err(e) => return Err(io(e.into())),
        }
        let aside = self.dir.join("old");
        let had = fs::symlink_metadata(&self.target).is_ok();
        if had {
            fs::rename(&self.target, &aside).map_err(io)?;
        }
        if let Err(e) = fs::rename(self.staged(), &self.target) {
            if had {
                let _ = fs::rename(&aside, &self.target);
            }
            return Err(io(e));
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        remove_tree(&self.dir);
    }
}

/// Removes a tree this process wrote (read-only directories made writable first; links
/// are never followed).
fn remove_tree(path: &Path) {
    let mut pending = vec![path.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let _ = fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700));
        if let Ok(entries) = fs::read_dir(&dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    pending.push(entry.path());
                }
            }
        }
    }
    let _ = fs::remove_dir_all(path);
}

/// An entry's name as components below the top; `None` when it is absolute, has `..`, or
/// is empty.
fn components(raw: &[u8]) -> Option<Vec<OsString>> {
    let mut parts = Vec::new();
    for c in Path::new(OsStr::from_bytes(raw)).components() {
        match c {
            Component::Normal(p) => parts.push(p.to_os_string()),
            Component::CurDir => {}
            _ => return None,
        }
    }
    if parts.is_empty() { None } else { Some(parts) }
}

/// Extracts `archive` into `staging` (see the module docs); returns the counts.
pub fn extract<R: Read>(archive: R, plan: &ExtractPlan<'_>, staging: &Staging) -> Result<Counts, ExtractError> {
    let base = &staging.fd;
    let staged = OsString::from(STAGED);
    let escapes = |entry: &str| {
        ExtractError::Refused(DriverError::EntryEscapesTarget {
            entry: entry.to_owned(),
            target: plan.target_shown.to_owned(),
        })
    };
    let too_large = || {
        ExtractError::Refused(DriverError::SyncTooLarge {
            path: plan.source_shown.to_owned(),
            limit: plan.max_bytes,
        })
    };
    let mask = envrt_driver_api::sync::kept_mode_bits(plan.keep_special_bits);
    let mut budget = ByteBudget::new(plan.max_bytes);
    let mut counts = Counts::default();
    let mut top: Option<OsString> = None;
    let mut top_mode = 0o755;
    let mut dir_modes: Vec<(Vec<OsString>, u32)> = Vec::new();
    let mut symlinks: Vec<(Vec<OsString>, OsString)> = Vec::new();
    let mut hard_links: Vec<(Vec<OsString>, Vec<OsString>)> = Vec::new();
    let mut skipped: Vec<PathBuf> = Vec::new();
    // Where the archive's links will be: no later entry may lie below one.
    let mut link_paths: std::collections::HashSet<Vec<OsString>> = std::collections::HashSet::new();
    let mut archive = tar::Archive::new(archive);
    let reading = "Reading the archive";
    for entry in archive.entries().map_err(io_at(reading))? {
        let mut entry = entry.map_err(io_at(reading))?;
        let raw_bytes = entry.path_bytes().into_owned();
        let raw = String::from_utf8_lossy(&raw_bytes).into_owned();
        let parts = components(&raw_bytes).ok_or_else(|| escapes(&raw))?;
        // Every entry lies below the first, which is the top.
        match &top {
            None if parts.len() == 1 => top = Some(parts[0].clone()),
            None => return Err(escapes(&raw)),
            Some(name) if parts.len() == 1 || parts[0] != *name => return Err(escapes(&raw)),
            Some(_) => {}
        }
        let relative = &parts[1..];
        if relative.len() > tree::MAX_TREE_DEPTH {
            return Err(ExtractError::Refused(tree::too_deep(plan.source_shown)));
        }
        let kind = entry.header().entry_type();
        let mode = entry.header().mode().unwrap_or(0o600) & mask;
        let regular = matches!(
            kind,
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse
        );
        if relative.is_empty() {
            top_mode = plan.mode.unwrap_or(mode);
            match (plan.kind, kind) {
                (SyncKind::Directory, tar::EntryType::Directory) => {
                    beneath::make_dir(base, &staged).map_err(io_at("Extracting"))?;
                }
                (SyncKind::File, _) if regular => {
                    let size = entry.header().size().map_err(io_at(reading))?;
                    if !budget.fits(size) {
                        return Err(too_large());
                    }
                    let mut file = beneath::create_file(base, &staged).map_err(io_at("Extracting"))?;
                    counts.bytes += write_content(&mut entry, &mut file, &mut budget, &too_large)?;
                    counts.files += 1;
                    rustix::fs::fchmod(&file, rustix::fs::Mode::from_raw_mode(top_mode & 0o7777))
                        .map_err(|e| ExtractError::Io("Setting the mode".into(), e.into()))?;
                }
                _ => {
                    return Err(ExtractError::Refused(DriverError::SourceKind {
                        path: plan.source_shown.to_owned(),
                        expected: if plan.kind == SyncKind::File {
                            "file"
                        } else {
                            "directory"
                        },
                    }));
                }
            }
            continue;
        }
        if plan.kind == SyncKind::File {
            return Err(escapes(&raw));
        }
        if (1..relative.len()).any(|n| link_paths.contains(&relative[..n])) {
            return Err(escapes(&tree::shown(relative)));
        }
        let rel_path: PathBuf = relative.iter().collect();
        if skipped.iter().any(|s| rel_path.starts_with(s)) || plan.exclude.is_excluded(&tree::shown(relative)) {
            if kind == tar::EntryType::Directory {
                skipped.push(rel_path);
            }
            continue;
        }
        let mut at = vec![staged.clone()];
        at.extend_from_slice(relative);
        let (name, parents) = at.split_last().expect("at least the top and one name");
        let writing = || io_at(format!("Extracting {}", tree::shown(relative)));
        match kind {
            tar::EntryType::Directory => {
                let dir = beneath::open_dir_creating(base, parents).map_err(writing())?;
                beneath::make_dir(&dir, name).map_err(writing())?;
                dir_modes.push((at.clone(), mode));
            }
            _ if regular => {
                let size = entry.header().size().map_err(io_at(reading))?;
                if !budget.fits(size) {
                    return Err(too_large());
                }
                let dir = beneath::open_dir_creating(base, parents).map_err(writing())?;
                let mut file = beneath::create_file(&dir, name).map_err(writing())?;
                counts.bytes += write_content(&mut entry, &mut file, &mut budget, &too_large)?;
                counts.files += 1;
                rustix::fs::fchmod(&file, rustix::fs::Mode::from_raw_mode(mode)).map_err(|e| writing()(e.into()))?;
                envrt_driver_api::fault::point("sync_out");
            }
            tar::EntryType::Symlink => {
                let text = entry.link_name_bytes().map(|b| b.into_owned()).unwrap_or_default();
                let text = OsStr::from_bytes(&text).to_os_string();
                if !link_stays_inside(relative, Path::new(&text)) {
                    return Err(escapes(&format!(
                        "{} -> {}",
                        tree::shown(relative),
                        text.to_string_lossy()
                    )));
                }
                link_paths.insert(relative.to_vec());
                symlinks.push((at.clone(), text));
            }
            tar::EntryType::Link => {
                let text = entry.link_name_bytes().map(|b| b.into_owned()).unwrap_or_default();
                let shown_link = || format!("{} => {}", tree::shown(relative), String::from_utf8_lossy(&text));
                let linked = components(&text)
                    .filter(|p| p.len() > 1 && Some(&p[0]) == top.as_ref())
                    .ok_or_else(|| escapes(&shown_link()))?;
                let mut from = vec![staged.clone()];
                from.extend_from_slice(&linked[1..]);
                hard_links.push((from, at.clone()));
            }
            // Devices, FIFOs and the like are not recreated.
            _ => {}
        }
    }
    let Some(_) = top else {
        return Err(ExtractError::Refused(DriverError::SourceMissing {
            path: plan.source_shown.to_owned(),
        }));
    };
    check_trailer(archive.into_inner(), plan)?;
    for (from, to) in hard_links {
        let bytes = beneath::hard_link(base, &from, &to)
            .map_err(io_at(format!("Extracting the hard link {}", tree::shown(&to[1..]))))?;
        counts.files += 1;
        counts.bytes += bytes;
    }
    // Links last: no entry above was written, created or chmod-ed through one.
    for (at, text) in symlinks {
        beneath::symlink(base, &at, &text).map_err(io_at(format!("Extracting the link {}", tree::shown(&at[1..]))))?;
    }
    if plan.kind == SyncKind::Directory {
        // Each link was checked alone above; together they may still lead out (`a/d0 -> ..`
        // then `up2 -> a/d0/../..`): resolve them step by step against the tree as written.
        tree::check_tree_links(
            &staging.staged(),
            plan.final_target,
            plan.source_shown,
            plan.target_shown,
        )
        .map_err(ExtractError::Refused)?;
        // Deepest first, so a read-only directory never blocks one below it.
        dir_modes.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        for (at, mode) in dir_modes {
            beneath::chmod_dir(base, &at, mode).map_err(io_at("Setting a mode"))?;
        }
        beneath::chmod_dir(base, &[staged], top_mode & 0o7777).map_err(io_at("Setting the mode"))?;
    }
    Ok(counts)
}

/// Copies one entry's content, mapping an exceeded budget to the refusal.
fn write_content<R: Read>(
    entry: &mut R,
    file: &mut fs::File,
    budget: &mut ByteBudget,
    too_large: &dyn Fn() -> ExtractError,
) -> Result<u64, ExtractError> {
    match write_sparse(entry, file, budget) {
        Ok(n) => Ok(n),
        Err(CopyError::OverLimit) => Err(too_large()),
        Err(CopyError::Io(e)) => Err(ExtractError::Io("Extracting a file".into(), e)),
    }
}

/// After the end-of-archive blocks only zero padding may follow (bounded): anything else
/// means the stream is not just the archive that was asked for.
fn check_trailer<R: Read>(rest: R, plan: &ExtractPlan<'_>) -> Result<(), ExtractError> {
    let mut rest = rest.take(MAX_TRAILER + 1);
    let mut buffer = [0u8; 8192];
    let mut seen = 0u64;
    loop {
        let n = match rest.read(&mut buffer) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ExtractError::Io("Reading the archive".into(), e)),
        };
        seen += n as u64;
        if seen > MAX_TRAILER || buffer[..n].iter().any(|b| *b != 0) {
            return Err(ExtractError::Refused(DriverError::other(format!(
                "The archive of sync source \"{}\" holds data after its end.",
                plan.source_shown
            ))));
        }
    }
}

/// Whether a link at `relative` (below the tree's top) with the text `link` stays inside
/// the tree on its own: absolute texts never do; relative ones are resolved lexically
/// against the link's directory.
fn link_stays_inside(relative: &[OsString], link: &Path) -> bool {
    if link.has_root() || link.as_os_str().is_empty() {
        return false;
    }
    let mut depth = relative.len().saturating_sub(1);
    for c in link.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => {
                if depth == 0 {
                    return false;
                }
                depth -= 1;
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests;
