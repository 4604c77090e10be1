//! Lease directories under the worker's root, and the mapping from sandbox paths
//! (`/workspace/...`) to host paths inside a lease directory, with symlinks resolved the
//! way the sandbox sees them so that no link can lead a host-side copy out of the lease.

use std::path::{Path, PathBuf};

use rustix::fd::{AsRawFd, OwnedFd};
use rustix::fs::{Mode, OFlags};

use envrt_driver_api::DriverError;
use envrt_driver_api::sync::confine_to_workspace;

use super::policy::Policy;
use super::sandbox::WORKSPACE;
use super::uids::{Ids, Owner};

/// Prefix of every provider lease id this worker mints.
const LEASE_PREFIX: &str = "sbx-";

/// The root directory holding one directory per lease.
#[derive(Debug, Clone)]
pub(crate) struct Leases {
    pub(crate) root: PathBuf,
    /// Who owns what the sandbox must be able to write.
    pub(crate) policy: Policy,
}

impl Leases {
    /// Creates the root (mode 0700) when missing.
    pub(crate) fn open(root: PathBuf, policy: Policy) -> std::io::Result<Leases> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&root)?;
        let leases = Leases { root, policy };
        leases.sweep_tmp();
        Ok(leases)
    }

    /// Removes every lease `/tmp` and `/var/tmp` whose lease directory is gone (a worker
    /// killed between the removals), and ends the supervisor of each such lease.
    fn sweep_tmp(&self) {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_prefix(super::supervisor::RECORD_PREFIX))
            {
                // The supervisor of a lease that is gone (a worker killed before it ended
                // it) ends now, with its record.
                if let Some(dir) = self.path_of(id).filter(|dir| !dir.exists()) {
                    super::supervisor::end(&dir, false);
                }
                continue;
            }
            if let Some(id) = name.to_str().and_then(|n| n.strip_prefix(super::egress::RECORD_PREFIX)) {
                // Likewise the egress forwarder of a lease that is gone.
                if let Some(dir) = self.path_of(id).filter(|dir| !dir.exists()) {
                    super::egress::end(&dir);
                }
                continue;
            }
            let Some(id) = name.to_str().and_then(|n| {
                n.strip_prefix(super::sandbox::TMP_PREFIX)
                    .or_else(|| n.strip_prefix(super::lease_tmp::VAR_TMP_PREFIX))
            }) else {
                continue;
            };
            if self.path_of(id).is_some_and(|dir| !dir.exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }

    /// Mints a lease id and creates its directory.
    pub(crate) fn create(&self) -> Result<(String, PathBuf), DriverError> {
        use std::os::unix::fs::DirBuilderExt;
        let id = format!("{LEASE_PREFIX}{}", uuid::Uuid::new_v4());
        let dir = self.root.join(&id);
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(&dir)
            .map_err(|e| DriverError::io(format!("Creating lease directory {}", dir.display()), e))?;
        // The sandboxed command runs as the lease's user: the workspace is its own.
        if let Err(e) = self.policy.ids.claim(&dir, true) {
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        Ok((id, dir))
    }

    /// The host user of the lease directory `dir` (claiming one when it has none).
    pub(crate) fn owner(&self, dir: &Path) -> Result<Owner, DriverError> {
        self.policy.ids.owner_of(dir)
    }

    /// Hands a lease directory whose owner is not the lease's sandbox user (made by a
    /// worker that ran sandboxes as root or as another user, or released) over to that
    /// user, tree and all; with per-lease uids, the lease keeps the uid it holds (a worker
    /// restarted over the same root finds it again) or claims a free one.
    pub(crate) fn adopt(&self, dir: &Path) -> Result<(), DriverError> {
        use std::os::unix::fs::MetadataExt;
        let (uid, gid) = match self.policy.ids {
            Ids::Own => return Ok(()),
            Ids::Range { .. } => return self.policy.ids.claim(dir, false).map(|_| ()),
            Ids::Fixed(uid, gid) => (uid, gid),
        };
        let owner = std::fs::symlink_metadata(dir)
            .map_err(|e| DriverError::io(format!("Reading lease directory {}", dir.display()), e))?
            .uid();
        if owner == uid {
            return Ok(());
        }
        Owner(Some((uid, gid)))
            .hand_over_tree(dir)
            .map_err(|e| DriverError::io(format!("Handing over lease directory {}", dir.display()), e))
    }

    /// Gives back the uid of a released lease (see [`Ids::give_back`]).
    pub(crate) fn give_back(&self, dir: &Path) -> Result<(), DriverError> {
        self.policy.ids.give_back(dir)
    }

    /// The directory of a well-formed lease id, whether or not it exists.
    pub(crate) fn path_of(&self, id: &str) -> Option<PathBuf> {
        let uuid = id.strip_prefix(LEASE_PREFIX)?;
        let parsed = uuid::Uuid::parse_str(uuid).ok()?;
        (parsed.hyphenated().to_string() == uuid).then(|| self.root.join(id))
    }

    /// The directory of an existing lease, or the exact "does not exist" error.
    pub(crate) fn existing(&self, id: &str) -> Result<PathBuf, DriverError> {
        match self.path_of(id) {
            Some(dir) if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) => Ok(dir),
            _ => Err(DriverError::ResourceGone { id: id.to_owned() }),
        }
    }
}

/// A sandbox path resolved to a host path inside the lease directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// The normalized sandbox path after following links (`/workspace/...`).
    pub(crate) sandbox: String,
    /// The same place on the host.
    pub(crate) host: PathBuf,
}

/// Resolves `path` (absolute under `/workspace`, or relative to it) to a host path inside
/// `lease_dir`. Symlinks met on the way are read as the sandbox would (absolute targets
/// are sandbox paths); one that leads out of `/workspace` is refused with
/// `Path "{path}" is outside the lease workspace.` The last component is followed only
/// when `follow_last` is set.
pub(crate) fn resolve(lease_dir: &Path, path: &str, follow_last: bool) -> Result<Resolved, DriverError> {
    let outside = || DriverError::PathOutsideWorkspace { path: path.to_owned() };
    let normalized = confine_to_workspace(WORKSPACE, path)?;
    let mut pending: Vec<String> = components_below_workspace(&normalized).into_iter().rev().collect();
    let mut done: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(part) = pending.pop() {
        let host = join(lease_dir, &done).join(&part);
        let last = pending.is_empty();
        let is_link = std::fs::symlink_metadata(&host).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link || (last && !follow_last) {
            done.push(part);
            continue;
        }
        hops += 1;
        if hops > 40 {
            return Err(outside());
        }
        let target = std::fs::read_link(&host).map_err(|e| DriverError::io(format!("Reading link {path}"), e))?;
        let target = target.to_str().ok_or_else(outside)?;
        let base = if target.starts_with('/') {
            String::new()
        } else {
            sandbox_path(&done)
        };
        let resolved = lexical_resolve(&format!("{base}/{target}"));
        let below = resolved
            .strip_prefix(WORKSPACE)
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
            .ok_or_else(outside)?;
        done.clear();
        for part in below.split('/').filter(|p| !p.is_empty()).rev() {
            pending.push(part.to_owned());
        }
    }
    Ok(Resolved {
        sandbox: sandbox_path(&done),
        host: join(lease_dir, &done),
    })
}

/// A directory inside a lease, opened one component at a time from the lease directory
/// without following any link. Paths made with [`Beneath::join`] go through the open
/// descriptor, so a link the sandbox swaps in later cannot redirect them.
#[derive(Debug)]
pub(crate) struct Beneath {
    fd: OwnedFd,
}

impl Beneath {
    /// Opens `parts` below `lease_dir`, creating missing directories when `create` gives
    /// the lease's owner (which owns what is created).
    pub(crate) fn open(lease_dir: &Path, parts: &[String], create: Option<Owner>) -> std::io::Result<Beneath> {
        let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY;
        let mut fd = rustix::fs::open(lease_dir, flags, Mode::empty())?;
        for part in parts {
            if let Some(owner) = create {
                match rustix::fs::mkdirat(&fd, part.as_str(), Mode::from_raw_mode(0o755)) {
                    Ok(()) => owner.chown_at(&fd, part.as_str())?,
                    Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            fd = match rustix::fs::openat(&fd, part.as_str(), flags, Mode::empty()) {
                Ok(next) => next,
                Err(e) => {
                    // O_DIRECTORY|O_NOFOLLOW on a link fails with ENOTDIR or ELOOP: report
                    // a link as ELOOP, so it is told apart from a file in the way.
                    let is_link = rustix::fs::statat(&fd, part.as_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                        .is_ok_and(|st| {
                            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink
                        });
                    return Err(if is_link {
                        rustix::io::Errno::LOOP.into()
                    } else {
                        e.into()
                    });
                }
            };
        }
        Ok(Beneath { fd })
    }

    /// Opens a directory given by a path whose last component must not be a link.
    pub(crate) fn open_path(path: &Path) -> std::io::Result<Beneath> {
        let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY;
        Ok(Beneath {
            fd: rustix::fs::open(path, flags, Mode::empty())?,
        })
    }

    /// The directory itself, as a path through its descriptor.
    pub(crate) fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/.", self.fd.as_raw_fd()))
    }

    /// An entry of the directory, as a path through its descriptor.
    pub(crate) fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd())).join(name)
    }
}

/// Opens the parent of a resolved path beneath the lease directory; the last component
/// is returned with it (`None` for `/workspace` itself, whose "parent" is then the
/// workspace). A link that appeared since the path was resolved is refused as outside.
pub(crate) fn open_parent(
    lease_dir: &Path,
    given: &str,
    resolved: &Resolved,
    create: Option<Owner>,
) -> Result<(Beneath, Option<String>), DriverError> {
    let mut parts = components_below_workspace(&resolved.sandbox);
    let name = parts.pop();
    Beneath::open(lease_dir, &parts, create)
        .map(|dir| (dir, name))
        .map_err(|e| beneath_error(given, e))
}

/// `ELOOP`/`ENOTDIR` on a no-follow walk mean a link or a file is in the way: the path
/// does not lead where it was resolved to.
pub(crate) fn beneath_error(given: &str, e: std::io::Error) -> DriverError {
    match e.raw_os_error() {
        Some(code) if code == rustix::io::Errno::LOOP.raw_os_error() => {
            DriverError::PathOutsideWorkspace { path: given.to_owned() }
        }
        _ => DriverError::io(format!("Opening {given} in the lease workspace"), e),
    }
}

/// The components of a normalized sandbox path below `/workspace`.
pub(crate) fn components_below_workspace(normalized: &str) -> Vec<String> {
    normalized
        .strip_prefix(WORKSPACE)
        .unwrap_or("")
        .split('/')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

fn sandbox_path(parts: &[String]) -> String {
    let mut s = WORKSPACE.to_owned();
    for p in parts {
        s.push('/');
        s.push_str(p);
    }
    s
}

fn join(base: &Path, parts: &[String]) -> PathBuf {
    let mut p = base.to_path_buf();
    for part in parts {
        p.push(part);
    }
    p
}

/// Resolves `.` and `..` lexically in an absolute path (`..` at `/` stays at `/`).
pub(crate) fn lexical_resolve(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            p => out.push(p),
        }
    }
    format!("/{}", out.join("/"))
}

/// Whether a link found at `entry` (a `/`-separated path relative to a copied tree's root)
/// pointing at `target` stays inside that tree when read from its own directory.
pub(crate) fn link_stays_inside(entry: &str, target: &Path) -> bool {
    let Some(target) = target.to_str() else { return false };
    if target.starts_with('/') || target.is_empty() {
        return false;
    }
    let mut depth: Vec<&str> = entry.split('/').filter(|p| !p.is_empty()).collect();
    depth.pop();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if depth.pop().is_none() {
                    return false;
                }
            }
            p => depth.push(p),
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn links_are_read_in_sandbox_terms() {
        let dir = tempfile::tempdir().unwrap();
        let lease = dir.path();
        std::fs::create_dir_all(lease.join("a/b")).unwrap();
        symlink("/workspace/a", lease.join("abs-in")).unwrap();
        symlink("a/b", lease.join("rel-in")).unwrap();
        symlink("/etc", lease.join("abs-out")).unwrap();
        symlink("../..", lease.join("a/up-out")).unwrap();
        let r = resolve(lease, "/workspace/abs-in/b/f", false).unwrap();
        assert_eq!(r.sandbox, "/workspace/a/b/f");
        assert_eq!(r.host, lease.join("a/b/f"));
        assert_eq!(resolve(lease, "rel-in", true).unwrap().host, lease.join("a/b"));
        assert_eq!(resolve(lease, "rel-in", false).unwrap().host, lease.join("rel-in"));
        for bad in ["/workspace/abs-out/passwd", "a/up-out/x", "../x", "/etc"] {
            assert_eq!(
                resolve(lease, bad, true).unwrap_err().to_string(),
                format!("Path \"{bad}\" is outside the lease workspace.")
            );
        }
        // The link itself (not followed) is inside: it may be replaced or copied as a link.
        assert_eq!(resolve(lease, "abs-out", false).unwrap().host, lease.join("abs-out"));
    }

    #[test]
    fn a_link_swapped_in_after_resolution_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let lease = dir.path();
        std::fs::create_dir(lease.join("d")).unwrap();
        // Resolved while `d` was a directory...
        let resolved = resolve(lease, "d/sub/x", false).unwrap();
        // ...then the sandbox swaps in a link to a host directory.
        std::fs::remove_dir(lease.join("d")).unwrap();
        symlink(outside.path(), lease.join("d")).unwrap();
        let owner = Owner(Some((
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        )));
        for create in [Some(owner), None] {
            let err = open_parent(lease, "d/sub/x", &resolved, create).unwrap_err();
            assert_eq!(err.to_string(), "Path \"d/sub/x\" is outside the lease workspace.");
        }
        assert_eq!(
            std::fs::read_dir(outside.path()).unwrap().count(),
            0,
            "nothing created outside"
        );
        // Without links, missing directories are created and entries are reached through
        // the opened descriptor.
        std::fs::remove_file(lease.join("d")).unwrap();
        let (parent, last) = open_parent(lease, "d/sub/x", &resolved, Some(Owner(None))).unwrap();
        assert_eq!(last.as_deref(), Some("x"));
        std::fs::write(parent.join("x"), "in").unwrap();
        assert_eq!(std::fs::read_to_string(lease.join("d/sub/x")).unwrap(), "in");
    }

    #[test]
    fn link_escape_rule() {
        assert!(link_stays_inside("a/l", Path::new("b")));
        assert!(link_stays_inside("a/l", Path::new("../c")));
        assert!(!link_stays_inside("a/l", Path::new("../../c")));
        assert!(!link_stays_inside("l", Path::new("/etc/passwd")));
        assert!(!link_stays_inside("l", Path::new("..")));
    }
}
