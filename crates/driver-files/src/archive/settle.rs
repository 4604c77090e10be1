//! Settling a tree another program wrote on this host (the sandbox worker's sync out):
//! walked through descriptors without following a link, its special bits are cleared
//! unless kept, and its regular files' sizes are held to the entry's bound.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::rc::Rc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};

use super::beneath;
use envrt_driver_api::error::DriverError;

/// Clears set-uid, set-gid and sticky bits below `root` (and of `root`) unless
/// `keep_special_bits`, and refuses with [`DriverError::SyncTooLarge`] a tree whose regular
/// files hold more than `max_bytes` bytes together (apparent sizes).
pub fn settle_tree(
    root: &Path,
    keep_special_bits: bool,
    max_bytes: u64,
    source_shown: &str,
) -> Result<(), DriverError> {
    let io = |e: std::io::Error| DriverError::io(format!("Checking {}", root.display()), e);
    let parent = root.parent().unwrap_or(Path::new("/"));
    let name = OsString::from(root.file_name().unwrap_or_default());
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let base = rustix::fs::open(parent, flags, Mode::empty()).map_err(|e| io(e.into()))?;
    let mut total: u64 = 0;
    // Children share their directory's descriptor: one open per directory pending.
    let mut pending: Vec<(Rc<OwnedFd>, OsString)> = vec![(Rc::new(base), name)];
    while let Some((dir, name)) = pending.pop() {
        let stat = rustix::fs::statat(&*dir, &name, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| io(e.into()))?;
        let kind = FileType::from_raw_mode(stat.st_mode);
        let mode = stat.st_mode & 0o7777;
        if kind == FileType::RegularFile {
            total = total.saturating_add(stat.st_size as u64);
            if total > max_bytes {
                return Err(DriverError::SyncTooLarge {
                    path: source_shown.to_owned(),
                    limit: max_bytes,
                });
            }
        }
        let special = !keep_special_bits && mode & 0o7000 != 0;
        match kind {
            FileType::Directory => {
                let opened = Rc::new(beneath::open_dir(&*dir, std::slice::from_ref(&name)).map_err(io)?);
                if special {
                    rustix::fs::fchmod(&*opened, Mode::from_raw_mode(mode & 0o777)).map_err(|e| io(e.into()))?;
                }
                let listed = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&*opened));
                for entry in std::fs::read_dir(listed).map_err(io)? {
                    pending.push((opened.clone(), entry.map_err(io)?.file_name()));
                }
            }
            FileType::RegularFile if special => {
                let file = rustix::fs::openat2(
                    &*dir,
                    &name,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    Mode::empty(),
                    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
                )
                .map_err(|e| io(e.into()))?;
                rustix::fs::fchmod(&file, Mode::from_raw_mode(mode & 0o777)).map_err(|e| io(e.into()))?;
            }
            _ => {}
        }
    }
    Ok(())
}
