//! Row 7 on Docker and the sandbox: 256 concurrent executes of `true` on one lease
//! (`scale-exec-docker`, `scale-exec-sandbox`) against 256 concurrent bare calls doing
//! the same work:
//!
//! - Docker: the bare Engine API round of row 2 through bollard (create exec, start
//!   attached and read to the end, inspect until the exit is recorded) on the same
//!   container, from one client (one connection pool), as the driver has.
//! - Sandbox: `bwrap` with the worker's own flags running `true` under the worker binary's
//!   init role, spawned directly (row 3's "bare bwrap via worker init"): that is the whole
//!   of what the worker does per execute, without the host, the JSON-RPC pipe and the
//!   worker's bookkeeping in between.
//!
//! Waves of 256 alternate between ours and the bare calls; throughput is operations over
//! the waves' wall time, latency the p50 of every operation.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Config;
use crate::measure::percentile_ms;
use crate::report::{Figure, Row, Target};

/// Concurrent executes per wave.
const CONCURRENCY: usize = 256;

type Op = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// The rows of both drivers (those `config` selects).
pub(crate) async fn rows(config: &Config) -> Vec<Row> {
    let mut rows = Vec::new();
    if config.wants("scale-exec-docker", 7) {
        rows.extend(docker(config).await);
    }
    if config.wants("scale-exec-sandbox", 7) {
        rows.extend(sandbox(config).await);
    }
    rows
}

fn name(driver: &str) -> String {
    format!("{driver} execute ×{CONCURRENCY} concurrent")
}

/// `waves` waves of each, alternating; (ops/s, p50 ms) of ours and of the bare calls.
async fn measure(ours: Op, bare: Op, waves: usize) -> Result<[(f64, f64); 2], String> {
    let ops = [ours, bare];
    let mut latencies = [Vec::new(), Vec::new()];
    let mut busy = [Duration::ZERO; 2];
    // One untimed wave of each first: connections, caches, the worker's first sandboxes.
    for wave in 0..(waves + 1) * 2 {
        let which = wave % 2;
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..CONCURRENCY {
            let op = Arc::clone(&ops[which]);
            tasks.spawn(async move {
                let t = Instant::now();
                op().await?;
                Ok::<_, String>(t.elapsed())
            });
        }
        let mut times = Vec::with_capacity(CONCURRENCY);
        let mut failed = None;
        while let Some(joined) = tasks.join_next().await {
            match joined.map_err(|e| e.to_string()).and_then(|r| r) {
                Ok(t) => times.push(t),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        if let Some(e) = failed {
            return Err(format!("{} call: {e}", ["our", "a bare"][which]));
        }
        if wave >= 2 {
            busy[which] += start.elapsed();
            latencies[which].extend(times);
        }
    }
    let figure = |i: usize| {
        (
            latencies[i].len() as f64 / busy[i].as_secs_f64(),
            percentile_ms(&latencies[i], 50.0),
        )
    };
    Ok([figure(0), figure(1)])
}

fn rows_of(group: &'static str, driver: &str, bare: &str, measured: Result<[(f64, f64); 2], String>) -> Vec<Row> {
    let name = name(driver);
    match measured {
        Ok([ours, base]) => vec![
            Row::new(group, 7, format!("{name}: throughput"), Figure::ops(ours.0))
                .baseline(bare, Figure::ops(base.0))
                .target(Target::RatioAtLeast(0, 0.9))
                .note(format!("{CONCURRENCY} at once on one lease, in waves alternating with {CONCURRENCY} {bare}")),
            Row::new(group, 7, format!("{name}: p50 latency"), Figure::ms(ours.1)).baseline(bare, Figure::ms(base.1)),
        ],
        Err(e) => vec![Row::missing(group, 7, name, if e.starts_with("n/a") { e } else { format!("error: {e}") })],
    }
}

async fn docker(config: &Config) -> Vec<Row> {
    const GROUP: &str = "scale-exec-docker";
    #[cfg(feature = "docker")]
    {
        let measured = docker_measure(config).await;
        rows_of(GROUP, "docker", "bare Engine API calls", measured)
    }
    #[cfg(not(feature = "docker"))]
    {
        let _ = config;
        vec![Row::missing(GROUP, 7, name("docker"), crate::facade::DRIVER_MISSING)]
    }
}

#[cfg(feature = "docker")]
async fn docker_measure(config: &Config) -> Result<[(f64, f64); 2], String> {
    use envrt_driver_docker::{DockerConfig, DockerDriver};
    use envrt_runtime_core::JsonMap;

    let driver = DockerDriver::connect(DockerConfig::default())
        .await
        .map_err(|e| format!("n/a (no engine): {e}"))?;
    let mut env = JsonMap::new();
    env.insert("image".into(), crate::docker::IMAGE.into());
    let leased = Arc::new(crate::facade::Leased::open(Arc::new(driver), env).await?);
    let container = leased.provider_lease_id.clone().unwrap_or_default();
    let bare = crate::docker::imp::connect_bare();
    let measured = match bare {
        Ok(bare) => {
            let l = Arc::clone(&leased);
            let ours: Op = Arc::new(move || {
                let l = Arc::clone(&l);
                Box::pin(async move { l.run(&["true"]).await })
            });
            let bare: Op = Arc::new(move || {
                let (bare, container) = (bare.clone(), container.clone());
                Box::pin(async move { crate::docker::imp::bare_exec(&bare, &container, &["true"]).await })
            });
            measure(ours, bare, config.waves()).await
        }
        Err(e) => Err(e),
    };
    if let Ok(leased) = Arc::try_unwrap(leased) {
        leased.close().await;
    }
    measured
}

async fn sandbox(config: &Config) -> Vec<Row> {
    const GROUP: &str = "scale-exec-sandbox";
    #[cfg(feature = "sandbox")]
    {
        let measured = sandbox_measure(config).await;
        rows_of(GROUP, "sandbox", "bare bwrap via worker init", measured)
    }
    #[cfg(not(feature = "sandbox"))]
    {
        let _ = config;
        vec![Row::missing(GROUP, 7, name("sandbox"), crate::facade::DRIVER_MISSING)]
    }
}

#[cfg(feature = "sandbox")]
async fn sandbox_measure(config: &Config) -> Result<[(f64, f64); 2], String> {
    use crate::sandbox::imp;
    use envrt_sandbox_worker::INIT_PATH;

    let scratch = crate::measure::Scratch::new("1g")?;
    let worker = imp::worker_path()?;
    let bare_dir = scratch.join("bare");
    std::fs::create_dir_all(&bare_dir).map_err(|e| e.to_string())?;
    let args = Arc::new(imp::bwrap_args(&bare_dir, &worker));
    let (leased, driver) = imp::open(&scratch.join("leases")).await?;
    let leased = Arc::new(leased);
    let l = Arc::clone(&leased);
    let ours: Op = Arc::new(move || {
        let l = Arc::clone(&l);
        Box::pin(async move { l.run(&["true"]).await })
    });
    let bare: Op = Arc::new(move || {
        let args = Arc::clone(&args);
        // 1 (the captured stdout) stands in for the worker's status pipe, as in row 3.
        Box::pin(async move { imp::bare_bwrap(&args, &[INIT_PATH, "--sandbox-init", "1", "--", "true"]).await })
    });
    let measured = measure(ours, bare, config.waves()).await;
    if let Ok(leased) = Arc::try_unwrap(leased) {
        imp::close(leased, driver).await;
    } else {
        driver.shutdown().await;
    }
    measured
}
