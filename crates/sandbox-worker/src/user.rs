//! Who an execute runs as inside the sandbox (extension param `envrtUser`): `UID`,
//! `UID:GID`, `NAME` or `NAME:GROUP`, names as the sandbox's own read-only `/etc/passwd`
//! and `/etc/group` know them.

use envrt_driver_api::DriverError;

/// Refusal reason of a user the sandbox cannot take.
pub(crate) const USER_FORM: &str = "the sandbox takes UID, UID:GID, NAME or NAME:GROUP.";

/// The uid and gid inside the sandbox of `UID`, `UID:GID`, `NAME` or `NAME:GROUP`: names
/// as the sandbox's own `/etc/passwd` and `/etc/group` know them (the host's files, bound
/// read-only into every sandbox); a name's primary group when no group is given, a
/// number's own value.
pub(crate) fn parse_user(user: &str) -> Result<(u32, u32), DriverError> {
    let refused = |reason: &str| DriverError::UserRefused {
        user: user.to_owned(),
        reason: reason.to_owned(),
    };
    let number = |s: &str| s.parse::<u32>().ok().filter(|_| s.bytes().all(|b| b.is_ascii_digit()));
    let (name, group) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let well_formed = |s: &str| !s.is_empty() && !s.contains(':') && !s.contains('\n');
    if !well_formed(name) || !group.is_none_or(well_formed) {
        return Err(refused(USER_FORM));
    }
    let (uid, primary) = match number(name) {
        Some(uid) => (uid, uid),
        None => lookup("/etc/passwd", name, 3).ok_or_else(|| refused("no such user in the sandbox."))?,
    };
    let gid = match group {
        None => primary,
        Some(g) => match number(g) {
            Some(gid) => gid,
            None => lookup("/etc/group", g, 2)
                .map(|(gid, _)| gid)
                .ok_or_else(|| refused("no such group in the sandbox."))?,
        },
    };
    Ok((uid, gid))
}

/// The id (third field) and the field at `second` of `name` in a passwd-style file.
fn lookup(file: &str, name: &str, second: usize) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        if fields.first() != Some(&name) {
            return None;
        }
        let id = fields.get(2)?.parse().ok()?;
        let other = fields.get(second)?.parse().unwrap_or(id);
        Some((id, other))
    })
}
