//! The numeric ids a container's user runs as, learnt without running anything in the
//! container: from the user spec alone when it is `UID:GID`, else from the container's
//! `/etc/passwd` (and `/etc/group` for a named group) read through the archive API, the
//! way the engine itself resolves the spec (first match wins; a numeric user missing from
//! `/etc/passwd` keeps gid 0). Whatever this cannot be sure of (a file missing, a link, a
//! line it cannot read, a name it cannot find) is left to the `id -u && id -g` exec.
//!
//! Results are cached per image id and spec: a fresh container's `/etc/passwd` is its
//! image's. Also here: handing the workspace to the configured user.

use std::collections::HashMap;
use std::io::Read;
use std::sync::Mutex;

use bollard::query_parameters::DownloadFromContainerOptionsBuilder;
use futures::StreamExt;

use envrt_driver_api::DriverError;

use crate::config::EnvConfig;
use crate::driver::DockerDriver;
use crate::engine::Engine;

/// Largest `/etc/passwd` or `/etc/group` read through the archive API.
const MAX_FILE: usize = 1 << 20;

/// Highest id the engine accepts in a user spec.
const MAX_ID: u64 = i32::MAX as u64;

/// `(image id, user spec)` → `(uid, gid)`.
#[derive(Debug, Default)]
pub(crate) struct OwnerCache(Mutex<HashMap<(String, String), (u64, u64)>>);

impl OwnerCache {
    pub(crate) fn get(&self, image_id: &str, spec: &str) -> Option<(u64, u64)> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&(image_id.to_owned(), spec.to_owned())).copied()
    }

    pub(crate) fn put(&self, image_id: &str, spec: &str, owner: (u64, u64)) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.insert((image_id.to_owned(), spec.to_owned()), owner);
    }
}

/// `spec` split into its user and group parts (the group empty when not given).
fn split(spec: &str) -> (&str, &str) {
    spec.split_once(':').unwrap_or((spec, ""))
}

/// A numeric id the engine takes, or `None`.
fn id(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u64>().ok().filter(|n| *n <= MAX_ID)
}

/// The ids of `spec` when it needs no file: `UID:GID`.
pub(crate) fn numeric(spec: &str) -> Option<(u64, u64)> {
    let (user, group) = split(spec);
    Some((id(user)?, id(group)?))
}

/// Whether resolving `spec` needs `/etc/group`: a group given by name.
pub(crate) fn needs_group_file(spec: &str) -> bool {
    let (_, group) = split(spec);
    !group.is_empty() && id(group).is_none()
}

/// The `(name, id, gid)` of each line of a passwd-like file (`name:x:id:gid:...`), or
/// the `(name, gid, gid)` of each line of a group file (`name:x:gid:members`); `None`
/// when a non-empty line does not read cleanly.
fn entries(file: &str, is_group: bool) -> Option<Vec<(&str, u64, u64)>> {
    let mut out = Vec::new();
    for line in file.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(':').collect();
        let name = fields.first()?;
        let first = id(fields.get(2)?)?;
        let second = if is_group { first } else { id(fields.get(3)?)? };
        out.push((*name, first, second));
    }
    Some(out)
}

/// Resolves `spec` against the container's `/etc/passwd` (and `/etc/group`, when the
/// spec names a group). `None` when unsure.
pub(crate) fn resolve(spec: &str, passwd: &str, group: Option<&str>) -> Option<(u64, u64)> {
    let (user, group_part) = split(spec);
    let users = entries(passwd, false)?;
    let numeric_user = id(user);
    let matched = users
        .iter()
        .find(|(name, uid, _)| match (user.is_empty(), numeric_user) {
            (true, _) => *uid == 0,
            (false, Some(n)) => *uid == n,
            (false, None) => *name == user,
        });
    let (uid, mut gid) = match (matched, numeric_user) {
        (Some((_, uid, gid)), _) => (*uid, *gid),
        (None, Some(n)) => (n, 0),
        (None, None) if user.is_empty() => (0, 0),
        (None, None) => return None,
    };
    if !group_part.is_empty() {
        gid = match id(group_part) {
            Some(n) => n,
            None => {
                let groups = entries(group?, true)?;
                groups.iter().find(|(name, _, _)| *name == group_part)?.1
            }
        };
    }
    Some((uid, gid))
}

/// The contents of the regular file `path` of `container` through the archive API;
/// `None` when it is missing, not a regular file, too big or unreadable.
pub(crate) async fn read_file(engine: &Engine, container: &str, path: &str) -> Option<String> {
    let options = DownloadFromContainerOptionsBuilder::default().path(path).build();
    let mut stream = engine.docker.download_from_container(container, Some(options));
    let mut archive = Vec::new();
    let read = async {
        while let Some(chunk) = stream.next().await {
            archive.extend_from_slice(&chunk.ok()?);
            if archive.len() > MAX_FILE + 4096 {
                return None;
            }
        }
        Some(())
    };
    tokio::time::timeout(engine.api_timeout, read).await.ok()??;
    let mut tar = tar::Archive::new(archive.as_slice());
    let mut entry = tar.entries().ok()?.next()?.ok()?;
    if entry.header().entry_type() != tar::EntryType::Regular {
        return None;
    }
    let mut text = String::new();
    entry.read_to_string(&mut text).ok()?;
    Some(text)
}

impl DockerDriver {
    /// The ids of a fresh container's user, without an exec where the user spec (the
    /// configured user, else the image's) and the container's `/etc/passwd` and
    /// `/etc/group` settle them (see [`crate::owner`]); by `id -u && id -g` otherwise.
    pub(crate) async fn container_owner(
        &self,
        container: &str,
        config: &EnvConfig,
        image: Option<&bollard::models::ImageInspect>,
    ) -> Result<(u64, u64), DriverError> {
        let image_user = image.and_then(|i| i.config.as_ref()).and_then(|c| c.user.clone());
        let image_id = image.and_then(|i| i.id.clone());
        let spec = match (&config.user, image_user) {
            (Some(user), _) => user.clone(),
            (None, Some(user)) => user,
            (None, None) if image_id.is_some() => String::new(),
            (None, None) => return self.ask_owner(container).await,
        };
        if let Some(owner) = numeric(&spec) {
            return Ok(owner);
        }
        let Some(image_id) = image_id else {
            return self.ask_owner(container).await;
        };
        if let Some(owner) = self.owners.get(&image_id, &spec) {
            return Ok(owner);
        }
        let passwd = read_file(&self.engine, container, "/etc/passwd").await;
        let group = match needs_group_file(&spec) {
            true => read_file(&self.engine, container, "/etc/group").await,
            false => None,
        };
        let resolved = passwd
            .as_deref()
            .and_then(|passwd| resolve(&spec, passwd, group.as_deref()));
        let owner = match resolved {
            Some(owner) => owner,
            None => self.ask_owner(container).await?,
        };
        self.owners.put(&image_id, &spec, owner);
        Ok(owner)
    }

    /// Makes `workspace` (an existing directory) belong to `owner` through the archive
    /// API: the engine applies a directory entry's ids over an existing directory. On a
    /// read-only root the parent cannot be written, so the archive goes into the workspace
    /// (a volume) as its `.` entry.
    pub(crate) async fn give_workspace(
        &self,
        container: &str,
        workspace: &str,
        read_only_root: bool,
        owner: (u64, u64),
    ) -> Result<(), DriverError> {
        let (into, name) = match workspace.rsplit_once('/') {
            Some((parent, name)) if !read_only_root && !name.is_empty() => {
                (if parent.is_empty() { "/" } else { parent }, name)
            }
            _ => (workspace, "."),
        };
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_uid(owner.0);
        header.set_gid(owner.1);
        header.set_size(0);
        let mut builder = tar::Builder::new(Vec::new());
        builder
            .append_data(&mut header, name, std::io::empty())
            .and_then(|()| builder.finish())
            .map_err(|e| DriverError::io("Building the workspace archive", e))?;
        let archive = builder
            .into_inner()
            .map_err(|e| DriverError::io("Building the workspace archive", e))?;
        let options = bollard::query_parameters::UploadToContainerOptionsBuilder::default()
            .path(into)
            .build();
        self.engine
            .call(
                self.engine
                    .docker
                    .upload_to_container(container, Some(options), bollard::body_full(archive.into())),
            )
            .await
            .map_err(|e| self.engine.error("preparing the workspace", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\nnobody:x:65534:65533:nobody:/:/bin/false\n\
                          app:x:1000:1001::/home/app:/bin/sh\ndup:x:7:7::/:/bin/sh\ndup:x:8:8::/:/bin/sh\n";
    const GROUP: &str = "root:x:0:\nstaff:x:50:app\nnogroup:x:65533:\n";

    #[test]
    fn numeric_specs_need_no_file() {
        assert_eq!(numeric("1000:1001"), Some((1000, 1001)));
        assert_eq!(numeric("0:0"), Some((0, 0)));
        assert_eq!(numeric("1000"), None);
        assert_eq!(numeric("app:50"), None);
        assert_eq!(numeric(""), None);
        assert_eq!(numeric("99999999999:1"), None);
        assert!(needs_group_file("app:staff"));
        assert!(!needs_group_file("app:50"));
        assert!(!needs_group_file("app"));
    }

    #[test]
    fn specs_resolve_as_the_engine_does() {
        assert_eq!(resolve("", PASSWD, None), Some((0, 0)));
        assert_eq!(resolve("root", PASSWD, None), Some((0, 0)));
        assert_eq!(resolve("nobody", PASSWD, None), Some((65534, 65533)));
        assert_eq!(resolve("1000", PASSWD, None), Some((1000, 1001)));
        assert_eq!(resolve("app", PASSWD, None), Some((1000, 1001)));
        // First match wins.
        assert_eq!(resolve("dup", PASSWD, None), Some((7, 7)));
        // A numeric user missing from passwd keeps gid 0.
        assert_eq!(resolve("4242", PASSWD, None), Some((4242, 0)));
        assert_eq!(resolve("4242:9", PASSWD, None), Some((4242, 9)));
        assert_eq!(resolve("app:staff", PASSWD, Some(GROUP)), Some((1000, 50)));
        assert_eq!(resolve("app:50", PASSWD, None), Some((1000, 50)));
        // Unsure: left to the exec.
        assert_eq!(resolve("ghost", PASSWD, None), None);
        assert_eq!(resolve("app:ghosts", PASSWD, Some(GROUP)), None);
        assert_eq!(resolve("app:staff", PASSWD, None), None);
        assert_eq!(resolve("app", "app:x:abc:1::/:/bin/sh\n", None), None);
        assert_eq!(resolve("app", "+::::::\n", None), None);
        assert_eq!(resolve("app", "app:x:1000:g::/:/bin/sh\n", None), None);
        // No root line: the engine's defaults.
        assert_eq!(resolve("", "app:x:1000:1001::/:/bin/sh\n", None), Some((0, 0)));
    }

    #[test]
    fn the_cache_keys_on_image_and_spec() {
        let cache = OwnerCache::default();
        cache.put("sha256:a", "app", (1, 2));
        assert_eq!(cache.get("sha256:a", "app"), Some((1, 2)));
        assert_eq!(cache.get("sha256:b", "app"), None);
        assert_eq!(cache.get("sha256:a", "root"), None);
    }
}
