//! Tar streams for sync: building one from a host tree on a blocking thread while it is
//! uploaded, and extracting one into a host target through a temporary sibling, refusing
//! every entry or link that would land outside the target.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use envrt_runtime_core::sync::ExcludeSet;
use envrt_runtime_core::{DriverError, SyncKind};
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

fn io_at(context: impl Into<String>) -> impl FnOnce(io::Error) -> ArchiveError {
    let context = context.into();
    move |e| ArchiveError::Io(context, e)
}

/// Counts of regular files and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) files: u64,
    pub(crate) bytes: u64,
}

/// Resolves a relative link target against the directory of `entry` (both relative to the
/// tree root); `None` when it leaves the tree.
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
    let mode = plan.mode.unwrap_or(meta.mode() & 0o7777);
    match plan.kind {
        SyncKind::File => add_file(&mut builder, plan, &plan.source, &top, &meta, mode, &mut counts)?,
        SyncKind::Directory => {
            let mut seen = BTreeSet::new();
            seen.insert((meta.dev(), meta.ino()));
            add_dir_header(&mut builder, plan, &top, &meta, mode)?;
            walk(
                &mut builder,
                plan,
                &plan.source,
                &top,
                Path::new(""),
                &mut seen,
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

#[allow(clippy::too_many_arguments)]
fn walk<W: Write>(
    builder: &mut tar::Builder<W>,
    plan: &TarPlan,
    dir: &Path,
    top: &Path,
    relative: &Path,
    seen: &mut BTreeSet<(u64, u64)>,
    counts: &mut Counts,
) -> Result<(), ArchiveError> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .map_err(io_at(format!("Reading {}", dir.display())))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .map_err(io_at(format!("Reading {}", dir.display())))?;
    names.sort();
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
        let mode = meta.mode() & 0o7777;
        if meta.is_dir() {
            if !seen.insert((meta.dev(), meta.ino())) {
                return Err(ArchiveError::Refused(DriverError::invalid(format!(
                    "Sync source \"{}\" has a symbolic-link loop.",
                    path.display()
                ))));
            }
            add_dir_header(builder, plan, &archived, &meta, mode)?;
            walk(builder, plan, &path, top, &rel, seen, counts)?;
            seen.remove(&(meta.dev(), meta.ino()));
        } else if meta.is_file() {
            add_file(builder, plan, &path, &archived, &meta, mode, counts)?;
        }
        // Sockets, fifos and devices are not copied.
    }
    Ok(())
}

/// Where an extraction puts things and which entries it skips.
pub(crate) struct Extraction<'a> {
    /// Host target.
    pub(crate) target: &'a Path,
    pub(crate) kind: SyncKind,
    pub(crate) mode: Option<u32>,
    pub(crate) exclude: &'a ExcludeSet,
    /// The target as the caller gave it (for messages).
    pub(crate) target_text: &'a str,
    /// The source as the caller gave it (for messages).
    pub(crate) source_text: &'a str,
}

/// Extracts `archive` (whose entries all start with one top name) into a temporary
/// sibling of the target, then moves it into place. Nothing is written outside the
/// target; on any failure the target is left as it was.
pub(crate) fn extract<R: Read>(archive: R, plan: &Extraction<'_>) -> Result<Counts, ArchiveError> {
    let parent = match plan.target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(io_at(format!("Creating {}", parent.display())))?;
    let staging = tempfile::Builder::new()
        .prefix(".envrt-sync-")
        .tempdir_in(&parent)
        .map_err(io_at(format!("Creating a temporary directory in {}", parent.display())))?;
    // The tree root inside the staging directory.
    let root = staging.path().join("t");
    let mut counts = Counts::default();
    let mut modes: Vec<(PathBuf, u32)> = Vec::new();
    let mut links: Vec<(PathBuf, PathBuf, bool)> = Vec::new();
    let mut skipped: Vec<PathBuf> = Vec::new();
    let mut top_mode = None;
    let mut saw_top = false;
    let escapes = |entry: &str| {
        ArchiveError::Refused(DriverError::EntryEscapesTarget {
            entry: entry.to_owned(),
            target: plan.target_text.to_owned(),
        })
    };
    let mut archive = tar::Archive::new(archive);
    for entry in archive.entries().map_err(io_at("Reading the archive"))? {
        let mut entry = entry.map_err(io_at("Reading the archive"))?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let rel = relative_name(&raw).ok_or_else(|| escapes(&raw))?;
        let kind = entry.header().entry_type();
        let mode = entry.header().mode().unwrap_or(0o644) & 0o777;
        if rel.as_os_str().is_empty() {
            saw_top = true;
            top_mode = Some(mode);
            match (plan.kind, kind) {
                (SyncKind::Directory, tar::EntryType::Directory) => {
                    fs::create_dir(&root).map_err(io_at("Extracting"))?;
                }
                (SyncKind::File, tar::EntryType::Regular | tar::EntryType::Continuous) => {
                    let n = write_file(&mut entry, &root)?;
                    counts.files += 1;
                    counts.bytes += n;
                }
                (SyncKind::Directory, _) | (SyncKind::File, _) => {
                    return Err(ArchiveError::Refused(DriverError::SourceKind {
                        path: plan.source_text.to_owned(),
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
        if plan.kind == SyncKind::File || !saw_top {
            return Err(escapes(&raw));
        }
        let rel_text = rel.to_string_lossy();
        if skipped.iter().any(|s| rel.starts_with(s)) || plan.exclude.is_excluded(&rel_text) {
            if kind == tar::EntryType::Directory {
                skipped.push(rel.clone());
            }
            continue;
        }
        let dest = root.join(&rel);
        match kind {
            tar::EntryType::Directory => {
                fs::create_dir_all(&dest).map_err(io_at(format!("Extracting {rel_text}")))?;
                modes.push((dest, mode));
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if let Some(p) = dest.parent() {
                    fs::create_dir_all(p).map_err(io_at(format!("Extracting {rel_text}")))?;
                }
                let n = write_file(&mut entry, &dest)?;
                counts.files += 1;
                counts.bytes += n;
                modes.push((dest, mode));
            }
            tar::EntryType::Symlink => {
                let link = entry
                    .link_name()
                    .map_err(io_at("Reading the archive"))?
                    .map(|l| l.into_owned())
                    .unwrap_or_default();
                if !link_stays_inside(&rel, &link) {
                    return Err(escapes(&format!("{rel_text} -> {}", link.display())));
                }
                links.push((dest, link, true));
            }
            tar::EntryType::Link => {
                let link = entry
                    .link_name_bytes()
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default();
                let inside = relative_name(&link)
                    .filter(|l| !l.as_os_str().is_empty())
                    .ok_or_else(|| escapes(&format!("{rel_text} => {link}")))?;
                links.push((dest, root.join(inside), false));
            }
            // Devices, fifos and the like are not recreated.
            _ => {}
        }
    }
    if !saw_top {
        return Err(ArchiveError::Refused(DriverError::SourceMissing {
            path: plan.source_text.to_owned(),
        }));
    }
    // Links last, so no entry was ever written through one.
    for (dest, link, symbolic) in links {
        if let Some(p) = dest.parent() {
            fs::create_dir_all(p).map_err(io_at("Extracting a link"))?;
        }
        let result = if symbolic {
            std::os::unix::fs::symlink(&link, &dest)
        } else {
            fs::hard_link(&link, &dest).map(|_| {
                counts.files += 1;
                counts.bytes += fs::metadata(&dest).map(|m| m.len()).unwrap_or(0);
            })
        };
        result.map_err(io_at(format!("Extracting a link at {}", dest.display())))?;
    }
    // Modes deepest first, the top last (from the request when given).
    modes.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
    for (path, mode) in modes {
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).map_err(io_at("Setting a mode"))?;
    }
    let final_mode = plan.mode.or(top_mode).unwrap_or(0o755) & 0o7777;
    fs::set_permissions(&root, fs::Permissions::from_mode(final_mode)).map_err(io_at("Setting the mode"))?;
    put_in_place(&root, plan.target, &parent)?;
    Ok(counts)
}

/// `raw` without its first component; `None` when it is absolute or has `..`.
fn relative_name(raw: &str) -> Option<PathBuf> {
    let path = Path::new(raw);
    let mut out = PathBuf::new();
    let mut first = true;
    for c in path.components() {
        match c {
            Component::Normal(p) => {
                if first {
                    first = false;
                } else {
                    out.push(p);
                }
            }
            Component::CurDir => {}
            _ => return None,
        }
    }
    if first { None } else { Some(out) }
}

fn write_file<R: Read>(entry: &mut R, dest: &Path) -> Result<u64, ArchiveError> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dest)
        .map_err(io_at(format!("Creating {}", dest.display())))?;
    io::copy(entry, &mut file).map_err(io_at(format!("Writing {}", dest.display())))
}

/// Replaces `target` with `staged` (same parent directory, so a rename).
fn put_in_place(staged: &Path, target: &Path, parent: &Path) -> Result<(), ArchiveError> {
    let existing = fs::symlink_metadata(target).ok();
    match existing {
        Some(meta) if meta.is_dir() => {
            let trash = parent.join(format!(".envrt-old-{}", uuid::Uuid::new_v4()));
            fs::rename(target, &trash).map_err(io_at(format!("Replacing {}", target.display())))?;
            if let Err(e) = fs::rename(staged, target) {
                let _ = fs::rename(&trash, target);
                return Err(ArchiveError::Io(format!("Replacing {}", target.display()), e));
            }
            let _ = fs::remove_dir_all(&trash);
        }
        _ => fs::rename(staged, target).map_err(io_at(format!("Replacing {}", target.display())))?,
    }
    Ok(())
}

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

    #[test]
    fn relative_names_drop_the_top_and_refuse_escapes() {
        assert_eq!(relative_name("top"), Some(PathBuf::new()));
        assert_eq!(relative_name("top/a/b"), Some(PathBuf::from("a/b")));
        assert_eq!(relative_name("./top/a"), Some(PathBuf::from("a")));
        assert_eq!(relative_name("top/../x"), None);
        assert_eq!(relative_name("/top/a"), None);
        assert_eq!(relative_name(""), None);
    }

    fn raw_tar(entries: &[(&str, tar::EntryType, &[u8], Option<&str>)]) -> Vec<u8> {
        // Headers written by hand so that hostile names survive (the builder refuses them).
        let mut out = Vec::new();
        for (name, kind, data, link) in entries {
            let mut h = tar::Header::new_old();
            h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            if let Some(link) = link {
                h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
            }
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            h.set_cksum();
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
        out.resize(out.len() + 1024, 0);
        out
    }

    fn try_extract(bytes: &[u8], target: &Path) -> Result<Counts, String> {
        let exclude = ExcludeSet::new(&[]).unwrap();
        let plan = Extraction {
            target,
            kind: SyncKind::Directory,
            mode: None,
            exclude: &exclude,
            target_text: "out",
            source_text: "/workspace/src",
        };
        extract(bytes, &plan).map_err(|e| e.into_driver().to_string())
    }

    #[test]
    fn hostile_archives_are_refused_and_leave_nothing() {
        use tar::EntryType::{Directory, Link, Regular, Symlink};
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                raw_tar(&[("top/", Directory, b"", None), ("top/../evil", Regular, b"x", None)]),
                "Entry \"top/../evil\" would be written outside the target \"out\".",
            ),
            (
                raw_tar(&[("top/", Directory, b"", None), ("/abs/evil", Regular, b"x", None)]),
                "Entry \"/abs/evil\" would be written outside the target \"out\".",
            ),
            (
                raw_tar(&[
                    ("top/", Directory, b"", None),
                    ("top/l", Symlink, b"", Some("../../etc")),
                ]),
                "Entry \"l -> ../../etc\" would be written outside the target \"out\".",
            ),
            (
                raw_tar(&[
                    ("top/", Directory, b"", None),
                    ("top/l", Symlink, b"", Some("/etc/passwd")),
                ]),
                "Entry \"l -> /etc/passwd\" would be written outside the target \"out\".",
            ),
            (
                raw_tar(&[("top/", Directory, b"", None), ("top/h", Link, b"", Some("../x"))]),
                "Entry \"h => ../x\" would be written outside the target \"out\".",
            ),
        ];
        for (bytes, expected) in cases {
            assert_eq!(try_extract(&bytes, &target).unwrap_err(), expected);
            assert!(!target.exists());
            assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0, "no staging left behind");
        }
        let ok = raw_tar(&[
            ("top/", Directory, b"", None),
            ("top/a", Regular, b"hello", None),
            ("top/l", Symlink, b"", Some("a")),
        ]);
        assert_eq!(try_extract(&ok, &target).unwrap(), Counts { files: 1, bytes: 5 });
        assert_eq!(fs::read(target.join("l")).unwrap(), b"hello");
    }
}
