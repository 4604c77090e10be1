//! The host-side plugin manifest: which worker to start and which drivers it provides.

use std::collections::BTreeMap;
use std::path::Path;

use envrt_runtime_core::CapabilityDeclaration;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::SandboxError;

/// A plugin manifest (camelCase JSON). Unknown fields are kept in `extra` and sent to the
/// worker in `initialize` unchanged, so a Paperclip manifest file can be used as it is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginManifest {
    /// The plugin id (used in errors and logs).
    pub id: String,
    /// How to start the worker.
    pub worker: WorkerCommand,
    /// The drivers this plugin provides.
    #[serde(default)]
    pub environment_drivers: Vec<EnvironmentDriverEntry>,
    /// Every other manifest field, passed through.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

/// How to start a worker process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerCommand {
    /// argv; element 0 is the program (resolved through the worker's `PATH`).
    pub command: Vec<String>,
    /// Extra environment variables for the worker, beside `PATH` and `TZ`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// Whether an entry is a sandbox provider or a plain environment driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverKind {
    /// `sandbox_provider`.
    SandboxProvider,
    /// `environment_driver`.
    EnvironmentDriver,
}

/// One `environmentDrivers[]` entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentDriverEntry {
    /// The driver key the runtime registers.
    pub driver_key: String,
    /// Its kind.
    pub kind: DriverKind,
    /// Human name.
    pub display_name: String,
    /// JSON schema of the environment config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_schema: Option<Value>,
    /// The capability declaration fed to the classifier (it can remove, never grant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_capabilities: Option<CapabilityDeclaration>,
}

impl PluginManifest {
    /// Parses a manifest from JSON text.
    pub fn from_json(text: &str) -> Result<PluginManifest, SandboxError> {
        let manifest: PluginManifest =
            serde_json::from_str(text).map_err(|e| SandboxError::Manifest { message: e.to_string() })?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// Loads a manifest file.
    pub fn load(path: impl AsRef<Path>) -> Result<PluginManifest, SandboxError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| SandboxError::Manifest {
            message: format!("cannot read {}: {e}", path.display()),
        })?;
        Self::from_json(&text)
    }

    /// Checks what the host relies on: a non-empty id and worker argv.
    pub fn validate(&self) -> Result<(), SandboxError> {
        if self.id.is_empty() {
            return Err(SandboxError::Manifest {
                message: "id must not be empty".into(),
            });
        }
        if self.worker.command.first().is_none_or(String::is_empty) {
            return Err(SandboxError::Manifest {
                message: "worker.command must name a program".into(),
            });
        }
        Ok(())
    }

    /// The entry for `driver_key`, or the first entry when `None`.
    pub fn driver_entry(&self, driver_key: Option<&str>) -> Option<&EnvironmentDriverEntry> {
        match driver_key {
            Some(key) => self.environment_drivers.iter().find(|d| d.driver_key == key),
            None => self.environment_drivers.first(),
        }
    }

    /// The manifest as sent in `initialize` (camelCase JSON).
    pub fn to_wire(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_camel_case_and_keeps_unknown_fields() {
        let m = PluginManifest::from_json(
            r#"{"id":"p","apiVersion":1,"worker":{"command":["node","w.mjs"],"env":{"A":"1"}},
               "environmentDrivers":[{"driverKey":"sandbox","kind":"sandbox_provider","displayName":"S",
               "configSchema":{"type":"object"},"sandboxCapabilities":{"duplexCommandStream":true}}]}"#,
        )
        .unwrap();
        assert_eq!(m.worker.env["A"], "1");
        let entry = m.driver_entry(Some("sandbox")).unwrap();
        assert_eq!(entry.kind, DriverKind::SandboxProvider);
        assert_eq!(entry.sandbox_capabilities.unwrap().duplex_command_stream, Some(true));
        assert_eq!(entry.sandbox_capabilities.unwrap().native_sync_in, None);
        assert_eq!(m.to_wire()["apiVersion"], 1);
    }

    #[test]
    fn refuses_a_manifest_without_a_worker_program() {
        let err = PluginManifest::from_json(r#"{"id":"p","worker":{"command":[]}}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Invalid plugin manifest: worker.command must name a program"
        );
        let err = PluginManifest::from_json(r#"{"id":"p"}"#).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("Invalid plugin manifest: missing field `worker`"),
            "{err}"
        );
    }
}
