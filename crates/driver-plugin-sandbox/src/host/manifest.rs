//! The host-side plugin manifest: which worker to start and which drivers it provides.
//!
//! Two forms are accepted. The host form names the worker's argv in a `worker` object
//! (`{"worker": {"command": [...], "env": {...}}}`). The form Paperclip plugins publish
//! (`PaperclipPluginManifestV1` of `@paperclipai/plugin-sdk`) has no `worker` object but
//! `entrypoints.worker`, a script path relative to the plugin's folder, which Paperclip
//! runs with `node`; [`PluginManifest::load`] resolves it against the manifest file's
//! folder. Either form may carry `worker.env`, the environment the manifest declares for
//! its worker, which the host passes beside `PATH` and `TZ`.

use std::collections::BTreeMap;
use std::path::Path;

use envrt_driver_api::CapabilityDeclaration;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::host::error::SandboxError;

/// A plugin manifest (camelCase JSON). Unknown fields are kept in `extra` and sent to the
/// worker in `initialize` unchanged, so a Paperclip manifest file can be used as it is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginManifest {
    /// The plugin id (used in errors and logs).
    pub id: String,
    /// How to start the worker. Filled from `entrypoints.worker` (run with `node`) when the
    /// manifest has no `worker.command`.
    #[serde(default)]
    pub worker: WorkerCommand,
    /// The drivers this plugin provides.
    #[serde(default)]
    pub environment_drivers: Vec<EnvironmentDriverEntry>,
    /// Every other manifest field, passed through.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

/// How to start a worker process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerCommand {
    /// argv; element 0 is the program (resolved through the worker's `PATH`).
    #[serde(default)]
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
    /// Parses a manifest from JSON text; a published `entrypoints.worker` stays relative
    /// to the current directory (use [`load`](Self::load) to resolve it against the
    /// manifest's folder).
    pub fn from_json(text: &str) -> Result<PluginManifest, SandboxError> {
        Self::from_json_in(text, None)
    }

    /// Parses a manifest from JSON text whose relative `entrypoints.worker` lies under
    /// `folder`.
    pub fn from_json_in(text: &str, folder: Option<&Path>) -> Result<PluginManifest, SandboxError> {
        let invalid = |e: serde_json::Error| SandboxError::Manifest { message: e.to_string() };
        let value: Value = serde_json::from_str(text).map_err(invalid)?;
        let has_worker_object = value.get("worker").is_some();
        let mut manifest: PluginManifest = serde_json::from_value(value).map_err(invalid)?;
        if manifest.worker.command.is_empty() {
            if let Some(entry) = manifest.worker_entrypoint()? {
                let script = match folder {
                    Some(folder) if Path::new(&entry).is_relative() => {
                        folder.join(&entry).to_string_lossy().into_owned()
                    }
                    _ => entry,
                };
                manifest.worker.command = vec!["node".into(), script];
            } else if !has_worker_object {
                return Err(SandboxError::Manifest {
                    message: "the manifest names no worker: give worker.command or entrypoints.worker".into(),
                });
            }
        }
        manifest.validate()?;
        Ok(manifest)
    }

    /// `entrypoints.worker` of a published manifest, when present.
    fn worker_entrypoint(&self) -> Result<Option<String>, SandboxError> {
        let Some(entrypoints) = self.extra.get("entrypoints") else {
            return Ok(None);
        };
        match entrypoints.get("worker") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(path)) if !path.is_empty() => Ok(Some(path.clone())),
            Some(_) => Err(SandboxError::Manifest {
                message: "entrypoints.worker must be a non-empty path".into(),
            }),
        }
    }

    /// Loads a manifest file; a published `entrypoints.worker` is resolved against the
    /// file's folder. A directory is a package ([`load_package`](Self::load_package)).
    pub fn load(path: impl AsRef<Path>) -> Result<PluginManifest, SandboxError> {
        let path = path.as_ref();
        if path.is_dir() {
            return Self::load_package(path);
        }
        let text = std::fs::read_to_string(path).map_err(|e| SandboxError::Manifest {
            message: format!("cannot read {}: {e}", path.display()),
        })?;
        let folder = std::fs::canonicalize(path)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf));
        Self::from_json_in(&text, folder.as_deref())
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

    /// The entry a driver started without a requested key uses: the one keyed
    /// [`DEFAULT_DRIVER_KEY`](crate::DEFAULT_DRIVER_KEY), else the first.
    pub fn default_entry(&self) -> Option<&EnvironmentDriverEntry> {
        self.driver_entry(Some(super::DEFAULT_DRIVER_KEY))
            .or_else(|| self.driver_entry(None))
    }

    /// The key a driver over this manifest registers under: `requested` (the options'
    /// `driver_key`), else the default entry's key, else
    /// [`DEFAULT_DRIVER_KEY`](crate::DEFAULT_DRIVER_KEY).
    pub fn driver_key(&self, requested: Option<&str>) -> String {
        match requested {
            Some(key) => key.to_owned(),
            None => self
                .default_entry()
                .map_or(super::DEFAULT_DRIVER_KEY, |e| e.driver_key.as_str())
                .to_owned(),
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
        let err = PluginManifest::from_json(r#"{"id":"p","apiVersion":1}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Invalid plugin manifest: the manifest names no worker: give worker.command or entrypoints.worker"
        );
        let err = PluginManifest::from_json(r#"{"id":"p","entrypoints":{"worker":7}}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Invalid plugin manifest: entrypoints.worker must be a non-empty path"
        );
    }

    /// The form Paperclip plugins publish: `entrypoints.worker`, no `worker` object.
    #[test]
    fn accepts_the_published_form_and_runs_the_entrypoint_with_node() {
        let text = r#"{"id":"acme.sandbox","apiVersion":1,"version":"1.0.0","displayName":"Acme",
            "description":"d","author":"a","categories":["automation"],
            "capabilities":["environment.drivers.register"],
            "entrypoints":{"worker":"dist/worker.js"},
            "environmentDrivers":[{"driverKey":"acme","kind":"sandbox_provider","displayName":"Acme"}]}"#;
        let m = PluginManifest::from_json(text).unwrap();
        assert_eq!(m.worker.command, ["node", "dist/worker.js"]);
        assert!(m.worker.env.is_empty());
        assert_eq!(m.to_wire()["entrypoints"]["worker"], "dist/worker.js");
        let m = PluginManifest::from_json_in(text, Some(Path::new("/opt/acme"))).unwrap();
        assert_eq!(m.worker.command, ["node", "/opt/acme/dist/worker.js"]);
        // A declared worker environment rides along with the published form.
        let with_env = text.replacen('{', r#"{"worker":{"env":{"ACME_REGION":"eu"}},"#, 1);
        let m = PluginManifest::from_json_in(&with_env, Some(Path::new("/opt/acme"))).unwrap();
        assert_eq!(m.worker.command, ["node", "/opt/acme/dist/worker.js"]);
        assert_eq!(m.worker.env["ACME_REGION"], "eu");
        // An explicit command wins over the entrypoint.
        let explicit = text.replacen('{', r#"{"worker":{"command":["deno","run","w.ts"]},"#, 1);
        assert_eq!(
            PluginManifest::from_json(&explicit).unwrap().worker.command,
            ["deno", "run", "w.ts"]
        );
    }

    #[test]
    fn load_resolves_the_entrypoint_against_the_manifests_folder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("manifest.json");
        std::fs::write(&path, r#"{"id":"p","entrypoints":{"worker":"worker.mjs"}}"#).unwrap();
        let m = PluginManifest::load(&path).unwrap();
        let folder = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(
            m.worker.command,
            [
                "node".to_string(),
                folder.join("worker.mjs").to_string_lossy().into_owned()
            ]
        );
    }
}
