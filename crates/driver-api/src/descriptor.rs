//! Driver descriptors: how a driver crate tells the facade everything the facade, the
//! configuration file, `envrt caps` and `envrt doctor` need to know about it, so that none
//! of them names a driver.
//!
//! Each driver crate exports one [`DriverDescriptor`] (a `static`); the facade keeps one
//! list of them (one feature-gated line per driver) and iterates it. A descriptor says:
//!
//! - its [`key`](DriverDescriptor::key) and the `envrt.toml` sections it owns
//!   ([`sections`](DriverDescriptor::sections)), read into its own settings type
//!   ([`settings`](DriverDescriptor::settings)); the settings type implements
//!   [`DriverConfig`] so a program can also hand it to the builder directly;
//! - how to set its drivers up ([`build`](DriverDescriptor::build)), given those settings
//!   and a [`BuildContext`];
//! - what an environment of it enforces ([`isolation`](DriverDescriptor::isolation)), the
//!   rows `envrt caps` and `envrt doctor` print;
//! - optional `envrt doctor` checks ([`doctor`](DriverDescriptor::doctor)).
//!
//! This module depends only on the driver trait, the model and the errors, so that it can
//! move into a small driver-API crate unchanged.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use crate::{DriverError, Environment, EnvironmentDriver};

/// A driver's settings as the facade holds them: opaque, read back by the descriptor.
pub type DriverSettings = Box<dyn Any + Send + Sync>;

/// A settings type a program may hand to the builder (`RuntimeBuilder::configure`): it
/// names the descriptor it belongs to.
pub trait DriverConfig: Any + Send + Sync + Clone {
    /// The key of the descriptor whose settings this is.
    const KEY: &'static str;
}

/// Where an `envrt.toml` is and where its state goes, for reading a descriptor's sections.
#[derive(Debug, Clone, Copy)]
pub struct SettingsContext<'a> {
    /// The state directory (`--state-dir`) of an `envrt.toml`; `None` for settings a
    /// program gives without a file (the Python package's `Runtime.create`).
    pub state_dir: Option<&'a Path>,
    /// The directory of the configuration file, when there is one (relative paths in the
    /// file resolve against it).
    pub config_dir: Option<&'a Path>,
}

impl SettingsContext<'_> {
    /// `path` resolved against the configuration file's directory when relative.
    pub fn beside_config(&self, path: PathBuf) -> PathBuf {
        match self.config_dir {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path,
        }
    }
}

/// What setting drivers up may depend on beyond the descriptor's settings.
#[derive(Clone, Copy, Default)]
pub struct BuildContext<'a> {
    /// The state directory of an `envrt.toml` assembly; `None` for a plain builder.
    pub state_dir: Option<&'a Path>,
    /// The configured environments of an assembly (empty for a plain builder).
    pub environments: &'a [Environment],
    /// The driver keys an assembly needs (its environments' drivers, configured or
    /// stored, and the one the caller is about to use); `None` for a plain builder, which
    /// sets up everything it registers.
    pub needed: Option<&'a BTreeSet<String>>,
    /// Keys the program left out (`RuntimeBuilder::without_driver`): never set up.
    pub left_out: Option<&'a BTreeSet<String>>,
    /// The runtime's own durable plugin state store (an `envrt.toml` assembly's sqlite
    /// database), for plugin workers' `ctx.state`; `None`: a driver keeps such state in
    /// memory unless its settings name a store.
    pub plugin_state: Option<&'a Arc<dyn crate::PluginStateStore>>,
}

impl std::fmt::Debug for BuildContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildContext")
            .field("state_dir", &self.state_dir)
            .field("environments", &self.environments)
            .field("needed", &self.needed)
            .field("left_out", &self.left_out)
            .field("plugin_state", &self.plugin_state.is_some())
            .finish()
    }
}

impl BuildContext<'_> {
    /// Whether the driver `key` is to be set up: not left out, and needed (always, for a
    /// plain builder).
    pub fn needs(&self, key: &str) -> bool {
        !self.left_out.is_some_and(|out| out.contains(key)) && self.needed.is_none_or(|needed| needed.contains(key))
    }
}

/// One driver a descriptor set up, or failed to.
pub struct Built {
    /// The key it registers under.
    pub key: String,
    /// The driver, or why it could not be set up (the builder reports it as skipped).
    pub driver: Result<Arc<dyn EnvironmentDriver>, DriverError>,
}

impl std::fmt::Debug for Built {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Built")
            .field("key", &self.key)
            .field("ok", &self.driver.is_ok())
            .finish()
    }
}

impl Built {
    /// The outcome of setting one driver up under `key`.
    pub fn new<D: EnvironmentDriver + 'static>(key: impl Into<String>, made: Result<D, DriverError>) -> Built {
        Built {
            key: key.into(),
            driver: made.map(|d| Arc::new(d) as Arc<dyn EnvironmentDriver>),
        }
    }
}

/// Where a doctor check goes: before the isolation rows of the environments, or after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoctorPhase {
    /// Readiness of the driver and what it needs on this host (engine, binaries, worker).
    Setup,
    /// Per-environment reachability (a remote host), and setup failures found late.
    Environments,
}

/// One `envrt doctor` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DoctorCheck {
    /// What is checked (`Docker engine`, `ssh host`, ...).
    pub name: String,
    /// Whether a failure makes `envrt doctor` exit 1 (a configured environment needs it).
    pub required: bool,
    /// Whether it passed.
    pub ok: bool,
    /// What was found.
    pub detail: String,
    /// How to fix a failure.
    pub fix: Option<String>,
    /// Where it is printed.
    pub phase: DoctorPhase,
}

/// What `envrt doctor` knows when it asks a descriptor for checks.
#[derive(Clone, Copy)]
pub struct DoctorContext<'a> {
    /// Every configured environment.
    pub environments: &'a [Environment],
    /// The descriptor's settings as the configuration gave them.
    pub settings: &'a (dyn Any + Send + Sync),
    /// The drivers the assembly could not set up: `(key, error)`.
    pub skipped: &'a [(String, DriverError)],
    /// The keys of every other registered descriptor.
    pub others: &'a [&'static str],
}

impl std::fmt::Debug for DoctorContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DoctorContext")
            .field("environments", &self.environments.len())
            .field("skipped", &self.skipped)
            .finish_non_exhaustive()
    }
}

impl DoctorContext<'_> {
    /// Whether a configured environment uses the driver `key`.
    pub fn uses(&self, key: &str) -> bool {
        self.environments.iter().any(|e| e.driver == key)
    }

    /// The check that the driver `key` was set up: its skip reason and `fix` when not.
    pub fn readiness(&self, key: &str, name: &str, fix: &str) -> DoctorCheck {
        let (ok, detail, fix) = match self.skipped.iter().find(|(k, _)| k == key) {
            Some((_, error)) => (false, error.to_string(), Some(fix.to_owned())),
            None => (true, format!("driver \"{key}\" ready"), None),
        };
        DoctorCheck {
            name: name.to_owned(),
            required: self.uses(key),
            ok,
            detail,
            fix,
            phase: DoctorPhase::Setup,
        }
    }
}

/// The one entry a driver crate exports.
#[async_trait]
pub trait DriverDescriptor: Send + Sync + 'static {
    /// The driver key (`Environment::driver`), also the name of its cargo feature's driver.
    fn key(&self) -> &'static str;

    /// The top-level `envrt.toml` sections this descriptor owns, in the order the file
    /// format lists them (none by default).
    fn sections(&self) -> &'static [&'static str] {
        &[]
    }

    /// Whether a plain builder with default settings registers this driver (false for a
    /// descriptor whose drivers each need a program-supplied part, such as a plugin).
    fn registers_by_default(&self) -> bool {
        true
    }

    /// The settings a plain builder uses when the program configured none.
    fn default_settings(&self) -> DriverSettings;

    /// Reads the settings from the descriptor's sections (each as the file gave it, in
    /// JSON form; a section the file leaves out is absent). The error is the exact
    /// message, without the file name (`[local] paths expects ...`).
    fn settings(
        &self,
        sections: &BTreeMap<String, serde_json::Value>,
        context: &SettingsContext<'_>,
    ) -> Result<DriverSettings, String>;

    /// Whether an assembly sets this driver up only when one of its environments (or the
    /// caller) needs it: true for a driver whose setup connects somewhere or starts a
    /// process.
    fn on_demand(&self) -> bool {
        false
    }

    /// Sets the descriptor's drivers up from `settings` (one of its own settings values),
    /// each only when [`BuildContext::needs`] its key.
    /// The error is an input the program must fix (a plugin manifest that does not load),
    /// as an exact message; a driver that merely could not start is a [`Built`] error.
    async fn build(&self, settings: &(dyn Any + Send + Sync), context: &BuildContext<'_>)
    -> Result<Vec<Built>, String>;

    /// Whether this descriptor describes environments whose driver is `key` (its own key
    /// by default; a descriptor whose drivers take keys from elsewhere says so).
    fn describes(&self, key: &str) -> bool {
        key == self.key()
    }

    /// `(setting, value)` rows of what `environment` enforces on its commands.
    fn isolation(&self, environment: &Environment) -> Vec<(String, String)>;

    /// Whether `envrt doctor` sets this driver up even when no environment uses it, to
    /// report its readiness (false by default).
    fn doctor_sets_up(&self) -> bool {
        false
    }

    /// Extra `envrt doctor` checks (none by default).
    async fn doctor(&self, context: &DoctorContext<'_>) -> Vec<DoctorCheck> {
        let _ = context;
        Vec::new()
    }
}

impl std::fmt::Debug for dyn DriverDescriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DriverDescriptor({})", self.key())
    }
}

/// `settings` read back as `T`, or a message naming the descriptor that got something
/// else (a program error, not an input error).
pub fn settings_as<'a, T: 'static>(key: &str, settings: &'a (dyn Any + Send + Sync)) -> Result<&'a T, String> {
    settings
        .downcast_ref::<T>()
        .ok_or_else(|| format!("driver \"{key}\" was handed settings of another type"))
}

/// Reads one section into `T` (a serde type, strict with `deny_unknown_fields` as the
/// file's own sections are); an absent section gives `T::default()`.
pub fn read_section<T: serde::de::DeserializeOwned + Default>(
    sections: &BTreeMap<String, serde_json::Value>,
    name: &str,
) -> Result<T, String> {
    match sections.get(name) {
        None => Ok(T::default()),
        Some(value) => serde_json::from_value(value.clone()).map_err(|e| e.to_string()),
    }
}

/// An executable file named `name` in a directory of `PATH`.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// Whether `path` is an executable file.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A JSON value as a configuration error message shows it (`"text"`, `1`, `true`,
/// `an array`, `a table`), the same way for every descriptor.
pub fn shown(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => format!("\"{s}\""),
        serde_json::Value::Array(_) => "an array".into(),
        serde_json::Value::Object(_) => "a table".into(),
        serde_json::Value::Null => "nothing".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, serde::Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Section {
        root: Option<PathBuf>,
    }

    #[test]
    fn a_section_is_read_strictly_and_defaults_when_absent() {
        let mut sections = BTreeMap::new();
        assert_eq!(read_section::<Section>(&sections, "x"), Ok(Section::default()));
        sections.insert("x".to_owned(), serde_json::json!({"root": "/r"}));
        assert_eq!(
            read_section::<Section>(&sections, "x"),
            Ok(Section {
                root: Some("/r".into())
            })
        );
        sections.insert("x".to_owned(), serde_json::json!({"rot": "/r"}));
        assert_eq!(
            read_section::<Section>(&sections, "x"),
            Err("unknown field `rot`, expected `root`".to_owned())
        );
    }

    #[test]
    fn values_are_shown_as_the_file_wrote_them() {
        assert_eq!(shown(&serde_json::json!("a")), "\"a\"");
        assert_eq!(shown(&serde_json::json!(true)), "true");
        assert_eq!(shown(&serde_json::json!(1)), "1");
        assert_eq!(shown(&serde_json::json!(1.5)), "1.5");
        assert_eq!(shown(&serde_json::json!([1])), "an array");
        assert_eq!(shown(&serde_json::json!({})), "a table");
    }
}
