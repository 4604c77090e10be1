//! The SSH driver's configuration: [`SshConfig`] and its defaults.

use std::path::PathBuf;
use std::time::Duration;

#[cfg(doc)]
use envrt_driver_api::Recovery;

use crate::SshTarget;

/// Configuration of an [`SshDriver`](crate::SshDriver).
#[derive(Clone, Debug)]
pub struct SshConfig {
    /// The host of environments whose configuration names none (and the defaults of every
    /// field an environment leaves out).
    pub target: Option<SshTarget>,
    /// Where lease directories live on the remote side; relative to the remote user's
    /// home unless absolute. Default `.envrt/leases`.
    pub root: String,
    /// Most channels open at once on one connection; default 10 (`sshd`'s default
    /// `MaxSessions`).
    pub max_channels: usize,
    /// Remote login variables passed to commands when set; default `PATH`, `LANG`,
    /// `LC_ALL`, `LC_CTYPE`, `TZ`.
    pub env_allowlist: Vec<String>,
    /// Time between `SIGTERM` and `SIGKILL` when a command times out; default 2 s.
    pub kill_grace: Duration,
    /// Further hosts whose lease directories [`Recovery::inventory`] lists (besides the
    /// default target and every host this driver has connected to): the hosts of the
    /// configured environments, so `envrt gc` cleans them from a fresh process.
    pub known_targets: Vec<SshTarget>,
    /// Where the control sockets live (`0700`, this user's); `{temp dir}/envrt-ssh-{uid}`
    /// when `None`.
    pub control_dir: Option<PathBuf>,
    /// The process supervisor (`envrt-agent`) copied to remote hosts for persistent
    /// process sessions; found as every driver finds it (`ENVRT_AGENT`, next to the
    /// running executable, `PATH`) when `None`. It must be built for the remote host's
    /// architecture and run there (a static build runs on any Linux of that
    /// architecture: `crates/agent/README.md`); where it cannot, leases on that host do
    /// not get `persistentProcessSessions`.
    pub agent: Option<PathBuf>,
}

impl Default for SshConfig {
    fn default() -> Self {
        SshConfig {
            target: None,
            root: ".envrt/leases".into(),
            max_channels: 10,
            env_allowlist: ["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ"]
                .into_iter()
                .map(String::from)
                .collect(),
            kill_grace: Duration::from_secs(2),
            known_targets: Vec::new(),
            control_dir: None,
            agent: None,
        }
    }
}
