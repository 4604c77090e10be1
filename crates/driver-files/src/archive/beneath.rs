//! Opening and creating entries beneath a directory descriptor without ever following a
//! link: every path is resolved by the kernel with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`, so neither a link nor `..` can lead a
//! write out of the tree being built, whatever the tree already holds.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};

fn resolve() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

fn joined(parts: &[OsString]) -> PathBuf {
    parts.iter().collect()
}

/// Opens the directory `parts` below `base` (the empty list is `base` itself).
pub(super) fn open_dir(base: impl AsFd, parts: &[OsString]) -> io::Result<OwnedFd> {
    let path = if parts.is_empty() {
        PathBuf::from(".")
    } else {
        joined(parts)
    };
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat2(base, &path, flags, Mode::empty(), resolve())?)
}

/// Opens the directory `parts` below `base`, creating each missing level (mode `0700`).
pub(super) fn open_dir_creating(base: &OwnedFd, parts: &[OsString]) -> io::Result<OwnedFd> {
    match open_dir(base, parts) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        other => return other,
    }
    let mut dir = open_dir(base, &[])?;
    for part in parts {
        make_dir(&dir, part)?;
        dir = open_dir(&dir, std::slice::from_ref(part))?;
    }
    Ok(dir)
}

/// Creates the directory `name` in `dir` (mode `0700`); an existing directory is fine,
/// anything else there is an error.
pub(super) fn make_dir(dir: impl AsFd, name: &OsStr) -> io::Result<()> {
    match rustix::fs::mkdirat(&dir, name, Mode::RWXU) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::EXIST) => {
            let stat = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
            if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
                Ok(())
            } else {
                Err(io::Error::from(rustix::io::Errno::EXIST))
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Creates the new regular file `name` in `dir` (mode `0600`, never an existing entry).
pub(super) fn create_file(dir: impl AsFd, name: &OsStr) -> io::Result<std::fs::File> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat2(dir, name, flags, Mode::RUSR | Mode::WUSR, resolve())?;
    Ok(std::fs::File::from(fd))
}

/// Sets the mode of the directory `parts` below `base`.
pub(super) fn chmod_dir(base: impl AsFd, parts: &[OsString], mode: u32) -> io::Result<()> {
    let dir = open_dir(base, parts)?;
    Ok(rustix::fs::fchmod(&dir, Mode::from_raw_mode(mode))?)
}

/// Hard-links the regular file `from` (below `base`) as `to` (below `base`); neither path
/// is resolved through a link, and the link made is never one to a link.
pub(super) fn hard_link(base: &OwnedFd, from: &[OsString], to: &[OsString]) -> io::Result<u64> {
    let (from_dir, from_name) = split(base, from)?;
    let stat = rustix::fs::statat(&from_dir, &from_name, AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a hard link must name a regular file",
        ));
    }
    let (to_dir, to_name) = split(base, to)?;
    rustix::fs::linkat(&from_dir, &from_name, &to_dir, &to_name, AtFlags::empty())?;
    Ok(stat.st_size as u64)
}

/// Creates the symbolic link `at` (below `base`) with the text `text`.
pub(super) fn symlink(base: &OwnedFd, at: &[OsString], text: &OsStr) -> io::Result<()> {
    let (dir, name) = split(base, at)?;
    Ok(rustix::fs::symlinkat(text, &dir, &name)?)
}

/// The directory holding `parts` (opened beneath `base`) and the last name.
fn split(base: &OwnedFd, parts: &[OsString]) -> io::Result<(OwnedFd, OsString)> {
    let (name, parents) = parts
        .split_last()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "an empty path"))?;
    Ok((open_dir_creating(base, parents)?, name.clone()))
}
