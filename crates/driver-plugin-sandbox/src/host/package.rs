//! Installing a plugin as Paperclip users do: a package directory whose `package.json`
//! has a `paperclipPlugin` entry naming the manifest (`manifest`, a `.json` file or an ES
//! module whose default export is the manifest, as Paperclip's build emits) and the
//! worker (`worker`, run with `node`), both relative to the package directory.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::SandboxError;
use super::manifest::PluginManifest;

fn failed(message: String) -> SandboxError {
    SandboxError::Manifest { message }
}

fn entry(package: &Value, dir: &Path, field: &str) -> Result<Option<PathBuf>, SandboxError> {
    match package["paperclipPlugin"].get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(path)) if !path.is_empty() => Ok(Some(
            Path::new(path)
                .components()
                .filter(|c| !matches!(c, std::path::Component::CurDir))
                .fold(dir.to_path_buf(), |p, c| p.join(c)),
        )),
        Some(_) => Err(failed(format!(
            "{}: paperclipPlugin.{field} must be a non-empty path",
            dir.join("package.json").display()
        ))),
    }
}

/// The manifest module's default export, as JSON (node imports it).
fn module_manifest(path: &Path) -> Result<String, SandboxError> {
    let script = "const m = await import(process.argv[1]); \
                  process.stdout.write(JSON.stringify(m.default ?? m.manifest));";
    let out = std::process::Command::new("node")
        .args(["--input-type=module", "-e", script])
        .arg(url_of(path))
        .output()
        .map_err(|e| failed(format!("cannot run node to read {}: {e}", path.display())))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().rfind(|l| !l.trim().is_empty()).unwrap_or_default();
        return Err(failed(format!("cannot import {}: {last}", path.display())));
    }
    String::from_utf8(out.stdout).map_err(|_| failed(format!("{}: the manifest is not UTF-8", path.display())))
}

fn url_of(path: &Path) -> String {
    format!("file://{}", path.display())
}

impl PluginManifest {
    /// Loads the plugin in package directory `dir` (`package.json` with a
    /// `paperclipPlugin` entry). `paperclipPlugin.worker`, when given, is the worker
    /// (`node <dir>/<worker>`), else the manifest's own `worker` or `entrypoints.worker`.
    pub fn load_package(dir: impl AsRef<Path>) -> Result<PluginManifest, SandboxError> {
        let dir = std::fs::canonicalize(dir.as_ref())
            .map_err(|e| failed(format!("cannot read {}: {e}", dir.as_ref().display())))?;
        let package_path = dir.join("package.json");
        let text = std::fs::read_to_string(&package_path)
            .map_err(|e| failed(format!("cannot read {}: {e}", package_path.display())))?;
        let package: Value =
            serde_json::from_str(&text).map_err(|e| failed(format!("{}: {e}", package_path.display())))?;
        if !package["paperclipPlugin"].is_object() {
            return Err(failed(format!(
                "{} has no \"paperclipPlugin\" entry (an object naming the manifest and the worker)",
                package_path.display()
            )));
        }
        let manifest_path = entry(&package, &dir, "manifest")?.ok_or_else(|| {
            failed(format!(
                "{}: paperclipPlugin.manifest must be a non-empty path",
                package_path.display()
            ))
        })?;
        let text = if manifest_path.extension().is_some_and(|e| e == "json") {
            std::fs::read_to_string(&manifest_path)
                .map_err(|e| failed(format!("cannot read {}: {e}", manifest_path.display())))?
        } else {
            module_manifest(&manifest_path)?
        };
        let mut value: Value =
            serde_json::from_str(&text).map_err(|e| failed(format!("{}: {e}", manifest_path.display())))?;
        if let Some(worker) = entry(&package, &dir, "worker")? {
            // the manifest's worker environment, if any, is kept
            value["worker"]["command"] = serde_json::json!(["node", worker.to_string_lossy()]);
        }
        let folder = manifest_path.parent().map(Path::to_path_buf);
        PluginManifest::from_json_in(&value.to_string(), folder.as_deref())
    }
}
