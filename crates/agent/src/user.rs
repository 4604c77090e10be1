//! Who a spawned process runs as (`SpawnRequest::user`): `UID`, `UID:GID`, `NAME` or
//! `NAME:GROUP`, names as the agent's own `/etc/passwd` and `/etc/group` know them (the
//! lease's: the container's, the sandbox's, the host's), a name's primary group when no
//! group is given, a bare number's own value as its group.
//!
//! The switch itself is the standard library's `CommandExt::uid` / `gid` in the child
//! before `exec` (as root it first clears the supplementary groups, so the process keeps
//! nothing of the agent's). An agent that is not root can start processes only as its
//! own uid and gid: any other is refused before anything starts.

use crate::refuse;

/// The uid and gid to start a process as; `None` when they are the agent's own (nothing
/// to switch).
pub(crate) fn resolve(user: &str) -> Result<Option<(u32, u32)>, String> {
    resolve_in(user, "/etc/passwd", "/etc/group").and_then(|ids| switch(user, ids))
}

/// `ids`, unless they are the agent's own; refused when the agent may not switch.
fn switch(user: &str, (uid, gid): (u32, u32)) -> Result<Option<(u32, u32)>, String> {
    let own_uid = rustix::process::geteuid().as_raw();
    let own_gid = rustix::process::getegid().as_raw();
    if (uid, gid) == (own_uid, own_gid) {
        return Ok(None);
    }
    if own_uid != 0 {
        return Err(refuse::user_cannot_switch(user, own_uid));
    }
    Ok(Some((uid, gid)))
}

/// The uid and gid of `user` in these passwd and group files.
pub(crate) fn resolve_in(user: &str, passwd: &str, group_file: &str) -> Result<(u32, u32), String> {
    let number = |s: &str| s.parse::<u32>().ok().filter(|_| s.bytes().all(|b| b.is_ascii_digit()));
    let (name, group) = match user.split_once(':') {
        Some((name, group)) => (name, Some(group)),
        None => (user, None),
    };
    let well_formed = |s: &str| !s.is_empty() && !s.contains(':') && !s.chars().any(|c| c.is_control());
    if !well_formed(name) || !group.is_none_or(well_formed) {
        return Err(refuse::user_form(user));
    }
    let (uid, primary) = match number(name) {
        Some(uid) => (uid, uid),
        None => lookup(passwd, name, 3).ok_or_else(|| refuse::no_user(user))?,
    };
    let gid = match group {
        None => primary,
        Some(group) => match number(group) {
            Some(gid) => gid,
            None => lookup(group_file, group, 2)
                .map(|(gid, _)| gid)
                .ok_or_else(|| refuse::no_group(user))?,
        },
    };
    Ok((uid, gid))
}

/// The id (third field) and the field at `second` of the line for `name` in a
/// passwd-style file.
fn lookup(file: &str, name: &str, second: usize) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        if fields.first() != Some(&name) {
            return None;
        }
        let id = fields.get(2)?.parse().ok()?;
        let other = fields.get(second).and_then(|f| f.parse().ok()).unwrap_or(id);
        Some((id, other))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_groups_resolve_and_the_rest_is_refused_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let passwd = dir.path().join("passwd");
        let group = dir.path().join("group");
        std::fs::write(
            &passwd,
            "root:x:0:0::/root:/bin/sh\nalice:x:1001:1002::/home/alice:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(&group, "root:x:0:\nstaff:x:50:alice\n").unwrap();
        let (p, g) = (passwd.to_str().unwrap(), group.to_str().unwrap());
        assert_eq!(resolve_in("alice", p, g), Ok((1001, 1002)));
        assert_eq!(resolve_in("alice:staff", p, g), Ok((1001, 50)));
        assert_eq!(resolve_in("4000", p, g), Ok((4000, 4000)));
        assert_eq!(resolve_in("4000:7", p, g), Ok((4000, 7)));
        assert_eq!(resolve_in("bob", p, g).unwrap_err(), "user \"bob\": no such user");
        assert_eq!(
            resolve_in("alice:wheel", p, g).unwrap_err(),
            "user \"alice:wheel\": no such group"
        );
        for bad in ["", ":", "a:b:c", "alice:", "\n"] {
            assert_eq!(
                resolve_in(bad, p, g).unwrap_err(),
                format!("user {bad:?}: it is not UID, UID:GID, NAME or NAME:GROUP")
            );
        }
    }

    #[test]
    fn the_agents_own_ids_need_no_switch() {
        let uid = rustix::process::geteuid().as_raw();
        let gid = rustix::process::getegid().as_raw();
        assert_eq!(switch("me", (uid, gid)), Ok(None));
        if uid == 0 {
            assert_eq!(switch("x", (65534, 65534)), Ok(Some((65534, 65534))));
        } else {
            assert_eq!(
                switch("x", (uid + 1, gid)).unwrap_err(),
                format!("user \"x\": the supervisor runs as uid {uid} and cannot start a process as another user")
            );
        }
    }
}
