//! Shared helpers of the local driver's integration tests: a runtime with the driver over
//! a private root that must be empty when the test ends, unique markers, and a `/proc`
//! scan for processes that carry a marker.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envrt_driver_local::{LocalConfig, LocalDriver};
use envrt_runtime_core::{
    AcquireRequest, Environment, EnvironmentRuntime, ExecuteRequest, ExecuteResult, Lease, LeasePolicy,
};

/// A runtime with a `local` driver whose workspaces live under a root of their own.
pub struct Harness {
    pub runtime: EnvironmentRuntime,
    pub driver: Arc<LocalDriver>,
    pub root: PathBuf,
}

impl Harness {
    pub async fn new() -> Harness {
        Self::with_config(LocalConfig::default()).await
    }

    pub async fn with_config(mut config: LocalConfig) -> Harness {
        let root = std::env::temp_dir().join(format!("envrt-local-test-{}", uuid::Uuid::new_v4().simple()));
        config.root = Some(root.clone());
        let driver = Arc::new(LocalDriver::new(config).expect("driver"));
        let runtime = EnvironmentRuntime::new();
        runtime.register_driver(driver.clone());
        runtime
            .put_environment(Environment::new("env-local", "Local", "local"))
            .await
            .unwrap();
        let root = driver.root().to_path_buf();
        Harness { runtime, driver, root }
    }

    pub async fn lease(&self) -> Lease {
        self.lease_with(LeasePolicy::Ephemeral).await
    }

    pub async fn lease_with(&self, policy: LeasePolicy) -> Lease {
        let mut request = AcquireRequest::new("env-local", "acme");
        request.run_id = Some("run-1".into());
        request.policy = policy;
        self.runtime.acquire_lease(request).await.expect("acquire")
    }

    pub fn workspace(&self, lease: &Lease) -> PathBuf {
        PathBuf::from(lease.metadata["workspace"].as_str().expect("workspace in metadata"))
    }

    pub async fn run(&self, lease: &Lease, command: &str, args: &[&str]) -> ExecuteResult {
        self.execute(lease, ExecuteRequest::new(command, args.iter().copied()))
            .await
    }

    pub async fn sh(&self, lease: &Lease, script: &str) -> ExecuteResult {
        self.run(lease, "sh", &["-c", script]).await
    }

    /// Executes with a generous bound so that no test can hang.
    pub async fn execute(&self, lease: &Lease, request: ExecuteRequest) -> ExecuteResult {
        bounded(self.runtime.execute(&lease.id, request))
            .await
            .expect("execute")
    }

    /// Names left under the root.
    pub fn leftovers(&self) -> Vec<String> {
        match std::fs::read_dir(&self.root) {
            Ok(entries) => entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Asserts that no lease workspace remains, then removes the root.
    pub fn finish(self) {
        let left = self.leftovers();
        assert!(left.is_empty(), "lease workspaces left behind: {left:?}");
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Awaits `future`, failing the test after 60 s instead of hanging.
pub async fn bounded<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), future)
        .await
        .expect("operation did not finish within 60 s")
}

/// A string no other process on the machine carries.
pub fn marker(tag: &str) -> String {
    format!("envrt-{tag}-{}", uuid::Uuid::new_v4().simple())
}

/// A unique `sleep` duration (seconds) that identifies a process in `/proc`.
pub fn unique_sleep() -> String {
    let n = uuid::Uuid::new_v4().as_u128() % 1_000_000_000;
    format!("3000.{n:09}")
}

/// Pids of live (non-zombie) processes whose command line contains `needle`.
pub fn processes_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if cmdline.windows(needle.len()).any(|w| w == needle.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// Waits (bounded, 10 s) until no process carries `needle`; returns the survivors.
pub async fn survivors(needle: &str) -> Vec<u32> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let found = processes_with(needle);
        if found.is_empty() || Instant::now() > until {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A scratch host directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("envrt-local-host-{tag}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }

    pub fn s(&self, rel: &str) -> String {
        self.0.join(rel).to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chmod")
            .args(["-R", "u+rwx"])
            .arg(&self.0)
            .status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// All names below `dir`, sorted, relative.
pub fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let p = e.path();
                out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    walk(base, &p, out);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}
