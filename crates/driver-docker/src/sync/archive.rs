//! Tar streams for sync: building one from a host tree on a blocking thread while it is
//! uploaded (see `extract` for the other direction), and what both directions share.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use envrt_driver_api::sync::ExcludeSet;
use envrt_driver_api::{DriverError, SyncKind};
use envrt_driver_files::tree;
use tokio::sync::mpsc;

/// Bytes gathered before a chunk is handed to the upload.
const CHUNK: usize = 64 * 1024;

/// A `Write` that hands chunks to an async body through a bounded channel (so at most a
/// few chunks are in memory). Only for blocking threads.
pub(crate) struct ChannelWriter {
    tx: mpsc::Sender<Result<Bytes, io::Error>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    pub(crate) fn new(tx: mpsc::Sender<Result<Bytes, io::Error>>) -> Self {
        ChannelWriter { tx, buf: Vec::new() }
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            let chunk = Bytes::from(std::mem::take(&mut self.buf));
            self.tx
                .blocking_send(Ok(chunk))
                .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the upload ended"))?;
        }
        Ok(())
    }
}

/// A failure while building or extracting an archive: a refusal the caller reports as is,
/// or an I/O error.
#[derive(Debug)]
pub(crate) enum ArchiveError {
    Refused(DriverError),
    Io(String, io::Error),
}

impl ArchiveError {
    pub(crate) fn into_driver(self) -> DriverError {
        match self {
            ArchiveError::Refused(e) => e,
            ArchiveError::Io(context, e) => DriverError::io(context, e),
        }
    }
}

pub(crate) fn io_at(context: impl Into<String>) -> impl FnOnce(io::Error) -> ArchiveError {
    let context = context.into();
    move |e| ArchiveError::Io(context, e)
}

/// Counts of regular files and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) files: u64,
    pub(crate) bytes: u64,
}

/// Whether a link at `entry` (relative to the tree root) pointing to `link` stays inside
/// the tree: absolute links never do; relative ones are resolved lexically against the
/// link's directory.
pub(crate) fn link_stays_inside(entry: &Path, link: &Path) -> bool {
    if link.has_root() {
        return false;
    }
    let mut depth: Vec<&std::ffi::OsStr> = Vec::new();
    if let Some(parent) = entry.parent() {
        for c in parent.components() {
            match c {
                Component::Normal(p) => depth.push(p),
                Component::CurDir => {}
                _ => return false,
            }
        }
    }
    for c in link.components() {
        match c {
            Component::Normal(p) => depth.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if depth.pop().is_none() {
                    return false;
                }
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// What to put in the archive for one sync entry.
pub(crate) struct TarPlan {
    /// Host source path.
    pub(crate) source: PathBuf,
    /// Name of the top entry in the archive.
    pub(crate) top: String,
    pub(crate) kind: SyncKind,
    pub(crate) mode: Option<u32>,
    /// The mode bits kept from the host's entries (special bits only when asked for).
    pub(crate) mask: u32,
    pub(crate) follow: bool,
    pub(crate) exclude: ExcludeSet,
    /// Owner written into every header.
    pub(crate) uid: u64,
    pub(crate) gid: u64,
    /// The sync target as the caller gave it (for messages).
    pub(crate) target: String,
}

/// Writes the archive of `plan` to `out`; returns the counts.
pub(crate) fn build_tar<W: Write>(plan: &TarPlan, out: W) -> Result<Counts, ArchiveError> {
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    let mut counts = Counts::default();
    let top = PathBuf::from(&plan.top);
    let meta = stat(&plan.source, plan.follow).map_err(io_at(format!("Reading {}", plan.source.display())))?;
    let mode = plan.mode.unwrap_or(meta.mode() & plan.mask);
    match plan.kind {
        SyncKind::File => add_file(&mut builder, plan, &plan.source, &top, &meta, mode, &mut counts)?,
        SyncKind::Directory => {
            if !plan.follow {
                // Links copied as links must not lead out of the target together either
                // (`a/d0 -> ..` then `up2 -> a/d0/../..`): resolved before anything is sent.
                // Each link alone first (its refusal names the link's text), in the order
                // a depth-first walk meets them.
                let source_shown = plan.source.to_string_lossy();
                let skip = |rel: &str| plan.exclude.is_excluded(rel);
                let links =
                    tree::find_links_except(&plan.source, &source_shown, &skip).map_err(ArchiveError::Refused)?;
                for (relative, text) in &links.links {
                    let relative: PathBuf = relative.iter().collect();
                    if !link_stays_inside(&relative, text) {
                        return Err(ArchiveError::Refused(DriverError::EntryEscapesTarget {
                            entry: format!("{} -> {}", relative.display(), text.display()),
                            target: plan.target.clone(),
                        }));
                    }
                }
                tree::check_tree_links_except(
                    &plan.source,
                    Path::new(&plan.target),
                    &source_shown,
                    &plan.target,
                    &skip,
                )
                .map_err(ArchiveError::Refused)?;
            }
            add_dir_header(&mut builder, plan, &top, &meta, mode)?;
            walk(
                &mut builder,
                plan,
                &plan.source,
                &top,
                (meta.dev(), meta.ino()),
                &mut counts,
            )?;
        }
    }
    let mut out = builder.into_inner().map_err(io_at("Finishing the archive"))?;
    out.flush().map_err(io_at("Sending the archive"))?;
    Ok(counts)
}

fn stat(path: &Path, follow: bool) -> io::Result<fs::Metadata> {
    if follow {
        fs::metadata(path)
    } else {
        fs::symlink_metadata(path)
    }
}

fn header(plan: &TarPlan, meta: &fs::Metadata, mode: u32, kind: tar::EntryType) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(plan.uid);
    h.set_gid(plan.gid);
    h.set_mtime(meta.mtime().max(0) as u64);
    h.set_size(0);
    h
}

fn add_dir_header<W: Write>(
    builder: &mut tar::Builder<W>,
    plan: &TarPlan,
    name: &Path,
    meta: &fs::Metadata,
    mode: u32,
) -> Result<(), ArchiveError> {
    let mut h = header(plan, meta, mode, tar::EntryType::Directory);
    builder
        .append_data(&mut h, name, io::empty())
        .map_err(io_at("Sending the archive"))
}

fn add_file<W: Write>(
    builder: &mut tar::Builder<W>,
    plan: &TarPlan,
    path: &Path,
    name: &Path,
    meta: &fs::Metadata,
    mode: u32,
    counts: &mut Counts,
) -> Result<(), ArchiveError> {
    let mut h = header(plan, meta, mode, tar::EntryType::Regular);
    let size = meta.len();
    h.set_size(size);
    let file = fs::File::open(path).map_err(io_at(format!("Reading {}", path.display())))?;
    let mut reader = Exact {
        inner: file.take(size),
        left: size,
        path,
    };
    builder
        .append_data(&mut h, name, &mut reader)
        .map_err(io_at(format!("Sending {}", path.display())))?;
    counts.files += 1;
    counts.bytes += size;
    // A test may end the host program here (after each file sent), as in the middle of
    // a sync in.
    envrt_driver_api::fault::point("sync_in");
    Ok(())
}

/// Reads exactly `left` bytes or fails (a file that shrank while being sent).
struct Exact<'a, R> {
    inner: R,
    left: u64,
    path: &'a Path,
}

impl<R: Read> Read for Exact<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let n = self.inner.read(buf)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{} changed while it was being sent", self.path.display()),
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// One directory still to archive: where it is, its path below the top, and the
/// (device, inode) of the directories above it (against link loops when following).
struct Pending {
    dir: PathBuf,
    relative: PathBuf,
    ancestors: Vec<(u64, u64)>,
}

/// Archives everything below `source`, iteratively (an explicit stack, so a tree of any
/// depth cannot overflow the thread's stack); past [`tree::MAX_TREE_DEPTH`] levels the
/// source is refused.
fn walk<W: Write>(
    builder: &mut tar::Builder<W>,
    plan: &TarPlan,
    source: &Path,
    top: &Path,
    top_id: (u64, u64),
    counts: &mut Counts,
) -> Result<(), ArchiveError> {
    let mut pending = vec![Pending {
        dir: source.to_path_buf(),
        relative: PathBuf::new(),
        ancestors: vec![top_id],
    }];
    while let Some(Pending {
        dir,
        relative,
        ancestors,
    }) = pending.pop()
    {
        if ancestors.len() > tree::MAX_TREE_DEPTH + 1 {
            return Err(ArchiveError::Refused(tree::too_deep(&plan.source.to_string_lossy())));
        }
        let mut names: Vec<_> = fs::read_dir(&dir)
            .map_err(io_at(format!("Reading {}", dir.display())))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .map_err(io_at(format!("Reading {}", dir.display())))?;
        names.sort();
        let mut subdirs = Vec::new();
        for name in names {
            let path = dir.join(&name);
            let rel = relative.join(&name);
            if plan.exclude.is_excluded(&rel.to_string_lossy()) {
                continue;
            }
            let link_meta = fs::symlink_metadata(&path).map_err(io_at(format!("Reading {}", path.display())))?;
            let archived = top.join(&rel);
            if link_meta.file_type().is_symlink() && !plan.follow {
                let target = fs::read_link(&path).map_err(io_at(format!("Reading {}", path.display())))?;
                if !link_stays_inside(&rel, &target) {
                    return Err(ArchiveError::Refused(DriverError::EntryEscapesTarget {
                        entry: format!("{} -> {}", rel.display(), target.display()),
                        target: plan.target.clone(),
                    }));
                }
                let mut h = header(plan, &link_meta, 0o777, tar::EntryType::Symlink);
                builder
                    .append_link(&mut h, &archived, &target)
                    .map_err(io_at("Sending the archive"))?;
                continue;
            }
            let meta = if link_meta.file_type().is_symlink() {
                match fs::metadata(&path) {
                    Ok(meta) => meta,
                    // A dangling link has nothing to copy.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(ArchiveError::Io(format!("Reading {}", path.display()), e)),
                }
            } else {
                link_meta
            };
            let mode = meta.mode() & plan.mask;
            if meta.is_dir() {
                let id = (meta.dev(), meta.ino());
                if ancestors.contains(&id) {
                    return Err(ArchiveError::Refused(DriverError::invalid(format!(
                        "Sync source \"{}\" has a symbolic-link loop.",
                        path.display()
                    ))));
                }
                // The header now (before anything below it); the content later.
                add_dir_header(builder, plan, &archived, &meta, mode)?;
                let mut below = ancestors.clone();
                below.push(id);
                subdirs.push(Pending {
                    dir: path,
                    relative: rel,
                    ancestors: below,
                });
            } else if meta.is_file() {
                add_file(builder, plan, &path, &archived, &meta, mode, counts)?;
            }
            // Sockets, fifos and devices are not copied.
        }
        // Reversed, so the stack takes them in name order.
        pending.extend(subdirs.into_iter().rev());
    }
    Ok(())
}

#[cfg(test)]
mod roundtrip_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_checked_against_the_tree_root() {
        assert!(link_stays_inside(Path::new("a/l"), Path::new("../b")));
        assert!(link_stays_inside(Path::new("a/l"), Path::new("x/./y")));
        assert!(!link_stays_inside(Path::new("a/l"), Path::new("../../b")));
        assert!(!link_stays_inside(Path::new("l"), Path::new("..")));
        assert!(!link_stays_inside(Path::new("l"), Path::new("/etc/passwd")));
        assert!(link_stays_inside(Path::new("l"), Path::new(".")));
    }
}
