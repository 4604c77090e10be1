//! Concurrent executes (row 7, `scale-exec`): on the local target 1, 16 and 256
//! concurrent executes of `true` on one lease vs as many bare spawns; and on Docker and the
//! sandbox 256 concurrent executes of `true` on one lease
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
use crate::baseline;
use crate::facade::{Leased, run_on};
use crate::measure::{percentile_ms, rss_kib};
use crate::report::{Figure, Row, Target};
use crate::targets::local::Local;

/// Concurrent executes per wave.
const CONCURRENCY: usize = 256;

type Op = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// Row 7: 1, 16 and 256 concurrent executes of `true` on one lease vs as many bare spawns.
pub(crate) async fn local(config: &Config) -> Vec<Row> {
    let local = match Local::open(None).await {
        Ok(l) => l,
        Err(e) => return vec![Row::missing("scale-exec", 7, "concurrent local executes", e)],
    };
    let mut rows = Vec::new();
    for concurrency in [1usize, 16, 256] {
        let name = format!("local execute ×{concurrency} concurrent");
        match concurrent(&local.leased, concurrency, config.waves()).await {
            Ok([ours, bare]) => {
                let target = if concurrency == 256 {
                    Target::RatioAtLeast(0, 0.9)
                } else {
                    Target::None
                };
                rows.push(
                    Row::new("scale-exec", 7, format!("{name}: throughput"), Figure::ops(ours.0))
                        .baseline("bare spawns", Figure::ops(bare.0))
                        .floor_is(0)
                        .target(target)
                        .note(format!(
                            "the bench process's resident memory meanwhile: {:.0} MiB",
                            rss_kib() / 1024.0
                        )),
                );
                rows.push(
                    Row::new("scale-exec", 7, format!("{name}: p50 latency"), Figure::ms(ours.1))
                        .baseline("bare spawns", Figure::ms(bare.1))
                        .floor_is(0),
                );
            }
            Err(e) => rows.push(Row::missing("scale-exec", 7, name, format!("error: {e}"))),
        }
    }
    local.leased.close().await;
    rows
}

/// `concurrency` workers each run `true` in sequence, for at least 64 operations per wave;
/// waves alternate between the facade and bare spawns. Returns (ops/s, p50 ms) for each.
async fn concurrent(leased: &Leased, concurrency: usize, waves: usize) -> Result<[(f64, f64); 2], String> {
    let per_worker = (64 / concurrency).max(1);
    let mut latencies = [Vec::new(), Vec::new()];
    let mut busy = [Duration::ZERO; 2];
    let mut ops = [0usize; 2];
    for wave in 0..waves * 2 {
        let which = wave % 2;
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..concurrency {
            let runtime = Arc::clone(&leased.runtime);
            let lease = leased.lease.clone();
            tasks.spawn(async move {
                let mut times = Vec::with_capacity(per_worker);
                for _ in 0..per_worker {
                    let t = Instant::now();
                    if which == 0 {
                        run_on(&runtime, &lease, &["true"]).await?;
                    } else {
                        baseline::spawn("true", &[]).await?;
                    }
                    times.push(t.elapsed());
                }
                Ok::<_, String>(times)
            });
        }
        while let Some(joined) = tasks.join_next().await {
            let times = joined.map_err(|e| e.to_string())??;
            ops[which] += times.len();
            latencies[which].extend(times);
        }
        busy[which] += start.elapsed();
    }
    let figure = |i: usize| {
        (
            ops[i] as f64 / busy[i].as_secs_f64(),
            percentile_ms(&latencies[i], 50.0),
        )
    };
    Ok([figure(0), figure(1)])
}

/// The rows of Docker and the sandbox (those `config` selects).
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

/// CPU time (ms) of a process from `/proc/PID/stat`: its own (user + system, all threads)
/// and that of its waited-for children; zeros when unreadable.
fn cpu_ms(pid: &str) -> [f64; 2] {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces) start at `state`.
    let fields: Vec<f64> = text
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().map(|f| f.parse().unwrap_or(0.0)).collect())
        .unwrap_or_default();
    let tick_ms = 1000.0 / 100.0;
    let at = |i: usize| fields.get(i).copied().unwrap_or(0.0) * tick_ms;
    // utime, stime, cutime, cstime are fields 14–17, i.e. 11–14 after `state` (field 3).
    [at(11) + at(12), at(13) + at(14)]
}

/// CPU milliseconds per operation of each op kind: the bench process's own, its
/// children's, and (for each pid in `watch`) that process's own and its children's.
type Cpu = Vec<Vec<f64>>;

/// `waves` waves of each op, in turn; (ops/s, p50 ms) of each (ours first), and the CPU
/// time per operation (see [`Cpu`]) of the processes in `watch`.
async fn measure(ops: Vec<Op>, waves: usize, watch: &[String]) -> Result<(Vec<(f64, f64)>, Cpu), String> {
    let n = ops.len();
    let mut latencies = vec![Vec::new(); n];
    let mut busy = vec![Duration::ZERO; n];
    let pids: Vec<String> = std::iter::once("self".to_owned())
        .chain(watch.iter().cloned())
        .collect();
    let read = || pids.iter().flat_map(|p| cpu_ms(p)).collect::<Vec<f64>>();
    let mut cpu = vec![vec![0.0; pids.len() * 2]; n];
    // One untimed wave of each first: connections, caches, the worker's first sandboxes.
    for wave in 0..(waves + 1) * n {
        let which = wave % n;
        let cpu_before = read();
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
            return Err(format!("{} call: {e}", if which == 0 { "our" } else { "a bare" }));
        }
        if wave >= n {
            busy[which] += start.elapsed();
            latencies[which].extend(times);
            for (total, (after, before)) in cpu[which].iter_mut().zip(read().into_iter().zip(cpu_before)) {
                *total += (after - before) / (waves * CONCURRENCY) as f64;
            }
        }
    }
    let figure = |i: usize| {
        (
            latencies[i].len() as f64 / busy[i].as_secs_f64(),
            percentile_ms(&latencies[i], 50.0),
        )
    };
    Ok(((0..n).map(figure).collect(), cpu))
}

fn rows_of(
    group: &'static str,
    driver: &str,
    bare: &[&str],
    measured: Result<(Vec<(f64, f64)>, Cpu), String>,
    cpu_note: impl Fn(&Cpu) -> String,
) -> Vec<Row> {
    let name = name(driver);
    match measured {
        Ok((m, cpu)) => {
            let mut throughput = Row::new(group, 7, format!("{name}: throughput"), Figure::ops(m[0].0))
                .target(Target::RatioAtLeast(0, 0.9))
                .note(format!(
                    "{CONCURRENCY} at once on one lease, in waves taking turns with {CONCURRENCY} of each baseline; {}",
                    cpu_note(&cpu)
                ));
            let mut latency = Row::new(group, 7, format!("{name}: p50 latency"), Figure::ms(m[0].1));
            for (b, figures) in bare.iter().zip(&m[1..]) {
                throughput = throughput.baseline(*b, Figure::ops(figures.0));
                latency = latency.baseline(*b, Figure::ms(figures.1));
            }
            // The sandbox's first baseline is bare bwrap with the worker's arguments, its
            // floor; Docker's is the bare Engine API, not the floor (nsenter), which is
            // measured on the single-execute row only.
            if group.ends_with("sandbox") {
                vec![throughput.floor_is(0), latency.floor_is(0)]
            } else {
                let why = "nsenter is measured on row 2 only";
                vec![throughput.no_floor(why), latency.no_floor(why)]
            }
        }
        Err(e) => vec![Row::missing(
            group,
            7,
            name,
            if e.starts_with("n/a") { e } else { format!("error: {e}") },
        )],
    }
}

async fn docker(config: &Config) -> Vec<Row> {
    const GROUP: &str = "scale-exec-docker";
    {
        let measured = docker_measure(config).await;
        rows_of(GROUP, "docker", &["bare Engine API calls"], measured, |cpu| {
            format!(
                "CPU ms per execute in the bench process: ours {:.2}, bare {:.2}",
                cpu[0][0], cpu[1][0]
            )
        })
    }
}

async fn docker_measure(config: &Config) -> Result<(Vec<(f64, f64)>, Cpu), String> {
    use envrt_driver_docker::{DockerConfig, DockerDriver};
    use envrt_runtime_core::JsonMap;

    let driver = DockerDriver::connect(DockerConfig::default())
        .await
        .map_err(|e| format!("n/a (no engine): {e}"))?;
    let mut env = JsonMap::new();
    env.insert("image".into(), crate::targets::docker::IMAGE.into());
    let leased = Arc::new(crate::facade::Leased::open(Arc::new(driver), env).await?);
    let container = leased.provider_lease_id.clone().unwrap_or_default();
    let bare = crate::targets::docker::connect_bare();
    let measured = match bare {
        Ok(bare) => {
            let l = Arc::clone(&leased);
            let ours: Op = Arc::new(move || {
                let l = Arc::clone(&l);
                Box::pin(async move { l.run(&["true"]).await })
            });
            let bare: Op = Arc::new(move || {
                let (bare, container) = (bare.clone(), container.clone());
                Box::pin(async move { crate::targets::docker::bare_exec(&bare, &container, &["true"]).await })
            });
            measure(vec![ours, bare], config.waves(), &[]).await
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
    {
        let measured = sandbox_measure(config).await;
        rows_of(
            GROUP,
            "sandbox",
            &["bare bwrap via worker init", "the same as the sandbox user"],
            measured,
            |cpu| {
                format!(
                    "CPU ms per execute — ours: host {:.2}, worker {:.2}, sandboxes (the worker's children) {:.2}; \
                     bare: bench {:.2}, bwrap children {:.2}; as the sandbox user: bench {:.2}, children {:.2}",
                    cpu[0][0], cpu[0][2], cpu[0][3], cpu[1][0], cpu[1][1], cpu[2][0], cpu[2][1]
                )
            },
        )
    }
}

async fn sandbox_measure(config: &Config) -> Result<(Vec<(f64, f64)>, Cpu), String> {
    use std::os::unix::fs::PermissionsExt;

    use crate::targets::sandbox as target;
    use envrt_sandbox_worker::INIT_PATH;

    let scratch = crate::measure::Scratch::new("1g")?;
    let worker = target::worker_path()?;
    // The bare runs' lease directory, reachable by the sandbox user too (the scratch
    // tmpfs is root's alone).
    let bare_dir = tempfile::Builder::new()
        .prefix("envrt-bench-burst-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    std::fs::set_permissions(bare_dir.path(), std::fs::Permissions::from_mode(0o777)).map_err(|e| e.to_string())?;
    let args = Arc::new(target::bwrap_args(bare_dir.path(), &worker));
    let (leased, driver) = target::open(&scratch.join("leases")).await?;
    let leased = Arc::new(leased);
    let l = Arc::clone(&leased);
    let ours: Op = Arc::new(move || {
        let l = Arc::clone(&l);
        Box::pin(async move { l.run(&["true"]).await })
    });
    // 1 (the captured stdout) stands in for the worker's status pipe, as in row 3.
    let init = [INIT_PATH, "--sandbox-init", "1", "--", "true"];
    let bare_args = Arc::clone(&args);
    let bare: Op = Arc::new(move || {
        let args = Arc::clone(&bare_args);
        Box::pin(async move { target::bare_bwrap(&args, &init, None).await })
    });
    // The worker, as root, runs bwrap as the unprivileged sandbox user (65534): the same
    // spawn under that identity.
    let as_user: Op = Arc::new(move || {
        let args = Arc::clone(&args);
        Box::pin(async move { target::bare_bwrap(&args, &init, Some(65534)).await })
    });
    let worker_pid = driver.worker_pid().map(|p| p.to_string()).unwrap_or_default();
    let measured = measure(vec![ours, bare, as_user], config.waves(), &[worker_pid]).await;
    if let Ok(leased) = Arc::try_unwrap(leased) {
        target::close(leased, driver).await;
    } else {
        driver.shutdown().await;
    }
    measured
}
