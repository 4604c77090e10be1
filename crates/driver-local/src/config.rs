//! The local driver's configuration: [`LocalConfig`] and its defaults.

use std::path::PathBuf;
use std::time::Duration;

use envrt_driver_api::PathScope;

/// `{temp dir}/envrt-local-{effective uid}`: one root per user, so that no user can
/// prepare another's.
pub(crate) fn default_root() -> PathBuf {
    std::env::temp_dir().join(format!("envrt-local-{}", nix::unistd::geteuid().as_raw()))
}

/// Configuration of a [`LocalDriver`](crate::LocalDriver).
#[derive(Clone, Debug)]
pub struct LocalConfig {
    /// Where lease workspaces live; `{temp dir}/envrt-local-{uid}` when `None`. Created
    /// (mode `0700`) if missing; must be owned by the driver's effective user.
    pub root: Option<PathBuf>,
    /// Time between `SIGTERM` and `SIGKILL` when a command times out; default 2 s.
    pub kill_grace: Duration,
    /// Host environment variables passed through to commands when set; default `PATH`,
    /// `LANG`, `LC_ALL`, `LC_CTYPE`, `TZ`.
    pub env_allowlist: Vec<String>,
    /// Contain each lease's processes in cgroups of their own where cgroup v2 is mounted
    /// and writable; default true. When false, or unavailable, the driver falls back to
    /// process groups plus a `/proc` scan on release (see [`LocalDriver::containment`](crate::LocalDriver::containment)).
    pub cgroups: bool,
    /// Which paths a request may name: [`PathScope::Workspace`] (the default) confines
    /// `cwd` and sync paths to the lease workspace; [`PathScope::WholeEnvironment`] (the
    /// opt-in `paths = "host"` of `envrt.toml`) accepts any absolute path of the host,
    /// which widens the boundary to the whole host (see `docs/security.md`). Relative
    /// paths start at the workspace either way. [`PathScope::CwdAnywhere`] accepts any
    /// absolute `cwd` and confines sync paths.
    pub path_scope: PathScope,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            root: None,
            kill_grace: Duration::from_secs(2),
            env_allowlist: ["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ"]
                .into_iter()
                .map(String::from)
                .collect(),
            cgroups: true,
            path_scope: PathScope::Workspace,
        }
    }
}
