//! The sandbox target: the plugin driver over the reference worker (found beside this
//! binary), a lease on it, and the bare `bwrap` with the worker's own flags that its
//! baselines run.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use envrt_driver_plugin_sandbox::{DuplexLimits, PluginManifest, RouteSlots, SandboxDriver, SandboxOptions};
use envrt_runtime_core::JsonMap;

use crate::facade::Leased;
use crate::report::Row;

/// The `PATH` the worker gives bwrap and every sandboxed command.
pub(crate) use envrt_sandbox_worker::{INIT_PATH, SANDBOX_PATH};

/// The worker binary: beside this one (`cargo xtask bench` builds both), or
/// `ENVRT_SANDBOX_WORKER`.
pub(crate) fn worker_path() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("ENVRT_SANDBOX_WORKER") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let path = exe.with_file_name("envrt-sandbox-worker");
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "n/a (worker binary missing: build it with cargo build --release -p envrt-sandbox-worker; looked for {})",
            path.display()
        ))
    }
}

/// A sandbox driver over the reference worker with leases under `root`, and a lease.
/// Duplex routes may carry more than the default 256 MiB (the 1 GiB rows); every other
/// bound is the default: the reference worker takes the `envrt.dataPlane` extension,
/// whose flow control keeps unread output within the 384 KiB buffered bound.
pub(crate) async fn open(root: &Path) -> Result<(Leased, Arc<SandboxDriver>), String> {
    open_with(root, RouteSlots::global(), SandboxOptions::default().duplex_timeout).await
}

/// [`open`] with a route ceiling and a duplex timeout of its own.
pub(crate) async fn open_with(
    root: &Path,
    route_slots: Arc<RouteSlots>,
    duplex_timeout: Duration,
) -> Result<(Leased, Arc<SandboxDriver>), String> {
    let worker = worker_path()?;
    let manifest = serde_json::json!({
        "id": "envrt.bench.sandbox",
        "worker": {"command": [worker.display().to_string(), "--root", root.display().to_string()]},
        "environmentDrivers": [{
            "driverKey": "sandbox",
            "kind": "sandbox_provider",
            "displayName": "Bench sandbox",
            "sandboxCapabilities": {"duplexCommandStream": true},
        }],
    });
    let manifest = PluginManifest::from_json(&manifest.to_string()).map_err(|e| e.to_string())?;
    let options = SandboxOptions {
        duplex_limits: DuplexLimits {
            max_total_bytes: u64::MAX,
            ..Default::default()
        },
        route_slots,
        duplex_timeout,
        ..Default::default()
    };
    let driver = Arc::new(
        SandboxDriver::start(manifest, options)
            .await
            .map_err(|e| e.to_string())?,
    );
    match Leased::open(driver.clone(), JsonMap::new()).await {
        Ok(leased) => Ok((leased, driver)),
        Err(e) => {
            driver.shutdown().await;
            Err(e)
        }
    }
}

pub(crate) async fn close(leased: Leased, driver: Arc<SandboxDriver>) {
    leased.close().await;
    driver.shutdown().await;
}

pub(crate) fn missing(group: &'static str, number: u8, names: &[String], e: &str) -> Vec<Row> {
    let why = if e.starts_with("n/a") {
        e.to_owned()
    } else {
        format!("error: {e}")
    };
    names
        .iter()
        .map(|n| Row::missing(group, number, n.clone(), why.clone()))
        .collect()
}

/// The worker's own `bwrap` flags over `lease_dir`, the worker binary bound where the
/// worker binds it: the baseline runs exactly what the worker runs.
pub(crate) fn bwrap_args(lease_dir: &Path, worker: &Path) -> Vec<String> {
    envrt_sandbox_worker::bwrap_options(lease_dir, "/workspace", worker)
}

/// A bare `bwrap` run of `argv` with the worker's flags and environment, output
/// collected.
pub(crate) async fn bare_bwrap(args: &[String], argv: &[&str], user: Option<u32>) -> Result<(), String> {
    let mut command = tokio::process::Command::new("bwrap");
    if let Some(id) = user {
        command.uid(id).gid(id);
    }
    let out = command
        .args(args)
        .args(argv)
        .env_clear()
        .env("PATH", SANDBOX_PATH)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("bwrap: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "bare bwrap exited {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
