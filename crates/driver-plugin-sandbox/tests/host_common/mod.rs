//! Helpers shared by the integration tests: temp dirs, fixture manifests, bounded waits.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};
use std::time::Duration;

use envrt_driver_plugin_sandbox::{PluginManifest, SandboxDriver, SandboxOptions};
use envrt_runtime_core::{AcquireRequest, Environment, EnvironmentRuntime, Lease};

/// A directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("envrt-sbx-test-{tag}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Installs the SDK fixture's node_modules once (scripts/install-sdk-fixture.sh).
pub fn ensure_sdk_fixture() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let dir = fixtures().join("sdk-worker");
        if dir.join("node_modules/@paperclipai/plugin-sdk").exists() {
            return;
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-sdk-fixture.sh");
        let status = std::process::Command::new("bash")
            .arg(script)
            .status()
            .expect("run install-sdk-fixture.sh");
        assert!(
            status.success(),
            "scripts/install-sdk-fixture.sh failed: the SDK fixture needs node, npm and the npm registry"
        );
    });
}

/// The SDK fixture's Paperclip manifest plus how to start it, leases under `root`.
pub fn sdk_manifest(root: &Path) -> PluginManifest {
    ensure_sdk_fixture();
    let dir = fixtures().join("sdk-worker");
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    value["worker"] = serde_json::json!({
        "command": ["node", dir.join("worker.mjs").to_str().unwrap()],
        "env": {"ENVRT_FIXTURE_ROOT": root.to_str().unwrap()},
    });
    PluginManifest::from_json(&value.to_string()).unwrap()
}

/// A manifest running the python script worker with `mode` flags and extra env.
pub fn script_manifest(mode: &str, extra_env: &[(&str, &str)]) -> PluginManifest {
    let script = fixtures().join("script-worker.py");
    let mut env = serde_json::Map::new();
    env.insert("FAULT_MODE".into(), mode.into());
    for (k, v) in extra_env {
        env.insert((*k).into(), (*v).into());
    }
    let value = serde_json::json!({
        "id": "fault.plugin",
        "worker": {"command": [python(), script.to_str().unwrap()], "env": env},
        "environmentDrivers": [{
            "driverKey": "sandbox",
            "kind": "sandbox_provider",
            "displayName": "Fault sandbox",
            "sandboxCapabilities": {"duplexCommandStream": true},
        }],
    });
    PluginManifest::from_json(&value.to_string()).unwrap()
}

/// The reference worker binary (crate `envrt-sandbox-worker`, a binary of another package):
/// `ENVRT_SANDBOX_WORKER`, or the one built in this target directory. A missing binary, or
/// one older than the worker's or the protocol's sources, fails the test with the command
/// that builds it (`cargo xtask ci` builds the whole workspace, so it is always there).
pub fn reference_worker() -> Option<&'static str> {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    Some(PATH.get_or_init(|| {
        let path = envrt_test_support::sandbox::fresh_worker().unwrap_or_else(|e| panic!("{e}"));
        path.to_string_lossy().into_owned()
    }))
}

/// A manifest running the reference worker with leases under `root`.
pub fn reference_manifest(root: &Path) -> Option<PluginManifest> {
    let worker = reference_worker()?;
    Some(envrt_driver_plugin_sandbox::reference_manifest(Path::new(worker), root))
}

/// Host pids of processes whose argv is exactly `argv`.
pub fn pids_with_argv(argv: &[&str]) -> Vec<u32> {
    let wanted: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read(entry.path().join("cmdline")).is_ok_and(|c| c == wanted) && alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// The system python (not a shim that would add its own environment).
pub fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// A runtime with `driver` registered and one active environment `env-1` using it.
pub async fn runtime_with(driver: Arc<SandboxDriver>) -> EnvironmentRuntime {
    use envrt_runtime_core::EnvironmentDriver as _;
    let runtime = EnvironmentRuntime::new();
    let key = driver.key().to_owned();
    runtime.register_driver(driver);
    runtime
        .put_environment(Environment::new("env-1", "Sandbox", key))
        .await
        .unwrap();
    runtime
}

pub async fn acquire(runtime: &EnvironmentRuntime) -> Lease {
    let mut request = AcquireRequest::new("env-1", "co-1");
    request.run_id = Some("run-1".into());
    runtime.acquire_lease(request).await.unwrap()
}

pub async fn start(manifest: PluginManifest, options: SandboxOptions) -> Arc<SandboxDriver> {
    Arc::new(SandboxDriver::start(manifest, options).await.unwrap())
}

/// Whether a pid is alive (zombies count as dead).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(status) => !status.lines().any(|l| l.starts_with("State:") && l.contains('Z')),
        Err(_) => false,
    }
}

/// Waits (bounded) until `pid` is gone; returns whether it is.
pub async fn wait_gone(pid: u32, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    !alive(pid)
}

/// Bounds any await in a test.
pub async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within 60 s"))
}

/// Waits (bounded) until a worker other than `old_pid` serves: calls made during the
/// restart backoff fail at once, so a test that wants the restarted worker waits here.
pub async fn restarted(driver: &SandboxDriver, old_pid: u32) {
    bounded("the restarted worker", async {
        while driver.worker_pid().is_none_or(|pid| pid == old_pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}
