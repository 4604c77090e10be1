//! The plugin-backed sandbox driver's [`DriverDescriptor`]: key `sandbox` (the reference
//! worker's; a plugin's drivers take their keys from its manifest), the `[sandbox]` and
//! `[[plugin]]` sections of `envrt.toml`, started only when an environment needs one of
//! its keys, and the `envrt doctor` checks of bubblewrap, the reference worker and every
//! plugin worker that would not start.

mod worker;

use std::any::Any;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use envrt_driver_api::descriptor::{
    BuildContext, Built, DoctorCheck, DoctorContext, DoctorPhase, DriverConfig, DriverDescriptor, DriverSettings,
    SettingsContext, find_in_path, read_section, settings_as,
};
use envrt_driver_api::{DriverError, Environment, JsonMap};

use crate::{DEFAULT_DRIVER_KEY, PluginManifest, SandboxDriver, SandboxOptions, reference_manifest};

pub use worker::{add_worker_search_dir, locate_reference_worker, reference_worker};

/// The sandbox driver's descriptor (the facade registers it under feature
/// `plugin-sandbox`).
pub static DESCRIPTOR: SandboxDescriptor = SandboxDescriptor;

/// See [`DESCRIPTOR`].
#[derive(Debug)]
pub struct SandboxDescriptor;

/// A `[[plugin]]` of `envrt.toml`: its manifest file (resolved against the file's
/// directory), which `environmentDrivers` entry, the configuration sent in
/// `initialize`, and what the worker's own calls may reach (`secrets`, `http_allow`).
#[derive(Clone, Debug, PartialEq)]
pub struct PluginFile {
    /// The manifest file.
    pub manifest: PathBuf,
    /// Which manifest entry.
    pub driver_key: Option<String>,
    /// Plugin configuration.
    pub config: JsonMap,
    /// The secret references `secrets.resolve` may resolve (`env:NAME`,
    /// `file:/absolute/path`), checked when the file is read.
    pub secrets: Vec<String>,
    /// The hosts `http.fetch` may reach (`host`, `host:port`), checked
    /// when the file is read.
    pub http_allow: Vec<String>,
    /// PEM files of extra certificate authorities `http.fetch` trusts for `https://`
    /// (resolved against the file's directory).
    pub http_roots: Vec<PathBuf>,
}

/// The sandbox drivers to set up: plugins a program loaded itself, plugins named by
/// `envrt.toml`, and the reference worker `[sandbox] worker` names.
#[derive(Clone, Default)]
pub struct SandboxSettings {
    /// Loaded plugins, each started as one driver.
    pub plugins: Vec<(PluginManifest, SandboxOptions)>,
    /// `[[plugin]]` entries, loaded when the runtime is built.
    pub plugin_files: Vec<PluginFile>,
    /// `[sandbox] worker`: the reference worker run for key `sandbox` when no plugin
    /// provides it (resolved against the file's directory).
    pub worker: Option<PathBuf>,
}

impl std::fmt::Debug for SandboxSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxSettings")
            .field("plugins", &self.plugins.len())
            .field("plugin_files", &self.plugin_files)
            .field("worker", &self.worker)
            .finish()
    }
}

impl DriverConfig for SandboxSettings {
    const KEY: &'static str = DEFAULT_DRIVER_KEY;
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SandboxSection {
    worker: Option<PathBuf>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginEntry {
    manifest: PathBuf,
    driver_key: Option<String>,
    #[serde(default)]
    config: JsonMap,
    #[serde(default)]
    secrets: Vec<String>,
    #[serde(default)]
    http_allow: Vec<String>,
    #[serde(default)]
    http_roots: Vec<PathBuf>,
}

/// Checks one `secrets` entry of a `[[plugin]]`: `env:NAME` (a variable name: letters,
/// digits and `_`, not starting with a digit) or `file:/absolute/path`; the error is the
/// exact refusal text.
fn check_secret_reference(entry: &str) -> Result<(), String> {
    let fine = if let Some(name) = entry.strip_prefix("env:") {
        name.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    } else if let Some(path) = entry.strip_prefix("file:") {
        path.starts_with('/') && !path.contains('\0')
    } else {
        false
    };
    if fine {
        Ok(())
    } else {
        Err(format!(
            "secrets entry \"{}\" must be env:NAME (a variable name) or file:/absolute/path",
            entry.escape_debug()
        ))
    }
}

/// Checks one `http_allow` entry of a `[[plugin]]`: a host name or address (letters,
/// digits, `.`, `-`) with an optional `:port` (1-65535), no scheme, path or IPv6
/// literal; the error is the exact refusal text.
fn check_http_allow(entry: &str) -> Result<(), String> {
    let (host, port) = match entry.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (entry, None),
    };
    let host_fine = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        && !host.starts_with(['.', '-']);
    let port_fine = port.is_none_or(|p| {
        !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok_and(|n| n > 0)
    });
    if host_fine && port_fine {
        Ok(())
    } else {
        Err(format!(
            "http_allow entry \"{}\" must be a host or host:port (no scheme, path or IPv6 literal; port 1-65535)",
            entry.escape_debug()
        ))
    }
}

fn check_plugin_entry(entry: &PluginEntry) -> Result<(), String> {
    let name = || format!("[[plugin]] \"{}\"", entry.manifest.display());
    for secret in &entry.secrets {
        check_secret_reference(secret).map_err(|e| format!("{}: {e}", name()))?;
    }
    for host in &entry.http_allow {
        check_http_allow(host).map_err(|e| format!("{}: {e}", name()))?;
    }
    Ok(())
}

#[async_trait]
impl DriverDescriptor for SandboxDescriptor {
    fn key(&self) -> &'static str {
        DEFAULT_DRIVER_KEY
    }

    fn sections(&self) -> &'static [&'static str] {
        &["sandbox", "plugin"]
    }

    fn default_settings(&self) -> DriverSettings {
        Box::new(SandboxSettings::default())
    }

    fn registers_by_default(&self) -> bool {
        false
    }

    fn settings(
        &self,
        sections: &BTreeMap<String, serde_json::Value>,
        context: &SettingsContext<'_>,
    ) -> Result<DriverSettings, String> {
        let sandbox: SandboxSection = read_section(sections, "sandbox")?;
        let entries: Vec<PluginEntry> = read_section(sections, "plugin")?;
        for entry in &entries {
            check_plugin_entry(entry)?;
        }
        Ok(Box::new(SandboxSettings {
            plugins: Vec::new(),
            plugin_files: entries
                .into_iter()
                .map(|p| PluginFile {
                    manifest: context.beside_config(p.manifest),
                    driver_key: p.driver_key,
                    config: p.config,
                    secrets: p.secrets,
                    http_allow: p.http_allow,
                    http_roots: p.http_roots.into_iter().map(|r| context.beside_config(r)).collect(),
                })
                .collect(),
            worker: sandbox.worker.map(|w| context.beside_config(w)),
        }))
    }

    fn on_demand(&self) -> bool {
        true
    }

    /// Starts one driver per plugin whose key is needed, plus (in an assembly) the
    /// reference worker when key `sandbox` is needed and no plugin provides it; when that
    /// worker is not found, the skipped `sandbox` driver says why.
    async fn build(
        &self,
        settings: &(dyn Any + Send + Sync),
        context: &BuildContext<'_>,
    ) -> Result<Vec<Built>, String> {
        let settings = settings_as::<SandboxSettings>(DEFAULT_DRIVER_KEY, settings)?;
        let mut plugins = settings.plugins.clone();
        for plugin in &settings.plugin_files {
            let manifest = PluginManifest::load(&plugin.manifest)
                .map_err(|e| format!("envrt: plugin \"{}\": {e}", plugin.manifest.display()))?;
            let mut options = SandboxOptions {
                driver_key: plugin.driver_key.clone(),
                config: plugin.config.clone(),
                ..Default::default()
            };
            options.worker_calls.secrets = plugin.secrets.clone();
            options.worker_calls.http_allow = plugin.http_allow.clone();
            options.worker_calls.http_roots = plugin.http_roots.clone();
            if let Some(store) = context.plugin_state {
                options.worker_calls.state = store.clone();
            }
            plugins.push((manifest, options));
        }
        let provided = |key: &str| {
            plugins.iter().any(|(m, o): &(PluginManifest, SandboxOptions)| {
                o.driver_key.as_deref() == Some(key) || m.environment_drivers.iter().any(|d| d.driver_key == key)
            })
        };
        let mut missing = None;
        if let Some(state_dir) = context.state_dir
            && context.needs(DEFAULT_DRIVER_KEY)
            && !provided(DEFAULT_DRIVER_KEY)
        {
            match locate_reference_worker(settings.worker.as_deref()) {
                Ok(worker) => plugins.push((
                    reference_manifest(&worker, &state_dir.join("sandbox")),
                    SandboxOptions::default(),
                )),
                Err(message) => {
                    missing = Some(Built {
                        key: DEFAULT_DRIVER_KEY.to_owned(),
                        driver: Err(DriverError::Unavailable { message, source: None }),
                    })
                }
            }
        }
        let mut built = Vec::new();
        for (manifest, options) in plugins {
            let key = manifest.driver_key(options.driver_key.as_deref());
            if context.needs(&key) {
                built.push(Built::new(key, SandboxDriver::start(manifest, options).await));
            }
        }
        built.extend(missing);
        Ok(built)
    }

    fn isolation(&self, _: &Environment) -> Vec<(String, String)> {
        vec![("isolation".into(), "set by the plugin worker".into())]
    }

    async fn doctor(&self, context: &DoctorContext<'_>) -> Vec<DoctorCheck> {
        let settings = settings_as::<SandboxSettings>(DEFAULT_DRIVER_KEY, context.settings);
        let configured_plugin = settings
            .as_ref()
            .is_ok_and(|s| !s.plugin_files.is_empty() || !s.plugins.is_empty());
        let configured_worker = settings.ok().and_then(|s| s.worker.clone());
        let sandbox = context.uses(DEFAULT_DRIVER_KEY);
        let check = |name: &str, required: bool, found: Option<PathBuf>, missing: &str, fix: &str| {
            let ok = found.is_some();
            DoctorCheck {
                name: name.to_owned(),
                required,
                ok,
                detail: found.map_or_else(|| missing.to_owned(), |p| p.display().to_string()),
                fix: (!ok).then(|| fix.to_owned()),
                phase: DoctorPhase::Setup,
            }
        };
        let mut checks = vec![
            check(
                "bubblewrap",
                sandbox,
                find_in_path("bwrap"),
                "`bwrap` is not on PATH",
                "install bubblewrap (apt-get install bubblewrap)",
            ),
            worker_check(configured_worker.as_deref(), sandbox && !configured_plugin),
        ];
        // A missing reference worker is the sandbox worker check's, said once.
        let reference = |key: &str| key == DEFAULT_DRIVER_KEY && !configured_plugin;
        for (key, error) in context
            .skipped
            .iter()
            .filter(|(key, _)| !context.others.contains(&key.as_str()) && !reference(key))
        {
            checks.push(DoctorCheck {
                name: "plugin worker".into(),
                required: true,
                ok: false,
                detail: format!("driver \"{key}\": {error}"),
                fix: Some("check the manifest's worker.command and run it by hand to see why it exits".into()),
                phase: DoctorPhase::Environments,
            });
        }
        checks
    }
}

/// The reference sandbox worker: `[sandbox] worker` when the file sets it (only that path),
/// else where envrt looks for it; the detail of a missing one is the library's text (which
/// binary, where it looked, how to set it).
fn worker_check(configured: Option<&Path>, required: bool) -> DoctorCheck {
    let (ok, detail, fix) = match locate_reference_worker(configured) {
        Ok(path) => (
            true,
            match configured {
                Some(_) => format!("{} (set by [sandbox] worker in envrt.toml)", path.display()),
                None => path.display().to_string(),
            },
            None,
        ),
        Err(message) => (
            false,
            message,
            Some(match configured {
                Some(_) => "build it (cargo build -p envrt-sandbox-worker) where [sandbox] worker in envrt.toml says, or correct that path".to_owned(),
                None => "cargo build -p envrt-sandbox-worker, then put it next to envrt or on PATH, or set [sandbox] worker in envrt.toml".to_owned(),
            }),
        ),
    };
    DoctorCheck {
        name: "sandbox worker".to_owned(),
        required,
        ok,
        detail,
        fix,
        phase: DoctorPhase::Setup,
    }
}
