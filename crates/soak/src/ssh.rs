//! The soak's ssh host: the test sshd of `scripts/start-sshd.sh`, on this machine, found
//! through its env file (`ENVRT_TEST_SSH_ENV`, default `/var/lib/envrt-test-ssh/env`), and
//! the remote lease directories a run must count as its own.
//!
//! The soak's own runtime keeps its leases under a root of its own on the remote side
//! (`~/.envrt/soak-{run}`), so everything there is the run's. The `envrt` CLI holders
//! cannot name a root (the ssh driver has no `envrt.toml` section), so theirs go to the
//! default `~/.envrt/leases`; what was there before the run is written down at the start
//! ([`remember`]) and left out of the count.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The env file read when `ENVRT_TEST_SSH_ENV` is unset.
const DEFAULT_ENV_FILE: &str = "/var/lib/envrt-test-ssh/env";

/// Where [`remember`] writes, under the scratch directory.
const RECORD: &str = "ssh-remote";

/// The test sshd's settings.
#[derive(Clone, Debug)]
pub struct Host {
    /// Address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// The remote user.
    pub user: String,
    /// The private key file.
    pub key: String,
    /// The known hosts file.
    pub known_hosts: String,
}

impl Host {
    /// Reads the env file's `ENVRT_TEST_SSH_{HOST,PORT,USER,KEY,KNOWN_HOSTS}`.
    pub fn from_env_file() -> Result<Host, String> {
        let path = std::env::var("ENVRT_TEST_SSH_ENV").unwrap_or_else(|_| DEFAULT_ENV_FILE.into());
        let text = std::fs::read_to_string(&path).map_err(|e| format!("no test sshd ({path}: {e})"))?;
        let get = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("ENVRT_TEST_SSH_{name}=")))
                .map(str::to_owned)
                .ok_or(format!("{path} has no ENVRT_TEST_SSH_{name}"))
        };
        let port = get("PORT")?;
        Ok(Host {
            host: get("HOST")?,
            port: port
                .parse()
                .map_err(|_| format!("{path}: port {port:?} is not a number"))?,
            user: get("USER")?,
            key: get("KEY")?,
            known_hosts: get("KNOWN_HOSTS")?,
        })
    }

    /// The remote user's home on this machine (the test host is this machine), from
    /// `/etc/passwd`.
    pub fn home(&self) -> Result<PathBuf, String> {
        let passwd = std::fs::read_to_string("/etc/passwd").map_err(|e| format!("/etc/passwd: {e}"))?;
        passwd
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f.len() >= 6 && f[0] == self.user)
            .map(|f| PathBuf::from(f[5]))
            .ok_or(format!("no user {:?} in /etc/passwd", self.user))
    }
}

/// Writes down the run's own remote root and the entries of the CLI's default root that
/// exist before the run.
pub fn remember(scratch: &Path, own_root: &Path, default_root: &Path) -> std::io::Result<()> {
    let mut text = format!("{}\n{}\n", own_root.display(), default_root.display());
    for entry in names(default_root) {
        text.push_str(&entry);
        text.push('\n');
    }
    std::fs::write(scratch.join(RECORD), text)
}

/// What a run left on the ssh host: every entry of its own root and every entry of the
/// default root that was not there before; and the roots with the entries to leave out,
/// for the process count. Empty when the run recorded nothing (not an ssh run).
pub(crate) fn leftovers(scratch: &Path) -> (Vec<PathBuf>, Vec<(PathBuf, BTreeSet<String>)>) {
    let Ok(text) = std::fs::read_to_string(scratch.join(RECORD)) else {
        return (Vec::new(), Vec::new());
    };
    let mut lines = text.lines();
    let (Some(own), Some(default)) = (lines.next(), lines.next()) else {
        return (Vec::new(), Vec::new());
    };
    let (own, default) = (PathBuf::from(own), PathBuf::from(default));
    let before: BTreeSet<String> = lines.map(str::to_owned).collect();
    let mut left: Vec<PathBuf> = names(&own).into_iter().map(|n| own.join(n)).collect();
    left.extend(
        names(&default)
            .into_iter()
            .filter(|n| !before.contains(n))
            .map(|n| default.join(n)),
    );
    (left, vec![(own, BTreeSet::new()), (default, before)])
}

/// Removes the run's own remote root once it is empty (what is left in it stays, counted).
pub fn forget(scratch: &Path) {
    if let Ok(text) = std::fs::read_to_string(scratch.join(RECORD))
        && let Some(own) = text.lines().next()
    {
        let _ = std::fs::remove_dir(own);
    }
}

fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftovers_are_the_own_roots_entries_and_the_default_roots_new_ones() {
        let scratch = tempfile::tempdir().unwrap();
        let (own, default) = (scratch.path().join("own"), scratch.path().join("default"));
        std::fs::create_dir_all(default.join("old")).unwrap();
        remember(scratch.path(), &own, &default).unwrap();
        std::fs::create_dir_all(own.join("a")).unwrap();
        std::fs::create_dir_all(default.join("new")).unwrap();
        let (mut left, roots) = leftovers(scratch.path());
        left.sort();
        assert_eq!(left, [default.join("new"), own.join("a")]);
        assert_eq!(roots[1].1, BTreeSet::from(["old".to_owned()]));
    }

    #[test]
    fn no_record_no_leftovers() {
        let scratch = tempfile::tempdir().unwrap();
        assert_eq!(leftovers(scratch.path()).0, Vec::<PathBuf>::new());
    }
}
