//! The host's side of `environmentSyncOut`: what a worker writes on this host is checked
//! here before it reaches its target.
//!
//! A worker is a separate (possibly third-party) program, and the tree it copies out was
//! built by the sandboxed command. So each host target is rewritten to a private hold
//! directory beside it (`.envrt-hold-{pid}-{uuid}`, mode `0700`; one a killed host program
//! left is removed by the next sync out into that directory); once the worker has written
//! every entry there, the host resolves every link of each tree with the shared resolver
//! ([`envrt_driver_files::tree::check_tree_links`], the local and Docker drivers' check),
//! clears set-uid/set-gid/sticky bits the request did not keep and holds each tree to its
//! byte bound ([`settle_tree`]), and only then are the entries exchanged with their
//! targets, atomically.
//! A refusal or a failure removes every hold directory and leaves the targets as they were.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use envrt_driver_api::sync::normalize_absolute;
use envrt_driver_api::{DriverError, SyncKind, SyncOperation};
use envrt_driver_files::archive::settle_tree;
use envrt_driver_files::tree::check_tree_links;

/// The prefix of a hold directory's name (`.envrt-hold-{pid}-{uuid}`: the pid of the host
/// program, so a later one can remove what a killed one left).
const HOLD_PREFIX: &str = ".envrt-hold-";

/// One entry written into a hold directory.
struct Held {
    hold: PathBuf,
    written: PathBuf,
    target: PathBuf,
    source_shown: String,
    target_shown: String,
    kind: SyncKind,
    keep_special_bits: bool,
    max_bytes: u64,
}

/// The hold directories of one call.
pub(crate) struct Holds {
    entries: Vec<Held>,
}

impl Holds {
    /// Rewrites every absolute, normalized host target of `operations` into a fresh hold
    /// directory; other targets are left for the worker to refuse with its own text.
    pub(crate) fn prepare(operations: &[SyncOperation]) -> Result<(Vec<SyncOperation>, Holds), DriverError> {
        let mut holds = Holds { entries: Vec::new() };
        let mut rewritten = operations.to_vec();
        for operation in &mut rewritten {
            for file in &mut operation.files {
                let Some(target) = normalize_absolute(&file.target_path).filter(|t| t != "/") else {
                    continue;
                };
                let target = PathBuf::from(target);
                let parent = target.parent().unwrap_or(Path::new("/")).to_path_buf();
                // what a host program killed mid-sync left held here goes first
                envrt_driver_files::stale::remove_entries_of_dead_pids(&parent, HOLD_PREFIX);
                let made = fs::create_dir_all(&parent).and_then(|()| {
                    let hold = parent.join(format!(
                        "{HOLD_PREFIX}{}-{}",
                        std::process::id(),
                        uuid::Uuid::new_v4().simple()
                    ));
                    fs::DirBuilder::new().mode(0o700).create(&hold).map(|()| hold)
                });
                let hold = match made {
                    Ok(hold) => hold,
                    Err(e) => {
                        holds.discard();
                        return Err(DriverError::io(
                            format!("Creating a directory in {}", parent.display()),
                            e,
                        ));
                    }
                };
                let written = hold.join("t");
                holds.entries.push(Held {
                    hold,
                    written: written.clone(),
                    target,
                    source_shown: file.source_path.clone(),
                    target_shown: file.target_path.clone(),
                    kind: file.kind,
                    keep_special_bits: file.keep_special_bits.unwrap_or(false),
                    max_bytes: file.byte_limit(),
                });
                file.target_path = written.to_string_lossy().into_owned();
            }
        }
        Ok((rewritten, holds))
    }

    /// An error of the worker as the caller should see it: hold paths named as the
    /// caller's targets.
    pub(crate) fn explain(&self, error: DriverError) -> DriverError {
        let shown = |text: &str| {
            self.entries.iter().fold(text.to_owned(), |t, e| {
                t.replace(&*e.written.to_string_lossy(), &e.target_shown)
            })
        };
        match error {
            DriverError::EntryEscapesTarget { entry, target } => DriverError::EntryEscapesTarget {
                entry,
                target: shown(&target),
            },
            DriverError::Other { message, source } => DriverError::Other {
                message: shown(&message),
                source,
            },
            // the worker names the hold directory it wrote into: the caller's targets
            // instead, joined as the facade joins them for local and Docker
            DriverError::HostFileSystem { why, .. } => DriverError::HostFileSystem {
                target: self
                    .entries
                    .iter()
                    .map(|e| e.target_shown.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                why,
            },
            other => other,
        }
    }

    /// Checks every written tree's links, then renames each entry onto its target; on a
    /// refusal or failure nothing is placed (entries already placed stay: a rename that
    /// fails midway is reported). Hold directories are removed either way.
    pub(crate) fn commit(mut self) -> Result<(), DriverError> {
        let checked = self.entries.iter().try_for_each(|e| {
            if fs::symlink_metadata(&e.written).is_err() {
                return Ok(());
            }
            if e.kind == SyncKind::Directory {
                check_tree_links(&e.written, &e.target, &e.source_shown, &e.target_shown)?;
            }
            // The worker is no more trusted than the command: special bits and the byte
            // bound are enforced here again, on what it wrote.
            settle_tree(&e.written, e.keep_special_bits, e.max_bytes, &e.source_shown)
        });
        let placed = checked.and_then(|()| self.entries.iter().try_for_each(place));
        self.discard();
        placed
    }

    /// Removes every hold directory with what it holds.
    pub(crate) fn discard(&mut self) {
        for entry in self.entries.drain(..) {
            let _ = fs::remove_dir_all(&entry.hold);
        }
    }
}

impl Drop for Holds {
    fn drop(&mut self) {
        self.discard();
    }
}

/// Puts a written entry at its target in one atomic step: the two are exchanged
/// (`renameat2` `RENAME_EXCHANGE`; the previous target, now in the hold directory, goes
/// with it), so a host program killed at any moment leaves the target as it was or
/// complete. A missing target takes a plain rename; where the file system cannot
/// exchange, an existing directory target is moved aside first (not atomic against a
/// kill) and put back on failure.
fn place(entry: &Held) -> Result<(), DriverError> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    let io = |e| DriverError::io(format!("Replacing {}", entry.target.display()), e);
    match renameat_with(CWD, &entry.written, CWD, &entry.target, RenameFlags::EXCHANGE) {
        Ok(()) => {
            envrt_driver_api::fault::point("sync_place");
            return Ok(());
        }
        Err(rustix::io::Errno::NOENT) if fs::symlink_metadata(&entry.target).is_err() => {
            return fs::rename(&entry.written, &entry.target).map_err(io);
        }
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS | rustix::io::Errno::OPNOTSUPP) => {}
        Err(e) => return Err(io(e.into())),
    }
    match fs::symlink_metadata(&entry.target) {
        Ok(meta) if meta.is_dir() => {
            let aside = entry.hold.join("old");
            fs::rename(&entry.target, &aside).map_err(io)?;
            if let Err(e) = fs::rename(&entry.written, &entry.target) {
                let _ = fs::rename(&aside, &entry.target);
                return Err(io(e));
            }
            Ok(())
        }
        _ => fs::rename(&entry.written, &entry.target).map_err(io),
    }
}
