//! Running a command as another user of the host (`ExecuteRequest::user`): refused unless
//! envrt itself runs as root AND the environment's config lists the user in
//! `allowedUsers`, since a local lease shares the host with everything else on it.
//!
//! When allowed, privileges are dropped by the standard library's own
//! `CommandExt::uid`/`gid` (safe APIs): in the child, before `exec`, it clears the
//! supplementary groups, then sets the gid and the uid, so the command keeps nothing of
//! root's. The working directory is entered after the drop, so the user must be able to
//! enter it (a lease workspace is `0700` and the driver's: open it up first, as root).
//! Such a command is not put in the lease's cgroup (joining one needs root's rights over
//! the cgroup tree, which the command no longer has): it is contained by its process
//! group, and on release by the `/proc` scan, as on a host without cgroups.

use envrt_driver_api::{DriverError, LeaseContext};
use nix::unistd::{Group, Uid, User};

/// The environment config key listing who commands may run as.
pub(crate) const ALLOWED_USERS_KEY: &str = "allowedUsers";

/// Reason: envrt is not root.
pub(crate) const NOT_ROOT: &str = "the local driver runs commands as another user only when envrt runs as root.";
/// Reason: the environment does not allow it.
pub(crate) const NOT_ALLOWED: &str = "the environment config \"allowedUsers\" does not list it.";
/// Reason: no such user.
pub(crate) const NO_USER: &str = "no such user on this host.";
/// Reason: no such group.
pub(crate) const NO_GROUP: &str = "no such group on this host.";
/// Reason: the user could not even enter the working directory.
pub(crate) const UNREACHABLE: &str =
    "it cannot reach the working directory (a directory on the way denies it search permission).";

/// Refuses with [`UNREACHABLE`] unless `uid`/`gid` (no supplementary groups) may search
/// every directory from `/` down to `cwd`: the command would otherwise fail to start with
/// a bare "permission denied".
pub(crate) fn check_reachable(user: &str, cwd: &std::path::Path, (uid, gid): (u32, u32)) -> Result<(), DriverError> {
    use std::os::unix::fs::MetadataExt;
    if uid == 0 {
        return Ok(());
    }
    for dir in cwd.ancestors() {
        let Ok(meta) = std::fs::metadata(dir) else { continue };
        let bit = if meta.uid() == uid {
            0o100
        } else if meta.gid() == gid {
            0o010
        } else {
            0o001
        };
        if meta.mode() & bit == 0 {
            return Err(DriverError::UserRefused {
                user: user.to_owned(),
                reason: UNREACHABLE.to_owned(),
            });
        }
    }
    Ok(())
}

/// Every key a local environment's config may hold.
pub(crate) const KNOWN_CONFIG_KEYS: [&str; 1] = [ALLOWED_USERS_KEY];

/// Refuses a local environment config key the driver does not know.
pub(crate) fn check_config(config: &envrt_driver_api::JsonMap) -> Result<(), DriverError> {
    envrt_driver_api::config_keys::check_known_keys("local environment config", config, &KNOWN_CONFIG_KEYS)
}

/// The host uid and gid to run `user` as, or the exact refusal.
pub(crate) fn resolve(context: &LeaseContext, user: &str) -> Result<(u32, u32), DriverError> {
    let refuse = |reason: &str| DriverError::UserRefused {
        user: user.to_owned(),
        reason: reason.to_owned(),
    };
    if !nix::unistd::geteuid().is_root() {
        return Err(refuse(NOT_ROOT));
    }
    let allowed = context
        .environment
        .as_ref()
        .and_then(|e| e.config.get(ALLOWED_USERS_KEY))
        .and_then(|v| v.as_array())
        .is_some_and(|list| list.iter().any(|v| v.as_str() == Some(user)));
    if !allowed {
        return Err(refuse(NOT_ALLOWED));
    }
    let (name, group) = match user.split_once(':') {
        Some((name, group)) => (name, Some(group)),
        None => (user, None),
    };
    let found = match name.parse::<u32>() {
        Ok(uid) => User::from_uid(Uid::from_raw(uid)),
        Err(_) => User::from_name(name),
    };
    let (uid, primary) = match found {
        Ok(Some(u)) => (u.uid.as_raw(), u.gid.as_raw()),
        // A bare uid without a passwd entry is still a uid: its group is its own number.
        Ok(None) => match name.parse::<u32>() {
            Ok(uid) if !name.is_empty() => (uid, uid),
            _ => return Err(refuse(NO_USER)),
        },
        Err(_) => return Err(refuse(NO_USER)),
    };
    let gid = match group {
        None => primary,
        Some(group) => match group.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => match Group::from_name(group) {
                Ok(Some(g)) => g.gid.as_raw(),
                _ => return Err(refuse(NO_GROUP)),
            },
        },
    };
    Ok((uid, gid))
}

/// Lets other users pass through (not list) the driver's root, so that a workspace opened
/// up for a user is reachable by it; every workspace stays `0700` until then.
pub(crate) fn open_root(root: &std::path::Path) -> Result<(), DriverError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(root)
        .map_err(|e| DriverError::io(format!("Reading {}", root.display()), e))?
        .permissions()
        .mode();
    if mode & 0o111 == 0o111 {
        return Ok(());
    }
    std::fs::set_permissions(root, std::fs::Permissions::from_mode((mode & 0o7777) | 0o111))
        .map_err(|e| DriverError::io(format!("Opening {} to other users", root.display()), e))
}
