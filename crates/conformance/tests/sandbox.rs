//! The conformance suite against the plugin `sandbox` driver (`cargo xtask conformance
//! --driver sandbox`): the bubblewrap reference worker, and the worker written with
//! `@paperclipai/plugin-sdk` (text-only execute, no half-close). With
//! `ENVRT_WORKER_COMMAND` and `ENVRT_WORKER_MANIFEST` set (`cargo xtask conformance
//! --worker … --manifest …`), the suite runs against that external worker instead.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use envrt_conformance::{LeftoversFuture, LeftoversProbe, Suite, Target, run_suites};
use envrt_driver_plugin_sandbox::{PluginManifest, SandboxDriver, SandboxOptions};

const CRATE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../driver-plugin-sandbox");

/// Lists what is left in a worker's lease root.
fn leftovers_in(root: PathBuf) -> LeftoversProbe {
    Arc::new(move || -> LeftoversFuture {
        let root = root.clone();
        Box::pin(async move {
            let entries = match std::fs::read_dir(&root) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(format!("{}: {e}", root.display())),
            };
            Ok(entries
                .filter_map(|e| e.ok())
                .map(|e| format!("lease dir {}", e.path().display()))
                .collect())
        })
    })
}

async fn target_for(manifest: PluginManifest, root: Option<PathBuf>) -> Result<Target, String> {
    let driver = SandboxDriver::start(manifest, SandboxOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let methods = driver.supported_methods();
    let mut target = Target::new(Arc::new(driver)).with_cases(8);
    if !methods.contains("environmentExecuteBinary") {
        target = target.text_only();
    }
    if !methods.contains("duplexChannelCloseInput") {
        target = target.without_half_close();
    }
    if let Some(root) = root {
        target = target.with_leftovers(leftovers_in(root));
    }
    Ok(target)
}

fn worker_binary() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var("ENVRT_SANDBOX_WORKER") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let candidate = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("envrt-sandbox-worker"))
        .ok_or("no target directory")?;
    if candidate.exists() {
        Ok(candidate)
    } else {
        Err(format!(
            "{} is not built; run `cargo build -p envrt-driver-plugin-sandbox --bin envrt-sandbox-worker`",
            candidate.display()
        ))
    }
}

fn reference_manifest(root: &Path, extra_args: &[&str]) -> Result<PluginManifest, String> {
    let binary = worker_binary()?;
    let mut manifest =
        PluginManifest::load(format!("{CRATE}/reference-worker.manifest.json")).map_err(|e| e.to_string())?;
    manifest.worker.command = vec![
        binary.to_string_lossy().into_owned(),
        "--root".into(),
        root.to_string_lossy().into_owned(),
    ];
    manifest.worker.command.extend(extra_args.iter().map(|s| s.to_string()));
    Ok(manifest)
}

fn reference_suite(root: &Path) -> Result<Suite, String> {
    let manifest = reference_manifest(root, &[])?;
    let root = root.to_path_buf();
    Suite::build(|| target_for(manifest, Some(root)))
}

/// The capability refusals: the reference worker whose manifest does not declare
/// `duplexCommandStream`, and one started with `--no-duplex` (so it does not advertise
/// `duplexChannelOpen`). Only the honesty and clean-up checks run; `main` asserts that each
/// really takes its refusal path.
fn refusal_suites(root: &Path) -> Result<[Suite; 2], String> {
    let mut undeclared = reference_manifest(root, &[])?;
    let entry = &mut undeclared.environment_drivers[0];
    entry.driver_key = "sandbox_undeclared".into();
    if let Some(declaration) = entry.sandbox_capabilities.as_mut() {
        declaration.duplex_command_stream = None;
    }
    let mut no_duplex = reference_manifest(root, &["--no-duplex"])?;
    no_duplex.environment_drivers[0].driver_key = "sandbox_no_duplex".into();
    let build = |manifest: PluginManifest| {
        Suite::build(|| async {
            Ok(target_for(manifest, Some(root.to_path_buf()))
                .await?
                .only(&["honesty_", "cleanup_"]))
        })
    };
    let undeclared = build(undeclared)?;
    let no_duplex = build(no_duplex)?;
    assert!(
        undeclared.profile().has_duplex && !undeclared.profile().ephemeral.duplex_command_stream,
        "the undeclared worker must offer duplex without the capability"
    );
    assert!(
        !no_duplex.profile().has_duplex,
        "--no-duplex must withdraw the duplex verbs"
    );
    Ok([undeclared, no_duplex])
}

fn sdk_suite(root: &Path) -> Result<Suite, String> {
    let fixture = format!("{CRATE}/tests/fixtures/sdk-worker");
    if !Path::new(&format!("{fixture}/node_modules/@paperclipai/plugin-sdk")).exists() {
        return Err(format!(
            "the SDK fixture is not installed; run {CRATE}/scripts/install-sdk-fixture.sh"
        ));
    }
    // The fixture's manifest is Paperclip's (entrypoints, no `worker`): say how to start it.
    let text = std::fs::read_to_string(format!("{fixture}/manifest.json")).map_err(|e| e.to_string())?;
    let mut json: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    json["worker"] = serde_json::json!({"command": ["node", format!("{fixture}/worker.mjs")]});
    let mut manifest = PluginManifest::from_json(&json.to_string()).map_err(|e| e.to_string())?;
    manifest
        .worker
        .env
        .insert("ENVRT_FIXTURE_ROOT".into(), root.to_string_lossy().into_owned());
    let root = root.to_path_buf();
    Suite::build(|| target_for(manifest, Some(root)))
}

fn external_suite(command: &str, manifest_path: &str) -> Result<Suite, String> {
    let mut manifest = PluginManifest::load(manifest_path).map_err(|e| e.to_string())?;
    manifest.worker.command = command.split_whitespace().map(String::from).collect();
    Suite::build(|| target_for(manifest, None))
}

fn main() {
    // An external worker was asked for explicitly: never skip it.
    let required = std::env::var("ENVRT_WORKER_COMMAND").is_ok()
        || ["ENVRT_REQUIRE_DOCKER", "ENVRT_REQUIRE_SANDBOX"]
            .iter()
            .any(|v| std::env::var(v).as_deref() == Ok("1"));
    let roots = [0; 3].map(|_| tempfile::tempdir().expect("root"));
    let mut suites: Vec<Result<Suite, String>> = match (
        std::env::var("ENVRT_WORKER_COMMAND"),
        std::env::var("ENVRT_WORKER_MANIFEST"),
    ) {
        (Ok(command), Ok(manifest)) => vec![external_suite(&command, &manifest)],
        _ => vec![reference_suite(roots[0].path()), sdk_suite(roots[1].path())],
    };
    if std::env::var("ENVRT_WORKER_COMMAND").is_err() {
        match refusal_suites(roots[2].path()) {
            Ok(pair) => suites.extend(pair.map(Ok)),
            Err(error) => suites.push(Err(error)),
        }
    }
    let mut ready = Vec::new();
    for suite in suites {
        match suite {
            Ok(suite) => ready.push(suite),
            Err(error) if required => {
                eprintln!("the sandbox conformance suite cannot run: {error}");
                std::process::exit(101);
            }
            Err(error) => eprintln!("\n*** SKIPPED: a sandbox conformance suite: {error} ***\n"),
        }
    }
    let passed = run_suites(ready);
    drop(roots);
    std::process::exit(if passed { 0 } else { 101 });
}
