//! A plugin installed as Paperclip users install it: a package directory whose
//! `package.json` has a `paperclipPlugin` entry (manifest and worker), with a JSON
//! manifest or a built ES module one.

mod host_calls_common;
mod host_common;

use envrt_driver_plugin_sandbox::{PluginManifest, SandboxOptions};
use envrt_runtime_core::LeaseStatus;
use host_common::*;
use serde_json::json;

#[tokio::test]
async fn a_package_dir_with_a_json_manifest_loads_and_runs() {
    let dir = host_calls_common::dir();
    let manifest = PluginManifest::load(&dir).unwrap();
    assert_eq!(manifest.id, "envrt.hostcalls");
    let worker = std::fs::canonicalize(dir.join("worker.mjs")).unwrap();
    assert_eq!(manifest.worker.command, ["node", worker.to_str().unwrap()]);
    let (driver, runtime, lease) = host_calls_common::lease_on(manifest, SandboxOptions::default()).await;
    let out = bounded(
        "calls",
        host_calls_common::run(&runtime, &lease, &json!([{"op": "config.get"}])),
    )
    .await;
    assert_eq!(out, [json!({"ok": {}})]);
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

#[tokio::test]
async fn a_built_package_with_a_module_manifest_loads_and_runs() {
    let root = TempDir::new("pkg-module");
    let fixture = host_calls_common::dir();
    std::fs::create_dir_all(root.join("dist")).unwrap();
    let manifest = host_calls_common::manifest_json(None);
    std::fs::write(
        root.join("dist/manifest.js"),
        format!("const manifest = {manifest};\nexport default manifest;\n"),
    )
    .unwrap();
    // the fixture's worker, built into dist/ (its imports made absolute)
    let worker = std::fs::read_to_string(fixture.join("worker.mjs"))
        .unwrap()
        .replace("\"../sdk-worker/", &format!("\"{}/sdk-worker/", fixtures().display()))
        .replace(
            "\"./calls.mjs\"",
            &format!("\"{}\"", fixture.join("calls.mjs").display()),
        );
    std::fs::write(root.join("dist/worker.js"), worker).unwrap();
    std::fs::write(
        root.join("package.json"),
        json!({"name": "p", "type": "module",
               "paperclipPlugin": {"manifest": "./dist/manifest.js", "worker": "./dist/worker.js"}})
        .to_string(),
    )
    .unwrap();
    let loaded = PluginManifest::load_package(root.path()).unwrap();
    assert_eq!(loaded.id, "envrt.hostcalls");
    assert!(
        loaded.worker.command[1].ends_with("/dist/worker.js"),
        "{:?}",
        loaded.worker.command
    );
    let (driver, runtime, lease) = host_calls_common::lease_on(loaded, SandboxOptions::default()).await;
    let out = bounded(
        "calls",
        host_calls_common::run(&runtime, &lease, &json!([{"op": "config.get"}])),
    )
    .await;
    assert_eq!(out, [json!({"ok": {}})]);
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

#[test]
fn a_package_without_a_plugin_entry_is_refused_with_exact_texts() {
    let root = TempDir::new("pkg-bad");
    let dir = std::fs::canonicalize(root.path()).unwrap();
    let err = PluginManifest::load(&dir).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "Invalid plugin manifest: cannot read {}/package.json: ",
            dir.display()
        )),
        "{err}"
    );
    std::fs::write(dir.join("package.json"), r#"{"name":"p"}"#).unwrap();
    assert_eq!(
        PluginManifest::load(&dir).unwrap_err().to_string(),
        format!(
            "Invalid plugin manifest: {}/package.json has no \"paperclipPlugin\" entry (an object naming the manifest and the worker)",
            dir.display()
        )
    );
    std::fs::write(dir.join("package.json"), r#"{"paperclipPlugin":{"worker":"w.js"}}"#).unwrap();
    assert_eq!(
        PluginManifest::load(&dir).unwrap_err().to_string(),
        format!(
            "Invalid plugin manifest: {}/package.json: paperclipPlugin.manifest must be a non-empty path",
            dir.display()
        )
    );
    std::fs::write(
        dir.join("package.json"),
        r#"{"paperclipPlugin":{"manifest":"m.json","worker":7}}"#,
    )
    .unwrap();
    std::fs::write(dir.join("m.json"), "{}").unwrap();
    assert_eq!(
        PluginManifest::load(&dir).unwrap_err().to_string(),
        format!(
            "Invalid plugin manifest: {}/package.json: paperclipPlugin.worker must be a non-empty path",
            dir.display()
        )
    );
}
