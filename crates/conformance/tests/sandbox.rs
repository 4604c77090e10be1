//! The conformance suite against the plugin `sandbox` driver (`cargo xtask conformance
//! --driver sandbox`): the bubblewrap reference worker, and the worker written with
//! `@paperclipai/plugin-sdk` (text-only execute, no half-close), loaded from its manifest
//! as Paperclip publishes it (`entrypoints.worker`, run with `node`). With
//! `ENVRT_WORKER_MANIFEST` set (`cargo xtask conformance --manifest … [--worker …]`), the
//! suite runs against that external worker instead: `ENVRT_WORKER_COMMAND` gives its argv,
//! or the manifest's own `worker.command` / `entrypoints.worker` does.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use envrt_conformance::{
    LeftoversFuture, LeftoversProbe, NotStarted, ResourceFuture, ResourceProbe, Suite, Target, run_suites_with,
};
use envrt_driver_plugin_sandbox::{PluginManifest, SandboxDriver, SandboxOptions};
use envrt_test_support::Component;

mod egress_host;

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

/// A lease's resource is the directory named by its provider lease id under the root
/// (both the reference worker and the SDK fixture lay leases out that way).
fn lease_dir_probe(root: PathBuf) -> ResourceProbe {
    Arc::new(move |lease: &envrt_runtime_core::Lease| -> ResourceFuture {
        let dir = lease.provider_lease_id.as_ref().map(|id| root.join(id));
        Box::pin(async move {
            let dir = dir.ok_or("the lease has no provider lease id")?;
            Ok(dir.exists())
        })
    })
}

async fn target_for(manifest: PluginManifest, root: Option<PathBuf>) -> Result<Target, String> {
    target_with(manifest, root, SandboxOptions::default()).await
}

async fn target_with(
    manifest: PluginManifest,
    root: Option<PathBuf>,
    options: SandboxOptions,
) -> Result<Target, String> {
    let withheld = manifest
        .environment_drivers
        .first()
        .and_then(|d| d.sandbox_capabilities)
        .and_then(|c| c.duplex_command_stream)
        != Some(true);
    let driver = SandboxDriver::start(manifest, options)
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
    if withheld {
        target = target.duplex_withheld_by_declaration();
    }
    if let Some(root) = root {
        target = target
            .with_leftovers(leftovers_in(root.clone()))
            .with_resource_probe(lease_dir_probe(root));
    }
    Ok(target)
}

fn reference_manifest(root: &Path, extra_args: &[&str]) -> Result<PluginManifest, String> {
    let mut manifest =
        envrt_driver_plugin_sandbox::reference_manifest(&envrt_test_support::sandbox::built_worker()?, root);
    manifest.worker.command.extend(extra_args.iter().map(|s| s.to_string()));
    Ok(manifest)
}

/// The reference worker's suite; with a test host, its leases' egress proxy resolves
/// names through the host's DNS server and the egress checks reach it.
fn reference_suite(
    root: &Path,
    host: Result<envrt_conformance::EgressHost, String>,
    dns: Option<std::net::SocketAddr>,
    roots: Option<PathBuf>,
) -> Result<Suite, String> {
    let manifest = reference_manifest(root, &[])?;
    let root = root.to_path_buf();
    let options = SandboxOptions {
        egress: Some(envrt_test_support::network::egress_binary()),
        egress_dns: dns,
        egress_roots: roots,
        ..SandboxOptions::default()
    };
    Suite::build(|| async { Ok(target_with(manifest, Some(root), options).await?.with_egress_host(host)) })
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
    // The fixture's manifest is as Paperclip publishes it (entrypoints.worker, no
    // `worker` object): loaded unchanged, it runs `node <fixture>/worker.mjs`.
    let mut manifest = PluginManifest::load(format!("{fixture}/manifest.json")).map_err(|e| e.to_string())?;
    manifest
        .worker
        .env
        .insert("ENVRT_FIXTURE_ROOT".into(), root.to_string_lossy().into_owned());
    let root = root.to_path_buf();
    Suite::build(|| async move {
        Ok(target_for(manifest, Some(root)).await?.with_deviation(
            "execute_drop_kills_tree",
            "the SDK worker does not know the envrt.cancel extension the host sends for a dropped \
             execute, so the command it started runs on until it ends by itself",
        ))
    })
}

fn external_suite(command: Option<&str>, manifest_path: &str) -> Result<Suite, String> {
    let mut manifest = PluginManifest::load(manifest_path).map_err(|e| e.to_string())?;
    if let Some(command) = command {
        // The manifest's declared worker environment (worker.env) is kept.
        manifest.worker.command = command.split_whitespace().map(String::from).collect();
    }
    Suite::build(|| target_for(manifest, None))
}

fn main() {
    let external = std::env::var("ENVRT_WORKER_MANIFEST").ok();
    // An external worker was asked for explicitly: never skip it.
    let required = external.is_some() || envrt_test_support::any_required(&[Component::Docker, Component::Sandbox]);
    let roots = [0; 3].map(|_| tempfile::tempdir().expect("root"));
    // Kept until the suites end: the egress checks reach it.
    let (test_host, egress, https_roots) = if external.is_none() {
        egress_host::make_with_roots()
    } else {
        (None, Err("an external worker is checked".into()), None)
    };
    let dns = test_host.as_ref().map(|host| host.dns());
    let mut suites: Vec<(&str, Result<Suite, String>)> = match &external {
        Some(manifest) => {
            let command = std::env::var("ENVRT_WORKER_COMMAND").ok();
            vec![("external worker", external_suite(command.as_deref(), manifest))]
        }
        None => vec![
            (
                "driver_sandbox (reference worker)",
                reference_suite(roots[0].path(), egress, dns, https_roots),
            ),
            ("driver_fixture (SDK worker)", sdk_suite(roots[1].path())),
        ],
    };
    if external.is_none() {
        match refusal_suites(roots[2].path()) {
            Ok(pair) => suites.extend(pair.map(|s| ("refusal suites", Ok(s)))),
            Err(error) => suites.push(("refusal suites", Err(error))),
        }
    }
    let mut ready = Vec::new();
    let mut not_started = Vec::new();
    for (name, suite) in suites {
        match suite {
            Ok(suite) => ready.push(suite),
            Err(reason) => {
                if !required {
                    eprintln!("\n*** SKIPPED: {name}: {reason} ***\n");
                }
                not_started.push(NotStarted {
                    suite: name.to_owned(),
                    reason,
                    skipped: !required,
                });
            }
        }
    }
    let passed = run_suites_with(ready, not_started);
    drop((roots, test_host));
    std::process::exit(if passed { 0 } else { 101 });
}
