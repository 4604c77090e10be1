//! Measures a few costs of the Docker driver against the local engine: acquire, a trivial
//! execute, a timed-out execute with its tree kill, a 64 MiB sync in and out, a duplex
//! round trip, and release. Run: `cargo run --release -p envrt-driver-docker --example
//! docker_latency` (needs the `envrt-test:latest` image).

use std::sync::Arc;
use std::time::{Duration, Instant};

use envrt_driver_docker::{DockerConfig, DockerDriver};
use envrt_runtime_core::{
    AcquireRequest, Environment, EnvironmentRuntime, ExecuteRequest, LeaseStatus, SyncFile, SyncOperation,
};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = DockerConfig::default();
    config
        .extra_labels
        .insert("envrt.example".into(), uuid::Uuid::new_v4().to_string());
    let driver = Arc::new(DockerDriver::connect(config).await?);
    let runtime = EnvironmentRuntime::new();
    runtime.register_driver(driver.clone());
    let mut env_config = serde_json::Map::new();
    env_config.insert("image".into(), "envrt-test:latest".into());
    runtime
        .put_environment(Environment::new("bench", "Bench", "docker").with_config(env_config))
        .await?;
    let result = run(&runtime).await;
    driver.reap_orphans(&[]).await?;
    result
}

async fn run(runtime: &EnvironmentRuntime) -> Result<(), Box<dyn std::error::Error>> {
    let t = Instant::now();
    let lease = runtime.acquire_lease(AcquireRequest::new("bench", "acme")).await?;
    println!("acquire: {:?}", t.elapsed());
    let n = 20;
    let t = Instant::now();
    for _ in 0..n {
        runtime.execute(&lease.id, ExecuteRequest::new("true", [""; 0])).await?;
    }
    println!("execute `true`: {:?} each ({n} runs)", t.elapsed() / n);
    let mut request = ExecuteRequest::new("sh", ["-c", "sleep 1000 & sleep 1001"]);
    request.timeout = Some(Duration::from_millis(200));
    let t = Instant::now();
    runtime.execute(&lease.id, request).await?;
    println!("timeout 200 ms + tree kill: {:?}", t.elapsed());
    let dir = tempfile::tempdir()?;
    let data: Vec<u8> = (0..64u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
        .collect();
    std::fs::create_dir(dir.path().join("src"))?;
    std::fs::write(dir.path().join("src/blob"), &data)?;
    let op = |file| SyncOperation {
        operation_id: "op".into(),
        files: vec![file],
        post_upload_commands: Vec::new(),
    };
    let t = Instant::now();
    runtime
        .sync_in(
            &lease.id,
            &[op(SyncFile::directory(
                dir.path().join("src").to_str().unwrap(),
                "data",
            ))],
        )
        .await?;
    println!("sync in 64 MiB: {:?}", t.elapsed());
    let t = Instant::now();
    runtime
        .sync_out(
            &lease.id,
            &[op(SyncFile::directory(
                "data",
                dir.path().join("back").to_str().unwrap(),
            ))],
        )
        .await?;
    println!("sync out 64 MiB: {:?}", t.elapsed());
    let channel = runtime.open_duplex_channel(&lease.id, &["cat".to_string()]).await?;
    let t = Instant::now();
    for _ in 0..n {
        channel.write(b"ping\n").await?;
        channel.read().await?;
    }
    println!("duplex cat round trip: {:?} each", t.elapsed() / n);
    channel.close_input().await?;
    channel.wait().await?;
    channel.close().await?;
    let t = Instant::now();
    runtime.release_lease(&lease.id, LeaseStatus::Released).await?;
    println!("release: {:?}", t.elapsed());
    Ok(())
}
