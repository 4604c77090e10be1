//! Where things are (`--config`, `--state-dir` and their variables) and the `envrt.toml`
//! format.
//!
//! ```toml
//! company = "acme"          # tenant id written on every lease; default "local"
//! default = "dev"           # environment used without --env-id/--driver; default "local"
//!
//! [local]
//! root = "/var/tmp/envrt"   # local lease workspaces; default <state dir>/workspaces
//! paths = "workspace"       # or "host": absolute cwd and file paths anywhere on the host
//!                           # (widens the boundary to the whole host; docs/security.md)
//!
//! [docker]
//! host = "unix:///var/run/docker.sock"   # default: DOCKER_HOST, else the local socket
//! workspace_mount = "container"  # or "bind": each lease's workspace is a host directory
//!                                # bind-mounted at the workspace path (docs/security.md)
//! bind_root = "/var/tmp/envrt-binds"     # base of those directories (made 0700); default
//!                                        # envrt-docker-workspaces in the temp directory
//!
//! [sandbox]
//! worker = "/opt/envrt/bin/envrt-sandbox-worker"  # the reference worker for driver
//!                           # "sandbox" without [[plugin]]; relative to this file; default:
//!                           # found next to the program, in the Python package, on PATH
//!
//! [[plugin]]                # a sandbox driver run by a plugin worker
//! manifest = "plugin.json"  # relative to this file; or a package directory whose
//!                           # package.json has a paperclipPlugin entry
//! driver_key = "sandbox"    # which environmentDrivers entry; default "sandbox" or the first
//! secrets = ["env:TOKEN"]   # what the worker's secrets.resolve may resolve (env:NAME,
//!                           # file:/absolute/path); default none
//! http_allow = ["api.example.com"]  # hosts its http.fetch may reach (host, host:port)
//! [plugin.config]           # plugin configuration sent in `initialize`
//!
//! [[environment]]
//! id = "dev"
//! name = "Dev container"    # default: the id
//! driver = "docker"
//! status = "active"         # or "archived"
//! ttl = "30m"               # default lease expiry (`lease acquire`, `exec`, `shell`); none by default
//! max_ttl = "8h"            # the longest a lease may live (`lease extend` stays within it)
//! ready_command = ["sh", "-c", "test -e /ready"]  # must exit 0 on every new lease first
//! ready_timeout = "30s"     # its bound (default 60s, at most 600s)
//! idle_timeout = "10m"      # default idle timeout (`lease acquire`, `exec`); none by default
//! on_idle = "release"       # what an idle timeout does: "release" (default) or "pause"
//! [environment.config]      # driver-specific, passed as JSON
//! image = "debian:12"
//! [environment.processes]   # spawned processes (docs/contract.md section 9)
//! keep = "1M"               # replay bytes per stream of a spawn that names none; default 8M
//! replay_bound = "64M"      # all of a lease's replay buffers; default 1G
//! [environment.network]     # or `network = "host"` (local, ssh); docs/contract.md section 10
//! egress = "none"           # the default; "allow" / "open" are refused until a driver enforces them
//! grantable = ["pypi.org:443"]   # what a lease may ask for on top
//!
//! [[environment]]
//! id = "warm"
//! driver = "docker"
//! [environment.pool]        # keep leases ready (a long-lived host: `Assembly::start_pools`)
//! size = 4                  # 1 to 64; not together with `ttl`
//! ```
//!
//! An environment `local` with driver `local` exists even with no file, unless the file
//! defines an environment with that id. When an environment uses driver `sandbox` and no
//! plugin provides that key, the reference worker `envrt-sandbox-worker` (`[sandbox] worker`,
//! else next to the program, in the Python package, on `PATH`) runs over `<state dir>/sandbox`.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use envrt_runtime_core::descriptor::{DriverConfig, SettingsContext};
use envrt_runtime_core::{Environment, EnvironmentStatus, JsonMap};
use serde::Deserialize;

use super::ConfigError;

/// The id and driver of the environment that exists without any configuration.
pub const IMPLICIT_LOCAL: &str = "local";

/// Resolved locations.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The configuration file, when there is one.
    pub config: Option<PathBuf>,
    /// The state directory (created on first use).
    pub state_dir: PathBuf,
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

impl Paths {
    /// `--config` > `$ENVRT_CONFIG` > `./envrt.toml` when it exists; `--state-dir` >
    /// `$ENVRT_STATE_DIR` > `$XDG_STATE_HOME/envrt` > `$HOME/.local/state/envrt`.
    pub fn resolve(config: Option<&Path>, state_dir: Option<&Path>) -> Result<Paths, ConfigError> {
        let config = match config.map(Path::to_path_buf).or_else(|| env_path("ENVRT_CONFIG")) {
            Some(explicit) => Some(explicit),
            None => {
                let default = PathBuf::from("envrt.toml");
                default.is_file().then_some(default)
            }
        };
        let state_dir = match state_dir.map(Path::to_path_buf).or_else(|| env_path("ENVRT_STATE_DIR")) {
            Some(dir) => dir,
            None => match env_path("XDG_STATE_HOME") {
                Some(xdg) => xdg.join("envrt"),
                None => match env_path("HOME") {
                    Some(home) => home.join(".local/state/envrt"),
                    None => {
                        return Err(ConfigError::Invalid(
                            "envrt: no state directory: pass --state-dir or set ENVRT_STATE_DIR (HOME is not set)"
                                .into(),
                        ));
                    }
                },
            },
        };
        let state_dir = std::path::absolute(&state_dir).unwrap_or(state_dir);
        Ok(Paths { config, state_dir })
    }

    /// The lease database.
    pub fn database(&self) -> PathBuf {
        self.state_dir.join("leases.db")
    }
}

/// The keys of `envrt.toml` that are not a driver's section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    company: Option<String>,
    default: Option<String>,
    #[serde(default, rename = "environment")]
    environments: Vec<EnvironmentEntry>,
    /// The driver sections, by section name, as the file gave them (not read by serde).
    #[serde(skip)]
    sections: BTreeMap<String, serde_json::Value>,
}

/// The top-level keys in the order the format lists them: `company`, `default`, every
/// section of every driver this build knows, `environment`.
fn top_level_keys() -> Vec<&'static str> {
    let mut keys = vec!["company", "default"];
    keys.extend(
        crate::registry::descriptors()
            .iter()
            .flat_map(|d| d.sections().iter().copied()),
    );
    keys.push("environment");
    keys
}

/// serde's refusal of an unknown field, word for word.
fn unknown_field(name: &str, expected: &[&str]) -> String {
    let quoted: Vec<String> = expected.iter().map(|k| format!("`{k}`")).collect();
    match quoted.as_slice() {
        [] => format!("unknown field `{name}`, there are no fields"),
        [one] => format!("unknown field `{name}`, expected {one}"),
        [a, b] => format!("unknown field `{name}`, expected {a} or {b}"),
        more => format!("unknown field `{name}`, expected one of {}", more.join(", ")),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvironmentEntry {
    id: String,
    name: Option<String>,
    driver: String,
    #[serde(default)]
    status: Option<EnvironmentStatus>,
    #[serde(default)]
    config: toml::Table,
    #[serde(default)]
    metadata: Option<toml::Table>,
    ttl: Option<String>,
    /// The longest a lease may live from its acquire (`extend` stays within it).
    max_ttl: Option<String>,
    pool: Option<super::pool::PoolEntry>,
    /// `ready_command = [...]`, `ready_timeout = "30s"` (see `super::ready`).
    ready_command: Option<toml::Value>,
    ready_timeout: Option<String>,
    idle_timeout: Option<String>,
    on_idle: Option<String>,
    /// `"host"` or `[environment.network]` (see `super::network`).
    network: Option<toml::Value>,
    /// `[environment.processes]` (see `super::processes`).
    processes: Option<super::processes::ProcessesEntry>,
}

/// The configuration file's name as error messages show it.
fn config_name(paths: &Paths) -> String {
    paths.config.as_deref().unwrap_or(Path::new("")).display().to_string()
}

/// A TOML value as an error message shows it.
pub(super) fn shown(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => format!("\"{s}\""),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Array(_) => "an array".into(),
        toml::Value::Table(_) => "a table".into(),
    }
}

/// The settings of one driver, as its descriptor read them from its sections.
pub type Settings = Arc<dyn Any + Send + Sync>;

/// The loaded configuration.
#[derive(Clone)]
pub struct Config {
    /// Tenant id for new leases.
    pub company: String,
    /// The environment used when none is named.
    pub default_environment: String,
    /// Every environment, the implicit `local` included, in file order.
    pub environments: Vec<Environment>,
    /// The default lease TTL of each environment that sets `ttl`.
    pub ttls: BTreeMap<String, std::time::Duration>,
    /// The default idle timeout of each environment that sets `idle_timeout`.
    pub idle_timeouts: BTreeMap<String, std::time::Duration>,
    /// The environments whose `on_idle` is `"pause"`.
    pub idle_pauses: BTreeSet<String>,
    /// The pool size of each environment that declares `[environment.pool]`.
    pub pools: BTreeMap<String, usize>,
    /// Each known driver's settings, read by its descriptor from its own sections (the
    /// local workspace root, the Docker host, the plugins, ...), by driver key; read one
    /// back with [`driver_settings`](Self::driver_settings).
    pub drivers: BTreeMap<&'static str, Settings>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("company", &self.company)
            .field("default_environment", &self.default_environment)
            .field("environments", &self.environments)
            .field("ttls", &self.ttls)
            .field("idle_timeouts", &self.idle_timeouts)
            .field("idle_pauses", &self.idle_pauses)
            .field("pools", &self.pools)
            .field("drivers", &self.drivers.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn to_json(table: toml::Table) -> JsonMap {
    match serde_json::to_value(table) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => JsonMap::new(),
    }
}

impl Config {
    /// Reads the configuration file (if any) and adds the implicit `local` environment.
    pub fn load(paths: &Paths) -> Result<Config, ConfigError> {
        let file = match &paths.config {
            None => File::default(),
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ConfigError::Invalid(format!("envrt: cannot read config \"{}\": {e}", path.display()))
                })?;
                Self::parse(&text)
                    .map_err(|m| ConfigError::Invalid(format!("envrt: config \"{}\": {m}", path.display())))?
            }
        };
        Self::from_file(file, paths)
            .map_err(|m| ConfigError::Invalid(format!("envrt: config \"{}\": {m}", config_name(paths))))
    }

    /// The settings of the driver `C` belongs to, when this build knows it.
    pub fn driver_settings<C: DriverConfig>(&self) -> Option<&C> {
        self.drivers.get(C::KEY)?.downcast_ref::<C>()
    }

    /// The entry point of the `config_toml` fuzz target in the repository's `fuzz/`
    /// directory (and of the stable test that replays its corpus): the bytes as an
    /// `envrt.toml`. A refusal has a text, the same one each time; an accepted file has
    /// the implicit `local` environment and every environment it names. Not API.
    #[doc(hidden)]
    pub fn fuzz_config_toml(data: &[u8]) {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let paths = Paths {
            config: Some(PathBuf::from("/nonexistent/envrt-fuzz/envrt.toml")),
            state_dir: PathBuf::from("/nonexistent/envrt-fuzz/state"),
        };
        let read = |text: &str| {
            Self::parse(text).and_then(|file| {
                let ids: Vec<String> = file.environments.iter().map(|e| e.id.clone()).collect();
                Self::from_file(file, &paths).map(|config| (config, ids))
            })
        };
        match (read(text), read(text)) {
            (Err(first), Err(again)) => {
                assert!(!first.is_empty());
                assert_eq!(first, again);
            }
            (Ok((config, ids)), Ok(_)) => {
                assert!(config.environment(IMPLICIT_LOCAL).is_some());
                for id in ids {
                    assert!(config.environment(&id).is_some(), "environment {id:?} was lost");
                }
            }
            _ => panic!("the same text parsed two ways"),
        }
    }

    /// Parses the text of an `envrt.toml`; the error is the message without the file name.
    fn parse(text: &str) -> Result<File, String> {
        let mut table: toml::Table = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        let keys = top_level_keys();
        if let Some(unknown) = table.keys().find(|k| !keys.contains(&k.as_str())) {
            if unknown == "plugin" {
                return Err("[[plugin]] needs the plugin-sandbox feature, which this build of envrt lacks".into());
            }
            return Err(unknown_field(unknown, &keys));
        }
        let mut sections = BTreeMap::new();
        for name in crate::registry::descriptors().iter().flat_map(|d| d.sections()) {
            if let Some(value) = table.remove(*name) {
                sections.insert(
                    (*name).to_owned(),
                    serde_json::to_value(value).map_err(|e| e.to_string())?,
                );
            }
        }
        let mut file: File = table.try_into().map_err(|e: toml::de::Error| e.message().to_owned())?;
        file.sections = sections;
        let mut seen = BTreeSet::new();
        for entry in &file.environments {
            if entry.id.trim().is_empty() {
                return Err("an environment has an empty id".into());
            }
            if entry.driver.trim().is_empty() {
                return Err(format!("environment \"{}\" has an empty driver", entry.id));
            }
            if !seen.insert(entry.id.as_str()) {
                return Err(format!("environment \"{}\" is defined twice", entry.id));
            }
            if let Some(network) = &entry.network {
                super::network::parse(network).map_err(|m| format!("environment \"{}\": {m}", entry.id))?;
            }
            if let Some(processes) = &entry.processes {
                super::processes::parse(processes).map_err(|m| format!("environment \"{}\": {m}", entry.id))?;
            }
            if let Some(raw) = &entry.ttl {
                super::parse_duration("ttl", raw).map_err(|e| format!("environment \"{}\": {e}", entry.id))?;
            }
            super::idle::check_max_ttl(entry.ttl.as_deref(), entry.max_ttl.as_deref(), entry.pool.is_some())
                .map_err(|m| format!("environment \"{}\": {m}", entry.id))?;
            super::ready::parse(entry.ready_command.as_ref(), entry.ready_timeout.as_deref())
                .map_err(|m| format!("environment \"{}\": {m}", entry.id))?;
            super::idle::check(entry.idle_timeout.as_deref(), entry.on_idle.as_deref())
                .map_err(|m| format!("environment \"{}\": {m}", entry.id))?;
            if let Some(pool) = &entry.pool {
                super::pool::pool_size(pool).map_err(|m| format!("environment \"{}\": {m}", entry.id))?;
                if entry.ttl.is_some() {
                    return Err(format!(
                        "environment \"{}\": a pool cannot be combined with ttl (pooled leases are acquired ahead and carry no expiry)",
                        entry.id
                    ));
                }
            }
        }
        Ok(file)
    }

    /// The configuration of a parsed file: each driver's descriptor reads its sections
    /// (the error is its message, without the file name).
    fn from_file(file: File, paths: &Paths) -> Result<Config, String> {
        let context = SettingsContext {
            state_dir: Some(&paths.state_dir),
            config_dir: paths.config.as_deref().and_then(Path::parent),
        };
        let mut drivers = BTreeMap::new();
        for descriptor in crate::registry::descriptors() {
            let settings = descriptor.settings(&file.sections, &context)?;
            drivers.insert(descriptor.key(), Settings::from(settings));
        }
        // Checked by `parse`.
        let ttls = file
            .environments
            .iter()
            .filter_map(|e| {
                let raw = e.ttl.as_deref()?;
                let ttl = super::parse_duration("ttl", raw).ok()?;
                Some((e.id.clone(), ttl))
            })
            .collect();
        let idle_timeouts = super::idle::defaults(file.environments.iter().map(|e| (&e.id, e.idle_timeout.as_deref())));
        let idle_pauses = super::idle::pausing(file.environments.iter().map(|e| (&e.id, e.on_idle.as_deref())));
        let pools = file
            .environments
            .iter()
            .filter_map(|e| Some((e.id.clone(), super::pool::pool_size(e.pool.as_ref()?).ok()?)))
            .collect();
        let mut environments: Vec<Environment> = file
            .environments
            .into_iter()
            .map(|e| Environment {
                name: e.name.unwrap_or_else(|| e.id.clone()),
                id: e.id,
                driver: e.driver,
                status: e.status.unwrap_or(EnvironmentStatus::Active),
                config: to_json(e.config),
                metadata: e.metadata.map(to_json),
                // Checked by `parse`.
                network: e.network.as_ref().and_then(|n| super::network::parse(n).ok()),
                readiness: super::ready::parse(e.ready_command.as_ref(), e.ready_timeout.as_deref()).unwrap_or(None),
                processes: e.processes.as_ref().and_then(|p| super::processes::parse(p).ok()),
                max_ttl_ms: e
                    .max_ttl
                    .as_deref()
                    .and_then(|raw| super::parse_duration("max_ttl", raw).ok())
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            })
            .collect();
        if !environments.iter().any(|e| e.id == IMPLICIT_LOCAL) {
            environments.push(Environment::new(IMPLICIT_LOCAL, IMPLICIT_LOCAL, IMPLICIT_LOCAL));
        }
        Ok(Config {
            company: file.company.unwrap_or_else(|| "local".into()),
            default_environment: file.default.unwrap_or_else(|| IMPLICIT_LOCAL.into()),
            environments,
            ttls,
            idle_timeouts,
            idle_pauses,
            pools,
            drivers,
        })
    }

    /// The environment with this id.
    pub fn environment(&self, id: &str) -> Option<&Environment> {
        self.environments.iter().find(|e| e.id == id)
    }
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
