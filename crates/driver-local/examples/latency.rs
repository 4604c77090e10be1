//! Measures the local driver: execute round trips of `true`, and throughput of stdin to
//! stdout through `cat`. Run with `cargo run --release -p envrt-driver-local --example latency`
//! (`ENVRT_BENCH_CGROUPS=0` measures without the per-command cgroup).

use std::sync::Arc;
use std::time::{Duration, Instant};

use envrt_driver_local::{LocalConfig, LocalDriver};
use envrt_runtime_core::{AcquireRequest, Environment, EnvironmentRuntime, ExecuteRequest, LeaseStatus};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::env::temp_dir().join(format!("envrt-local-bench-{}", std::process::id()));
    let driver = Arc::new(LocalDriver::new(LocalConfig {
        root: Some(root.clone()),
        cgroups: std::env::var("ENVRT_BENCH_CGROUPS").as_deref() != Ok("0"),
        ..Default::default()
    })?);
    let runtime = EnvironmentRuntime::new();
    runtime.register_driver(driver);
    runtime.put_environment(Environment::new("e", "Local", "local")).await?;
    let lease = runtime.acquire_lease(AcquireRequest::new("e", "bench")).await?;

    let mut samples = Vec::new();
    for _ in 0..500 {
        let started = Instant::now();
        let out = runtime.execute(&lease.id, ExecuteRequest::new("true", [""; 0])).await?;
        assert_eq!(out.exit_code, Some(0));
        samples.push(started.elapsed());
    }
    samples.sort();
    let pct = |p: usize| samples[samples.len() * p / 100];
    println!(
        "execute `true` x{}: p50 {:?}, p90 {:?}, p99 {:?}",
        samples.len(),
        pct(50),
        pct(90),
        pct(99)
    );

    let concurrent = Instant::now();
    let runs = (0..200).map(|_| runtime.execute(&lease.id, ExecuteRequest::new("true", [""; 0])));
    for r in futures::future::join_all(runs).await {
        r?;
    }
    let total = concurrent.elapsed();
    println!(
        "200 concurrent `true`: {total:?} ({:.0}/s)",
        200.0 / total.as_secs_f64()
    );

    let size = 256 * 1024 * 1024;
    let mut request = ExecuteRequest::new("cat", [""; 0]);
    request.stdin = Some(vec![0x5a; size]);
    request.max_output_bytes = Some(size);
    let started = Instant::now();
    let out = runtime.execute(&lease.id, request).await?;
    let took = started.elapsed().max(Duration::from_micros(1));
    assert_eq!(out.stdout.len(), size);
    println!(
        "256 MiB stdin -> cat -> stdout: {took:?} ({:.0} MiB/s)",
        256.0 / took.as_secs_f64()
    );

    runtime.release_lease(&lease.id, LeaseStatus::Released).await?;
    std::fs::remove_dir(&root)?;
    Ok(())
}
