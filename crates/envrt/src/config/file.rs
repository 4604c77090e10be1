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
//! manifest = "plugin.json"  # relative to this file
//! driver_key = "sandbox"    # which environmentDrivers entry; default "sandbox" or the first
//! [plugin.config]           # plugin configuration sent in `initialize`
//!
//! [[environment]]
//! id = "dev"
//! name = "Dev container"    # default: the id
//! driver = "docker"
//! status = "active"         # or "archived"
//! ttl = "30m"               # default lease expiry (`lease acquire`, `exec`, `shell`); none by default
//! [environment.config]      # driver-specific, passed as JSON
//! image = "debian:12"
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

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    company: Option<String>,
    default: Option<String>,
    #[serde(default)]
    local: LocalSection,
    #[serde(default)]
    docker: DockerSection,
    #[serde(default)]
    sandbox: SandboxSection,
    #[serde(default, rename = "plugin")]
    plugins: Vec<PluginEntry>,
    #[serde(default, rename = "environment")]
    environments: Vec<EnvironmentEntry>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LocalSection {
    root: Option<PathBuf>,
    paths: Option<toml::Value>,
}

/// Where the local driver's requests may point (`[local] paths`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LocalPaths {
    /// `workspace` (the default): `cwd` and file paths stay in the lease workspace.
    #[default]
    Workspace,
    /// `host`: absolute `cwd` and file paths anywhere on the host are accepted (relative
    /// ones still start at the workspace): the boundary is the whole host.
    Host,
}

/// The checked `[local] paths`.
fn local_paths(value: Option<&toml::Value>) -> Result<LocalPaths, String> {
    match value {
        None => Ok(LocalPaths::Workspace),
        Some(toml::Value::String(s)) if s == "workspace" => Ok(LocalPaths::Workspace),
        Some(toml::Value::String(s)) if s == "host" => Ok(LocalPaths::Host),
        Some(other) => Err(format!(
            "[local] paths expects \"workspace\" or \"host\", got {}",
            shown(other)
        )),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DockerSection {
    host: Option<String>,
    workspace_mount: Option<toml::Value>,
    bind_root: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SandboxSection {
    worker: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginEntry {
    manifest: PathBuf,
    driver_key: Option<String>,
    #[serde(default)]
    config: toml::Table,
}

/// A configured plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct Plugin {
    /// The manifest file (resolved against the config file's directory).
    pub manifest: PathBuf,
    /// Which manifest entry.
    pub driver_key: Option<String>,
    /// Plugin configuration.
    pub config: JsonMap,
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
    pool: Option<PoolEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolEntry {
    size: Option<toml::Value>,
}

/// The largest pool an environment may declare: each pooled lease holds a real resource
/// (a container, a sandbox) while it waits, so a typo such as `size = 1000` is refused.
pub const MAX_POOL_SIZE: i64 = 64;

/// The checked `size` of `[environment.pool]`.
fn pool_size(pool: &PoolEntry) -> Result<usize, String> {
    let Some(size) = &pool.size else {
        return Err("[environment.pool] needs a size".into());
    };
    match size.as_integer() {
        Some(n) if (1..=MAX_POOL_SIZE).contains(&n) => Ok(n as usize),
        _ => Err(format!(
            "pool size expects a whole number from 1 to {MAX_POOL_SIZE}, got {}",
            shown(size)
        )),
    }
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

/// The loaded configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Tenant id for new leases.
    pub company: String,
    /// The environment used when none is named.
    pub default_environment: String,
    /// Root of local lease workspaces.
    pub local_root: PathBuf,
    /// Where local requests may point (`[local] paths`).
    pub local_paths: LocalPaths,
    /// The Docker engine address, when set.
    pub docker_host: Option<String>,
    /// Whether Docker lease workspaces are bind-mounted host directories
    /// (`[docker] workspace_mount = "bind"`).
    pub docker_bind: bool,
    /// The base of those host directories (`[docker] bind_root`), when set.
    pub docker_bind_root: Option<PathBuf>,
    /// The reference worker to run for driver `sandbox` when no plugin provides it
    /// (`[sandbox] worker`, resolved against the config file's directory), when set.
    pub sandbox_worker: Option<PathBuf>,
    /// Configured plugins.
    pub plugins: Vec<Plugin>,
    /// Every environment, the implicit `local` included, in file order.
    pub environments: Vec<Environment>,
    /// The default lease TTL of each environment that sets `ttl`.
    pub ttls: BTreeMap<String, std::time::Duration>,
    /// The pool size of each environment that declares `[environment.pool]`.
    pub pools: BTreeMap<String, usize>,
}

/// A path of the file, resolved against the config file's directory when relative.
fn beside_config(paths: &Paths, path: PathBuf) -> PathBuf {
    match paths.config.as_deref().and_then(Path::parent) {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path,
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
        Ok(Self::from_file(file, paths))
    }

    /// Parses the text of an `envrt.toml`; the error is the message without the file name.
    fn parse(text: &str) -> Result<File, String> {
        let file: File = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        local_paths(file.local.paths.as_ref())?;
        super::docker::docker_bind(file.docker.workspace_mount.as_ref())?;
        super::docker::docker_bind_root(file.docker.bind_root.as_deref())?;
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
            if let Some(raw) = &entry.ttl {
                super::parse_duration("ttl", raw).map_err(|e| format!("environment \"{}\": {e}", entry.id))?;
            }
            if let Some(pool) = &entry.pool {
                pool_size(pool).map_err(|m| format!("environment \"{}\": {m}", entry.id))?;
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

    fn from_file(file: File, paths: &Paths) -> Config {
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
        let pools = file
            .environments
            .iter()
            .filter_map(|e| Some((e.id.clone(), pool_size(e.pool.as_ref()?).ok()?)))
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
            })
            .collect();
        if !environments.iter().any(|e| e.id == IMPLICIT_LOCAL) {
            environments.push(Environment::new(IMPLICIT_LOCAL, IMPLICIT_LOCAL, IMPLICIT_LOCAL));
        }
        Config {
            company: file.company.unwrap_or_else(|| "local".into()),
            default_environment: file.default.unwrap_or_else(|| IMPLICIT_LOCAL.into()),
            // Checked by `parse`.
            local_paths: local_paths(file.local.paths.as_ref()).unwrap_or_default(),
            local_root: file.local.root.unwrap_or_else(|| paths.state_dir.join("workspaces")),
            docker_host: file.docker.host,
            // Checked by `parse`.
            docker_bind: super::docker::docker_bind(file.docker.workspace_mount.as_ref()).unwrap_or_default(),
            docker_bind_root: file.docker.bind_root,
            sandbox_worker: file.sandbox.worker.map(|worker| beside_config(paths, worker)),
            plugins: file
                .plugins
                .into_iter()
                .map(|p| Plugin {
                    manifest: beside_config(paths, p.manifest),
                    driver_key: p.driver_key,
                    config: to_json(p.config),
                })
                .collect(),
            environments,
            ttls,
            pools,
        }
    }

    /// The environment with this id.
    pub fn environment(&self, id: &str) -> Option<&Environment> {
        self.environments.iter().find(|e| e.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> Paths {
        Paths {
            config: None,
            state_dir: PathBuf::from("/state"),
        }
    }

    #[test]
    fn no_file_gives_the_implicit_local_environment() {
        let c = Config::from_file(File::default(), &paths());
        assert_eq!(c.environments, vec![Environment::new("local", "local", "local")]);
        assert_eq!(c.company, "local");
        assert_eq!(c.default_environment, "local");
        assert_eq!(c.local_root, PathBuf::from("/state/workspaces"));
    }

    #[test]
    fn a_full_file_parses_with_driver_config_as_json() {
        let file = Config::parse(
            r#"
company = "acme"
default = "dev"
[local]
root = "/tmp/ws"
[docker]
host = "tcp://127.0.0.1:2375"
[[plugin]]
manifest = "p/plugin.json"
driver_key = "bwrap"
[plugin.config]
level = 2
[[environment]]
id = "dev"
driver = "docker"
[environment.config]
image = "debian:12"
memoryBytes = 100
[[environment]]
id = "old"
name = "Old one"
driver = "local"
status = "archived"
"#,
        )
        .unwrap();
        let mut paths = paths();
        paths.config = Some(PathBuf::from("/etc/envrt/envrt.toml"));
        let c = Config::from_file(file, &paths);
        assert_eq!(c.docker_host.as_deref(), Some("tcp://127.0.0.1:2375"));
        assert_eq!(
            c.plugins,
            vec![Plugin {
                manifest: PathBuf::from("/etc/envrt/p/plugin.json"),
                driver_key: Some("bwrap".into()),
                config: serde_json::json!({"level": 2}).as_object().cloned().unwrap(),
            }]
        );
        assert_eq!(c.company, "acme");
        assert_eq!(c.default_environment, "dev");
        assert_eq!(c.local_root, PathBuf::from("/tmp/ws"));
        let ids: Vec<&str> = c.environments.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["dev", "old", "local"]);
        let dev = c.environment("dev").unwrap();
        assert_eq!(dev.name, "dev");
        assert_eq!(
            serde_json::Value::Object(dev.config.clone()),
            serde_json::json!({"image": "debian:12", "memoryBytes": 100})
        );
        assert_eq!(c.environment("old").unwrap().status, EnvironmentStatus::Archived);
        assert!(c.ttls.is_empty());
    }

    #[test]
    fn the_sandbox_worker_is_a_path_beside_the_file() {
        let mut paths = paths();
        paths.config = Some(PathBuf::from("/etc/envrt/envrt.toml"));
        let worker = |text: &str| Config::from_file(Config::parse(text).unwrap(), &paths).sandbox_worker;
        assert_eq!(worker(""), None);
        assert_eq!(worker("[sandbox]\nworker = \"/opt/w\"\n"), Some("/opt/w".into()));
        assert_eq!(
            worker("[sandbox]\nworker = \"bin/w\"\n"),
            Some("/etc/envrt/bin/w".into())
        );
        let err = Config::parse("[sandbox]\nwork = \"w\"\n").unwrap_err();
        assert_eq!(err, "unknown field `work`, expected `worker`");
    }

    #[test]
    fn an_environment_may_set_a_default_ttl() {
        let file = Config::parse("[[environment]]\nid = \"a\"\ndriver = \"local\"\nttl = \"1m30s\"\n").unwrap();
        let c = Config::from_file(file, &paths());
        assert_eq!(c.ttls.get("a"), Some(&std::time::Duration::from_secs(90)));
        assert_eq!(c.ttls.get("local"), None);
        assert_eq!(
            Config::parse("[[environment]]\nid = \"a\"\ndriver = \"local\"\nttl = \"soon\"\n").unwrap_err(),
            "environment \"a\": ttl expects a positive duration such as 90, 1.5, 500ms, 1s, 2m or 1h30m, got \"soon\""
        );
    }

    #[test]
    fn bad_files_are_refused_with_a_clear_message() {
        assert_eq!(
            Config::parse(
                "[[environment]]\nid = \"a\"\ndriver = \"local\"\n[[environment]]\nid = \"a\"\ndriver = \"x\"\n"
            )
            .unwrap_err(),
            "environment \"a\" is defined twice"
        );
        assert_eq!(
            Config::parse("[[environment]]\nid = \"a\"\ndriver = \"\"\n").unwrap_err(),
            "environment \"a\" has an empty driver"
        );
        assert_eq!(
            Config::parse("colour = 1\n").unwrap_err(),
            "unknown field `colour`, expected one of `company`, `default`, `local`, `docker`, `sandbox`, `plugin`, `environment`"
        );
        assert_eq!(
            Config::parse("[[environment]]\nid = \"a\"\n").unwrap_err(),
            "missing field `driver`"
        );
    }

    #[test]
    fn local_paths_default_to_the_workspace_and_may_open_the_host() {
        let c = Config::from_file(Config::parse("").unwrap(), &paths());
        assert_eq!(c.local_paths, LocalPaths::Workspace);
        for (text, want) in [("workspace", LocalPaths::Workspace), ("host", LocalPaths::Host)] {
            let file = Config::parse(&format!("[local]\npaths = \"{text}\"\n")).unwrap();
            assert_eq!(Config::from_file(file, &paths()).local_paths, want);
        }
        for (value, got) in [
            ("\"Host\"", "\"Host\""),
            ("\"anywhere\"", "\"anywhere\""),
            ("true", "true"),
            ("1", "1"),
        ] {
            assert_eq!(
                Config::parse(&format!("[local]\npaths = {value}\n")).unwrap_err(),
                format!("[local] paths expects \"workspace\" or \"host\", got {got}")
            );
        }
        // `[docker]` workspace keys are checked on parse (texts: `super::docker`).
        assert!(Config::parse("[docker]\nworkspace_mount = \"bind\"\nbind_root = \"/b\"\n").is_ok());
        assert!(Config::parse("[docker]\nworkspace_mount = \"tmpfs\"\n").is_err());
        assert!(Config::parse("[docker]\nbind_root = \"b\"\n").is_err());
    }

    #[test]
    fn an_environment_may_declare_a_pool() {
        let file =
            Config::parse("[[environment]]\nid = \"a\"\ndriver = \"local\"\n[environment.pool]\nsize = 3\n").unwrap();
        let c = Config::from_file(file, &paths());
        assert_eq!(c.pools.get("a"), Some(&3));
        assert_eq!(c.pools.len(), 1);
    }

    #[test]
    fn bad_pools_are_refused_with_exact_texts() {
        let pool = |body: &str| {
            Config::parse(&format!(
                "[[environment]]\nid = \"a\"\ndriver = \"local\"\n[environment.pool]\n{body}"
            ))
            .unwrap_err()
        };
        for (body, got) in [
            ("size = 0\n", "0"),
            ("size = -2\n", "-2"),
            ("size = 65\n", "65"),
            ("size = 1.5\n", "1.5"),
            ("size = \"three\"\n", "\"three\""),
            ("size = true\n", "true"),
            ("size = [1]\n", "an array"),
        ] {
            assert_eq!(
                pool(body),
                format!("environment \"a\": pool size expects a whole number from 1 to 64, got {got}"),
                "for {body:?}"
            );
        }
        assert_eq!(pool(""), "environment \"a\": [environment.pool] needs a size");
        assert_eq!(
            pool("size = 2\nimage = \"x\"\n"),
            "unknown field `image`, expected `size`"
        );
        assert_eq!(
            Config::parse(
                "[[environment]]\nid = \"a\"\ndriver = \"local\"\nttl = \"5m\"\n[environment.pool]\nsize = 2\n"
            )
            .unwrap_err(),
            "environment \"a\": a pool cannot be combined with ttl (pooled leases are acquired ahead and carry no expiry)"
        );
    }
}
