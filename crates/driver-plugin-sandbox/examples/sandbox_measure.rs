//! Rough numbers for the sandbox host against the SDK-built fixture worker: start-up,
//! RPC round trip, execute, and duplex throughput. Run after
//! `scripts/install-sdk-fixture.sh`:
//!
//! ```text
//! cargo run --release -p envrt-driver-plugin-sandbox --example sandbox_measure
//! ```

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use envrt_driver_plugin_sandbox::{PluginManifest, SandboxDriver, SandboxOptions};
use envrt_runtime_core::{
    AcquireRequest, Environment, EnvironmentDriver as _, EnvironmentRuntime, ExecuteRequest, LeaseStatus,
};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sdk-worker");
    if !dir.join("node_modules").exists() {
        return Err("run scripts/install-sdk-fixture.sh first".into());
    }
    let root = std::env::temp_dir().join(format!("envrt-measure-{}", std::process::id()));
    let mut manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json"))?)?;
    manifest["worker"] = serde_json::json!({
        "command": ["node", dir.join("worker.mjs")],
        "env": {"ENVRT_FIXTURE_ROOT": root},
    });
    let manifest = PluginManifest::from_json(&manifest.to_string())?;

    let started = Instant::now();
    let driver = Arc::new(SandboxDriver::start(manifest, SandboxOptions::default()).await?);
    println!("start + initialize: {:?}", started.elapsed());

    let n = 2000;
    let t = Instant::now();
    for _ in 0..n {
        driver.health().await?;
    }
    println!("health round trip: {:?} mean over {n}", t.elapsed() / n);

    let runtime = EnvironmentRuntime::new();
    runtime.register_driver(driver.clone());
    runtime
        .put_environment(Environment::new("env-1", "Fixture", driver.key()))
        .await?;
    let lease = runtime.acquire_lease(AcquireRequest::new("env-1", "co-1")).await?;
    let n = 100;
    let t = Instant::now();
    for _ in 0..n {
        runtime.execute(&lease.id, ExecuteRequest::new("true", [""; 0])).await?;
    }
    println!("execute `true`: {:?} mean over {n}", t.elapsed() / n);

    let channel = runtime.open_duplex_channel(&lease.id, &["cat".to_owned()]).await?;
    let total = 32 * 1024 * 1024;
    let block = vec![0x5au8; 64 * 1024];
    let t = Instant::now();
    let writer = async {
        let mut sent = 0;
        while sent < total {
            channel.write(&block).await?;
            sent += block.len();
        }
        Ok::<_, envrt_runtime_core::DriverError>(())
    };
    let reader = async {
        let mut got = 0;
        while got < total {
            match channel.read().await? {
                Some(chunk) => got += chunk.len(),
                None => return Err(envrt_runtime_core::DriverError::other("channel ended early")),
            }
        }
        Ok(())
    };
    tokio::try_join!(writer, reader)?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "duplex cat echo: {} MiB each way in {secs:.2} s = {:.1} MiB/s",
        total >> 20,
        (total >> 20) as f64 / secs
    );
    channel.close().await?;
    runtime.release_lease(&lease.id, LeaseStatus::Released).await?;
    driver.shutdown().await;
    let _ = std::fs::remove_dir_all(root);
    Ok(())
}
