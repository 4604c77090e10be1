//! The host user each lease's sandboxes run as.
//!
//! A worker running as root gives every lease a host uid of its own (gid the same number)
//! from a dedicated range, `--sandbox-uids BASE:COUNT`, by default
//! [`DEFAULT_BASE`]`:`[`DEFAULT_COUNT`] (2100000000 to 2100065535): above the ranges
//! that system and regular users, `systemd`'s dynamic users and the usual `/etc/subuid`
//! allocations (from 100000 in steps of 65536) take, above `systemd-nspawn`'s container
//! range (up to 1879048191), and below 2^31, past which some tools read a uid as negative.
//! A range that holds uid 0, 65534 (`nobody`), 65535 or 4294967295, or the uid of a user
//! in `/etc/passwd` or the gid of a group in `/etc/group`, is refused at start.
//!
//! So no two leases share a host user: one lease's processes count against its own
//! `RLIMIT_NPROC` only, and no process of another lease or of another host user (such as
//! a local lease run as `nobody`) may read a sandboxed command's `/proc/<pid>/environ` or
//! `ptrace` it. Inside the sandbox the command is still uid/gid 65534 (`bwrap --uid
//! --gid`), as before.
//!
//! Records:
//! - the lease directory's owner is the lease's uid (what every operation reads, and what
//!   a worker restarted over the same root finds again at resume);
//! - `/run/envrt-sandbox-uids/<uid>` (a root-only directory shared by every worker of the
//!   host, whatever its lease root) holds the lease directory a uid is claimed for, so two
//!   workers over different roots never pick the same uid. An entry whose directory is
//!   gone or no longer owned by that uid is stale, free to be claimed again; claims run
//!   under an exclusive lock on `.lock` there.
//!
//! Release gives the uid back (the lease directory becomes root's until a resume claims
//! a uid again and hands the lease's files to it); destroy and expiry remove the
//! directory and with it the claim. With every uid of the range claimed, acquire is
//! refused with `No sandbox uid is free: all {count} uids from {base} are held by leases.`
//!
//! `--sandbox-uid N --sandbox-gid N` keeps one fixed host user for every lease (the
//! layout before per-lease uids); a worker that is not root runs sandboxes as itself.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use envrt_driver_api::DriverError;

/// First uid of the default range.
pub(crate) const DEFAULT_BASE: u32 = 2_100_000_000;
/// Size of the default range.
pub(crate) const DEFAULT_COUNT: u32 = 65_536;
/// The uid and gid a command of a per-lease uid sees itself as inside the sandbox.
pub(crate) const INSIDE_ID: u32 = 65534;
/// Where claims of per-lease uids are recorded, for every worker of the host.
pub(crate) const REGISTRY: &str = "/run/envrt-sandbox-uids";

/// Uids never handed to a lease: root, `nobody`, and the 16- and 32-bit "no uid" values.
const RESERVED: &[u32] = &[0, 65534, 65535, u32::MAX];

/// Who a worker's sandboxes run as on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ids {
    /// The worker's own user (a worker that is not root, or `--sandbox-uid 0`).
    Own,
    /// One host uid and gid for every lease (`--sandbox-uid`, `--sandbox-gid`).
    Fixed(u32, u32),
    /// Each lease its own uid (gid the same) from `base` to `base + count - 1`.
    Range {
        /// First uid.
        base: u32,
        /// How many.
        count: u32,
    },
}

impl Default for Ids {
    fn default() -> Self {
        if rustix::process::geteuid().is_root() {
            Ids::Range {
                base: DEFAULT_BASE,
                count: DEFAULT_COUNT,
            }
        } else {
            Ids::Own
        }
    }
}

/// The host uid and gid that own what one lease's sandbox may write (`None`: the worker's
/// own, nothing to change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner(pub(crate) Option<(u32, u32)>);

impl Owner {
    /// Changes the owner of `path` (not following a link) to this one.
    pub(crate) fn hand_over(&self, path: &Path) -> std::io::Result<()> {
        self.chown_at(rustix::fs::CWD, path)
    }

    /// [`Owner::hand_over`] of the entry `name` of the directory `dir`.
    pub(crate) fn chown_at<Fd: rustix::fd::AsFd, P: rustix::path::Arg>(&self, dir: Fd, name: P) -> std::io::Result<()> {
        let Some((uid, gid)) = self.0 else {
            return Ok(());
        };
        rustix::fs::chownat(
            dir,
            name,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )?;
        Ok(())
    }

    /// [`Owner::hand_over`] for a whole tree (iterative: no recursion on deep trees); the
    /// root last, so a tree whose root is handed over is handed over entirely.
    pub(crate) fn hand_over_tree(&self, root: &Path) -> std::io::Result<()> {
        if self.0.is_none() {
            return Ok(());
        }
        let mut stack = vec![root.to_path_buf()];
        while let Some(path) = stack.pop() {
            if std::fs::symlink_metadata(&path)?.is_dir() {
                for entry in std::fs::read_dir(&path)? {
                    stack.push(entry?.path());
                }
            }
            if path != root {
                self.hand_over(&path)?;
            }
        }
        self.hand_over(root)
    }
}

impl Ids {
    /// An identity sandboxes of this worker may run as, for the start-up checks (the
    /// view's reachability, the probe sandbox): the fixed one, or the range's first uid.
    pub(crate) fn representative(&self) -> Option<(u32, u32)> {
        match *self {
            Ids::Own => None,
            Ids::Fixed(uid, gid) => Some((uid, gid)),
            Ids::Range { base, .. } => Some((base, base)),
        }
    }

    /// The uid and gid inside the sandbox when the request names none (`None`: the host's
    /// own number, as `bwrap` maps it by default).
    pub(crate) fn inside(&self) -> Option<(u32, u32)> {
        matches!(self, Ids::Range { .. }).then_some((INSIDE_ID, INSIDE_ID))
    }

    fn contains(&self, uid: u32) -> bool {
        match *self {
            Ids::Range { base, count } => uid >= base && uid - base < count,
            _ => false,
        }
    }

    /// The owner of the lease directory `dir`, claiming a uid for it when it has none of
    /// the range (a lease released, or made by a worker with another layout; its files
    /// are then handed to the new uid).
    pub(crate) fn owner_of(&self, dir: &Path) -> Result<Owner, DriverError> {
        match *self {
            Ids::Own => Ok(Owner(None)),
            Ids::Fixed(uid, gid) => Ok(Owner(Some((uid, gid)))),
            Ids::Range { .. } => {
                let uid = owner_uid(dir)?;
                if self.contains(uid) {
                    Ok(Owner(Some((uid, uid))))
                } else {
                    self.claim(dir, false)
                }
            }
        }
    }

    /// Claims a uid for the lease directory `dir` and hands it over (the whole tree, its
    /// `/tmp` and `/var/tmp` included, unless `fresh`: a directory just made). A uid the
    /// directory already holds is kept (nothing to hand over) when no other lease holds it
    /// too.
    pub(crate) fn claim(&self, dir: &Path, fresh: bool) -> Result<Owner, DriverError> {
        let Ids::Range { base, count } = *self else {
            // One user for every lease (or the worker's own): a fresh directory is that
            // user's at once, as the workspace must be writable by the command.
            let owner = self.owner_of(dir)?;
            if fresh {
                owner
                    .hand_over(dir)
                    .map_err(|e| io("Handing over lease directory", dir, e))?;
            }
            return Ok(owner);
        };
        let registry = Registry::lock()?;
        let canonical = std::fs::canonicalize(dir).map_err(|e| io("Reading lease directory", dir, e))?;
        let current = owner_uid(dir)?;
        let keep = self.contains(current)
            && match registry.holder(current) {
                None => true,
                Some(holder) => holder == canonical || !holds(&holder, current),
            };
        let uid = if keep {
            current
        } else {
            (0..count)
                .map(|i| base + i)
                .find(|uid| registry.holder(*uid).is_none_or(|holder| !holds(&holder, *uid)))
                .ok_or_else(|| {
                    DriverError::other(format!(
                        "No sandbox uid is free: all {count} uids from {base} are held by leases."
                    ))
                })?
        };
        registry.record(uid, &canonical)?;
        let owner = Owner(Some((uid, uid)));
        if uid != current {
            let handed = if fresh {
                owner.hand_over(dir)
            } else {
                hand_over_lease(owner, dir)
            };
            handed.map_err(|e| io("Handing over lease directory", dir, e))?;
        }
        Ok(owner)
    }

    /// Gives the uid of a released lease back: its directory becomes root's (its files
    /// keep their owner until a resume claims a uid for it).
    pub(crate) fn give_back(&self, dir: &Path) -> Result<(), DriverError> {
        if !matches!(self, Ids::Range { .. }) {
            return Ok(());
        }
        let _registry = Registry::lock()?;
        match owner_uid(dir) {
            Ok(uid) if self.contains(uid) => Owner(Some((0, 0)))
                .hand_over(dir)
                .map_err(|e| io("Handing back lease directory", dir, e)),
            _ => Ok(()),
        }
    }

    /// Refuses a range that is empty, runs past the last uid, or holds a reserved uid or
    /// an id of `passwd` (users) or `group` (groups), in those files' format.
    pub(crate) fn check(&self, passwd: &str, group: &str) -> Result<(), String> {
        let Ids::Range { base, count } = *self else {
            return Ok(());
        };
        let range = format!("--sandbox-uids {base}:{count}");
        if count == 0 {
            return Err(format!("{range}: COUNT must be at least 1"));
        }
        if base.checked_add(count - 1).is_none_or(|last| last == u32::MAX) {
            return Err(format!("{range}: the range runs past 4294967294, the highest uid"));
        }
        if let Some(uid) = RESERVED.iter().find(|uid| self.contains(**uid)) {
            return Err(format!(
                "{range}: the range holds uid {uid} (0, 65534, 65535 and 4294967295 are never sandbox uids)"
            ));
        }
        for (text, what, file) in [(passwd, "uid", "user"), (group, "gid", "group")] {
            let taken = text.lines().find_map(|line| {
                let mut fields = line.split(':');
                let name = fields.next()?;
                let id: u32 = fields.nth(1)?.parse().ok()?;
                self.contains(id).then(|| (name.to_owned(), id))
            });
            if let Some((name, id)) = taken {
                let source = if file == "user" { "/etc/passwd" } else { "/etc/group" };
                return Err(format!(
                    "{range}: the range holds {what} {id} of {file} \"{name}\" in {source}"
                ));
            }
        }
        Ok(())
    }
}

/// Parses the value of `--sandbox-uids`.
pub(crate) fn parse_range(value: &str) -> Result<Ids, String> {
    value
        .split_once(':')
        .and_then(|(b, c)| Some((b.parse().ok()?, c.parse().ok()?)))
        .map(|(base, count)| Ids::Range { base, count })
        .ok_or_else(|| format!("--sandbox-uids: expected BASE:COUNT, got {value:?}"))
}

fn io(what: &str, path: &Path, e: std::io::Error) -> DriverError {
    DriverError::io(format!("{what} {}", path.display()), e)
}

fn owner_uid(dir: &Path) -> Result<u32, DriverError> {
    std::fs::symlink_metadata(dir)
        .map(|m| m.uid())
        .map_err(|e| io("Reading lease directory", dir, e))
}

/// Whether the directory a claim names still exists and is owned by its uid.
fn holds(dir: &Path, uid: u32) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == uid)
}

/// Hands a lease's tree, `/tmp` and `/var/tmp` to `owner`, the lease directory last.
fn hand_over_lease(owner: Owner, dir: &Path) -> std::io::Result<()> {
    for tmp in [super::lease_tmp::tmp_of(dir), super::lease_tmp::var_tmp_of(dir)] {
        match owner.hand_over_tree(&tmp) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => other?,
        }
    }
    owner.hand_over_tree(dir)
}

/// The host-wide claims of per-lease uids, locked while held.
struct Registry {
    dir: PathBuf,
    _lock: std::fs::File,
}

impl Registry {
    /// Opens (creating it `0700` when missing) and locks the registry. A registry that is
    /// not a directory of root's closed to others is refused.
    fn lock() -> Result<Registry, DriverError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let dir = PathBuf::from(REGISTRY);
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(io("Creating the sandbox uid registry", &dir, e));
            }
            _ => {}
        }
        let meta = std::fs::symlink_metadata(&dir).map_err(|e| io("Reading the sandbox uid registry", &dir, e))?;
        if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o077 != 0 {
            return Err(DriverError::other(format!(
                "The sandbox uid registry {REGISTRY} must be a directory of root's with mode 0700."
            )));
        }
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(dir.join(".lock"))
            .map_err(|e| io("Opening the sandbox uid registry", &dir, e))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| io("Locking the sandbox uid registry", &dir, e.into()))?;
        Ok(Registry { dir, _lock: lock })
    }

    /// The lease directory `uid` is claimed for, if any.
    fn holder(&self, uid: u32) -> Option<PathBuf> {
        use std::os::unix::ffi::OsStringExt;
        let bytes = std::fs::read(self.dir.join(uid.to_string())).ok()?;
        Some(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
    }

    /// Records `uid` as claimed for `dir` (written beside, then renamed into place).
    fn record(&self, uid: u32, dir: &Path) -> Result<(), DriverError> {
        use std::os::unix::ffi::OsStrExt;
        let (entry, staged) = (self.dir.join(uid.to_string()), self.dir.join(format!(".{uid}.new")));
        std::fs::write(&staged, dir.as_os_str().as_bytes())
            .and_then(|()| std::fs::rename(&staged, &entry))
            .map_err(|e| io("Recording the sandbox uid in", &entry, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_checked() {
        let passwd = "root:x:0:0::/root:/bin/sh\nsvc:x:2100000007:9::/:/bin/false\n";
        let group = "root:x:0:\nteam:x:2100000100:\n";
        let check = |v: &str| parse_range(v).and_then(|ids| ids.check(passwd, group));
        assert_eq!(check("2100000000:7"), Ok(()));
        assert_eq!(check("2100000008:92"), Ok(()));
        for (value, error) in [
            ("nope", "--sandbox-uids: expected BASE:COUNT, got \"nope\""),
            ("1:x", "--sandbox-uids: expected BASE:COUNT, got \"1:x\""),
            ("5:0", "--sandbox-uids 5:0: COUNT must be at least 1"),
            (
                "4294967000:1000",
                "--sandbox-uids 4294967000:1000: the range runs past 4294967294, the highest uid",
            ),
            (
                "4294967295:1",
                "--sandbox-uids 4294967295:1: the range runs past 4294967294, the highest uid",
            ),
            (
                "0:10",
                "--sandbox-uids 0:10: the range holds uid 0 (0, 65534, 65535 and 4294967295 are never sandbox uids)",
            ),
            (
                "65000:1000",
                "--sandbox-uids 65000:1000: the range holds uid 65534 (0, 65534, 65535 and 4294967295 are never sandbox uids)",
            ),
            (
                "2100000000:8",
                "--sandbox-uids 2100000000:8: the range holds uid 2100000007 of user \"svc\" in /etc/passwd",
            ),
            (
                "2100000050:51",
                "--sandbox-uids 2100000050:51: the range holds gid 2100000100 of group \"team\" in /etc/group",
            ),
        ] {
            assert_eq!(check(value).unwrap_err(), error, "{value}");
        }
        assert_eq!(Ids::Fixed(1, 2).check(passwd, group), Ok(()));
    }

    #[test]
    fn ranges_hold_what_they_say() {
        let ids = Ids::Range { base: 10, count: 3 };
        assert!((10..13).all(|uid| ids.contains(uid)));
        assert!(!ids.contains(9) && !ids.contains(13));
        assert_eq!(ids.representative(), Some((10, 10)));
        assert_eq!(ids.inside(), Some((INSIDE_ID, INSIDE_ID)));
        assert_eq!(Ids::Fixed(5, 6).inside(), None);
        assert_eq!(Ids::Own.representative(), None);
    }
}
