//! Driver configuration ([`DockerConfig`]) and the per-environment configuration parsed
//! from an environment's JSON `config`.

use std::collections::BTreeMap;
use std::time::Duration;

use envrt_driver_api::sync::normalize_absolute;
use envrt_driver_api::{DriverError, Environment, JsonMap, Lease};
use serde::Deserialize;

/// The engine address used when neither [`DockerConfig::host`] nor `DOCKER_HOST` is set.
pub const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";

/// The working directory of a lease when the environment does not set `workingDir`.
pub const DEFAULT_WORKING_DIR: &str = "/workspace";

/// Memory limit of a container when the environment sets none: 2 GiB (swap limited to
/// the same value, so no swap on top).
pub const DEFAULT_MEMORY_BYTES: i64 = 2 * 1024 * 1024 * 1024;

/// Process limit of a container when the environment sets none.
pub const DEFAULT_PIDS_LIMIT: i64 = 4096;

/// The capabilities a container keeps (all others are dropped): what root in common
/// images needs to manage files whatever their owner and mode (package managers, a
/// workspace holding another user's read-only files): `CHOWN`, `DAC_OVERRIDE`, `FOWNER`.
/// A command running as a non-root `user` has none of them (its effective set is empty),
/// and with `no-new-privileges` it can never gain any.
pub const KEPT_CAPABILITIES: [&str; 3] = ["CHOWN", "DAC_OVERRIDE", "FOWNER"];

/// How the driver reaches the engine and how patient it is.
#[derive(Clone, Debug)]
pub struct DockerConfig {
    /// Engine address (`unix:///path`, `tcp://host:port`, `http://host:port`); else
    /// `DOCKER_HOST`; else [`DEFAULT_DOCKER_HOST`].
    pub host: Option<String>,
    /// Bound on connecting (the first version/ping exchange). Default 5 s.
    pub connect_timeout: Duration,
    /// Bound on each control request (create, start, inspect, remove, exec set-up) before
    /// the engine is pinged (bounded by the longer of this and `connect_timeout`): while it
    /// answers, a slow request is waited for in further steps of this length, up to
    /// `transfer_timeout`. Default 30 s.
    pub api_timeout: Duration,
    /// Bound on one archive transfer (sync in or out of one entry). Default 10 min.
    pub transfer_timeout: Duration,
    /// Time a timed-out or stopped command gets between `SIGTERM` and `SIGKILL`.
    /// Default 2 s.
    pub kill_grace: Duration,
    /// Extra labels put on every container this driver creates. [`reap_orphans`] only
    /// looks at containers carrying all of them, so two drivers with different extra labels
    /// never reap each other's containers.
    ///
    /// [`reap_orphans`]: crate::DockerDriver::reap_orphans
    pub extra_labels: BTreeMap<String, String>,
    /// Where a lease's workspace lives: the container's own file system (the default) or
    /// a host directory bind-mounted at the workspace path.
    pub workspace_mount: WorkspaceMount,
    /// The base of the host directories of [`WorkspaceMount::Bind`] (made mode 0700);
    /// `envrt-docker-workspaces` in the system temp directory when absent.
    pub bind_root: Option<std::path::PathBuf>,
    /// The process supervisor (`envrt-agent`) bind-mounted read-only into every lease's
    /// container for persistent process sessions; found as the local driver finds it
    /// (`ENVRT_AGENT`, beside the running executable, `PATH`) when absent. It must be a
    /// static binary (it runs in images without a C library of its own) and the engine
    /// must be on this host (`unix://`): otherwise no lease grants
    /// `persistentProcessSessions`.
    pub agent: Option<std::path::PathBuf>,
    /// The egress proxy binary (`envrt-egress`) the driver runs on the host for each lease
    /// with a network policy; found as the supervisor is (`ENVRT_EGRESS`, beside the running
    /// executable, `PATH`) when absent. Without it (or without the supervisor) a
    /// `network = "none"` environment accepts only `egress = "none"`.
    pub egress: Option<std::path::PathBuf>,
    /// The DNS server the egress proxy resolves names through; the first `nameserver` of
    /// the host's `/etc/resolv.conf` when absent.
    pub egress_dns: Option<std::net::SocketAddr>,
    /// PEM root certificates the egress proxy trusts, besides the system's, when it
    /// re-originates TLS to a host that carries a brokered credential (a private CA, or a
    /// test host's).
    pub egress_roots: Option<std::path::PathBuf>,
}

/// Where a Docker lease's workspace lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WorkspaceMount {
    /// In the container's own (overlay) file system, removed with the container.
    #[default]
    Container,
    /// A per-lease host directory under [`DockerConfig::bind_root`], bind-mounted at the
    /// workspace path, owned by the container's command user and removed when the lease
    /// ends. Files still move through the engine's archive API.
    Bind,
}

/// The bind root used when [`DockerConfig::bind_root`] is absent.
pub const DEFAULT_BIND_DIR: &str = "envrt-docker-workspaces";

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig {
            host: None,
            connect_timeout: Duration::from_secs(5),
            api_timeout: Duration::from_secs(30),
            transfer_timeout: Duration::from_secs(600),
            kill_grace: Duration::from_secs(2),
            extra_labels: BTreeMap::new(),
            workspace_mount: WorkspaceMount::Container,
            bind_root: None,
            agent: None,
            egress: None,
            egress_dns: None,
            egress_roots: None,
        }
    }
}

impl DockerConfig {
    /// The base of bind-mounted workspaces: `bind_root`, else [`DEFAULT_BIND_DIR`] in the
    /// system temp directory.
    pub fn resolved_bind_root(&self) -> std::path::PathBuf {
        self.bind_root
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join(DEFAULT_BIND_DIR))
    }

    /// The address the driver will use: `host`, else `DOCKER_HOST`, else the local socket.
    pub fn resolved_host(&self) -> String {
        self.host
            .clone()
            .filter(|h| !h.trim().is_empty())
            .or_else(|| std::env::var("DOCKER_HOST").ok().filter(|h| !h.trim().is_empty()))
            .unwrap_or_else(|| DEFAULT_DOCKER_HOST.to_owned())
    }
}

/// An environment's Docker configuration (JSON, camelCase).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvConfig {
    /// The image (must already be on the engine; nothing is pulled).
    pub image: String,
    /// `user`, `user:group`, `uid` or `uid:gid`; the image's user when absent.
    pub user: Option<String>,
    /// The lease workspace; every environment-side path is confined to it.
    pub working_dir: String,
    /// Environment variables of the container (and so of every command).
    pub env: BTreeMap<String, String>,
    /// Docker network mode; `none` by default.
    pub network: String,
    /// Memory limit in bytes (swap is limited to the same value); default
    /// [`DEFAULT_MEMORY_BYTES`].
    pub memory_bytes: i64,
    /// CPU limit in billionths of a CPU; none by default.
    pub nano_cpus: Option<i64>,
    /// Limit on the number of processes; default [`DEFAULT_PIDS_LIMIT`].
    pub pids_limit: i64,
    /// Whether the container's root file system is read-only (the workspace and `/tmp`
    /// are then volumes of their own); false by default.
    pub read_only_root_fs: bool,
    /// Whether leases grant `duplexCommandStream`; true by default.
    pub duplex: bool,
    /// Who a request's `user` may name besides [`EnvConfig::user`] (as written); empty by
    /// default, so a request runs only as the configured user.
    pub allowed_users: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawEnvConfig {
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    working_dir: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    network: Option<String>,
    #[serde(default)]
    memory_bytes: Option<i64>,
    #[serde(default)]
    nano_cpus: Option<i64>,
    #[serde(default)]
    pids_limit: Option<i64>,
    #[serde(default)]
    read_only_root_fs: Option<bool>,
    #[serde(default)]
    duplex: Option<bool>,
    #[serde(default)]
    allowed_users: Vec<String>,
}

/// Every key a Docker environment's config may hold (JSON, camelCase).
pub(crate) const KNOWN_CONFIG_KEYS: [&str; 11] = [
    "image",
    "user",
    "workingDir",
    "env",
    "network",
    "memoryBytes",
    "nanoCpus",
    "pidsLimit",
    "readOnlyRootFs",
    "duplex",
    "allowedUsers",
];

/// Refuses a Docker environment config key the driver does not know (a misspelled
/// hardening key such as `pidLimit` would otherwise run with the default).
pub(crate) fn check_keys(config: &JsonMap) -> Result<(), DriverError> {
    envrt_driver_api::config_keys::check_known_keys("Docker environment config", config, &KNOWN_CONFIG_KEYS)
}

/// The text of the error for a missing or empty `image`.
pub(crate) const MISSING_IMAGE: &str =
    "Docker environment config needs \"image\": the name of an image present on the engine.";

impl EnvConfig {
    /// Parses and checks an environment's `config` object.
    pub fn parse(config: &JsonMap) -> Result<Self, DriverError> {
        check_keys(config)?;
        let raw: RawEnvConfig = serde_json::from_value(serde_json::Value::Object(config.clone()))
            .map_err(|e| DriverError::invalid(format!("Docker environment config is not valid: {e}.")))?;
        let image = raw
            .image
            .filter(|i| !i.trim().is_empty())
            .ok_or_else(|| DriverError::invalid(MISSING_IMAGE))?;
        let working_dir = match raw.working_dir {
            None => DEFAULT_WORKING_DIR.to_owned(),
            Some(dir) => normalize_absolute(&dir).ok_or_else(|| {
                DriverError::invalid(format!(
                    "Docker environment config \"workingDir\" must be an absolute path without \"..\", got \"{dir}\"."
                ))
            })?,
        };
        for (name, value) in &raw.env {
            if name.is_empty() || name.contains('=') || name.contains('\0') || value.contains('\0') {
                return Err(DriverError::invalid(format!(
                    "Docker environment config \"env\" has an invalid variable name or value for \"{}\".",
                    name.replace('\0', "\\0")
                )));
            }
        }
        let positive = |name: &str, value: Option<i64>| match value {
            Some(v) if v <= 0 => Err(DriverError::invalid(format!(
                "Docker environment config \"{name}\" must be a positive number, got {v}."
            ))),
            _ => Ok(value),
        };
        Ok(EnvConfig {
            image,
            user: raw.user.filter(|u| !u.trim().is_empty()),
            working_dir,
            env: raw.env,
            network: raw
                .network
                .filter(|n| !n.trim().is_empty())
                .unwrap_or_else(|| "none".to_owned()),
            memory_bytes: positive("memoryBytes", raw.memory_bytes)?.unwrap_or(DEFAULT_MEMORY_BYTES),
            nano_cpus: positive("nanoCpus", raw.nano_cpus)?,
            pids_limit: positive("pidsLimit", raw.pids_limit)?.unwrap_or(DEFAULT_PIDS_LIMIT),
            read_only_root_fs: raw.read_only_root_fs.unwrap_or(false),
            duplex: raw.duplex.unwrap_or(true),
            allowed_users: raw.allowed_users,
        })
    }

    /// What a container of this configuration enforces, as `(setting, value)` rows for
    /// `envrt caps` and `envrt doctor`.
    pub fn enforcement(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "capabilities",
                format!("all dropped but {}", KEPT_CAPABILITIES.join(", ")),
            ),
            ("noNewPrivileges", "yes".to_owned()),
            ("pidsLimit", self.pids_limit.to_string()),
            ("memoryBytes", self.memory_bytes.to_string()),
            (
                "nanoCpus",
                self.nano_cpus.map_or_else(|| "unlimited".to_owned(), |n| n.to_string()),
            ),
            (
                "readOnlyRootFs",
                if self.read_only_root_fs { "yes" } else { "no" }.to_owned(),
            ),
            (
                "user",
                self.user
                    .clone()
                    .unwrap_or_else(|| "the image's (often root)".to_owned()),
            ),
            ("network", self.network.clone()),
        ]
    }

    /// Parses the configuration of `environment`.
    pub fn of(environment: &Environment) -> Result<Self, DriverError> {
        Self::parse(&environment.config)
    }
}

/// Refusal reason of a request `user` that is not `UID`, `UID:GID`, `NAME` or `NAME:GROUP`.
pub(crate) const USER_FORM: &str = "the container takes UID, UID:GID, NAME or NAME:GROUP.";
/// Refusal reason of a request `user` the environment does not allow.
pub(crate) const USER_NOT_ALLOWED: &str = "the environment config \"allowedUsers\" does not list it.";

impl EnvConfig {
    /// Refuses a request's `user` that is malformed ([`USER_FORM`]) or neither the
    /// configured `user` nor in `allowedUsers`, both as written ([`USER_NOT_ALLOWED`]).
    pub(crate) fn check_user(&self, user: &str) -> Result<(), DriverError> {
        let refused = |reason: &str| DriverError::UserRefused {
            user: user.to_owned(),
            reason: reason.to_owned(),
        };
        let (name, group) = match user.split_once(':') {
            Some((name, group)) => (name, Some(group)),
            None => (user, None),
        };
        let well_formed =
            |s: &str| !s.is_empty() && !s.contains(':') && !s.chars().any(|c| c.is_control() || c.is_whitespace());
        if !well_formed(name) || !group.is_none_or(well_formed) {
            return Err(refused(USER_FORM));
        }
        if self.user.as_deref() == Some(user) || self.allowed_users.iter().any(|u| u == user) {
            return Ok(());
        }
        Err(refused(USER_NOT_ALLOWED))
    }
}

/// Lease-metadata key holding the container's workspace directory.
pub(crate) const META_WORKSPACE_DIR: &str = "workspaceDir";

/// The workspace directory of a lease: recorded at acquire, else the environment's.
pub(crate) fn lease_workspace(lease: &Lease, environment: Option<&Environment>) -> String {
    if let Some(dir) = lease.metadata.get(META_WORKSPACE_DIR).and_then(|v| v.as_str()) {
        if let Some(dir) = normalize_absolute(dir) {
            return dir;
        }
    }
    environment
        .and_then(|e| EnvConfig::of(e).ok())
        .map(|c| c.working_dir)
        .unwrap_or_else(|| DEFAULT_WORKING_DIR.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<EnvConfig, DriverError> {
        EnvConfig::parse(v.as_object().unwrap())
    }

    #[test]
    fn defaults_and_full_config() {
        let c = parse(json!({"image": "img"})).unwrap();
        assert_eq!(c.working_dir, "/workspace");
        assert_eq!(c.network, "none");
        assert!(c.duplex);
        assert_eq!(c.user, None);
        assert_eq!(
            (c.memory_bytes, c.pids_limit, c.nano_cpus),
            (DEFAULT_MEMORY_BYTES, DEFAULT_PIDS_LIMIT, None)
        );
        assert!(!c.read_only_root_fs);
        let c = parse(
            json!({"image": "img", "user": "65534:65534", "workingDir": "/w//x/", "env": {"A": "1"},
            "network": "host", "memoryBytes": 1024, "nanoCpus": 5, "pidsLimit": 7, "duplex": false,
            "readOnlyRootFs": true}),
        )
        .unwrap();
        assert_eq!(c.working_dir, "/w/x");
        assert_eq!(c.env.get("A").map(String::as_str), Some("1"));
        assert_eq!((c.memory_bytes, c.nano_cpus, c.pids_limit), (1024, Some(5), 7));
        assert!(c.read_only_root_fs);
        assert!(!c.duplex);
    }

    #[test]
    fn bad_configs_are_refused_with_exact_text() {
        for v in [json!({}), json!({"image": ""}), json!({"image": "  "})] {
            assert_eq!(
                parse(v).unwrap_err().to_string(),
                format!("Invalid input: {MISSING_IMAGE}")
            );
        }
        assert_eq!(
            parse(json!({"image": 3})).unwrap_err().to_string(),
            "Invalid input: Docker environment config is not valid: invalid type: integer `3`, expected a string."
        );
        assert_eq!(
            parse(json!({"image": "i", "workingDir": "rel"}))
                .unwrap_err()
                .to_string(),
            "Invalid input: Docker environment config \"workingDir\" must be an absolute path without \"..\", got \"rel\"."
        );
        assert_eq!(
            parse(json!({"image": "i", "env": {"A=B": "x"}}))
                .unwrap_err()
                .to_string(),
            "Invalid input: Docker environment config \"env\" has an invalid variable name or value for \"A=B\"."
        );
        assert_eq!(
            parse(json!({"image": "i", "pidsLimit": 0})).unwrap_err().to_string(),
            "Invalid input: Docker environment config \"pidsLimit\" must be a positive number, got 0."
        );
    }
}
