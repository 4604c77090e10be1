//! Rows of the local driver: execute latency (1), stdout streaming (4), sync (6),
//! concurrent executes and lease memory (7).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use envrt_runtime_core::{AcquireRequest, JsonMap, LeaseStatus, SyncFile};
use tokio::io::AsyncReadExt;

use crate::Config;
use crate::baseline::{self, remove};
use crate::facade::{DRIVER_MISSING, Leased, run_on};
use crate::measure::{Scratch, gbps, interleave, median, percentile_ms, rss_kib};
use crate::report::{Figure, Row, Target};

/// A local lease and the driver behind it.
#[cfg_attr(not(feature = "local"), allow(dead_code))]
pub(crate) struct Local {
    pub(crate) leased: Leased,
    #[cfg(feature = "local")]
    driver: Arc<envrt_driver_local::LocalDriver>,
}

impl Local {
    /// A local driver (workspaces under `root`, else its default) and one lease.
    #[cfg(feature = "local")]
    pub(crate) async fn open(root: Option<PathBuf>) -> Result<Local, String> {
        Local::open_contained(root, true).await
    }

    /// [`open`](Self::open), with the per-command cgroups on or off.
    #[cfg(feature = "local")]
    pub(crate) async fn open_contained(root: Option<PathBuf>, cgroups: bool) -> Result<Local, String> {
        let config = envrt_driver_local::LocalConfig {
            root,
            cgroups,
            ..Default::default()
        };
        let driver = Arc::new(envrt_driver_local::LocalDriver::new(config).map_err(|e| e.to_string())?);
        let leased = Leased::open(driver.clone(), JsonMap::new()).await?;
        Ok(Local { leased, driver })
    }

    /// Without the driver crate: the row's "n/a".
    #[cfg(not(feature = "local"))]
    pub(crate) async fn open(_root: Option<PathBuf>) -> Result<Local, String> {
        Err(DRIVER_MISSING.into())
    }

    /// Without the driver crate: the row's "n/a".
    #[cfg(not(feature = "local"))]
    pub(crate) async fn open_contained(_root: Option<PathBuf>, _cgroups: bool) -> Result<Local, String> {
        Err(DRIVER_MISSING.into())
    }

    /// The host path of a lease's workspace.
    #[cfg_attr(not(feature = "local"), allow(unused_variables))]
    fn workspace(&self, lease: &str) -> Result<PathBuf, String> {
        #[cfg(feature = "local")]
        return self.driver.workspace_of(lease).map_err(|e| e.to_string());
        #[cfg(not(feature = "local"))]
        Err(DRIVER_MISSING.into())
    }
}

const EXEC: &str = "exec-local";

/// Row 1: `true` through the facade and the local driver vs a bare tokio spawn.
pub(crate) async fn exec_rows(config: &Config) -> Vec<Row> {
    let name = "local execute `true`";
    let local = match Local::open(None).await {
        Ok(l) => l,
        Err(e) => return vec![Row::missing(EXEC, 1, format!("{name} p50"), e)],
    };
    // The same driver without per-command cgroups, so that the cost of containment shows
    // in the same run (the driver's default is cgroups on wherever they are writable).
    let uncontained = match Local::open_contained(None, false).await {
        Ok(l) => l,
        Err(e) => return vec![Row::missing(EXEC, 1, format!("{name} p50"), e)],
    };
    let l = &local.leased;
    let u = &uncontained.leased;
    let measured = interleave(3, 30, config.exec_rounds(), |i| async move {
        match i {
            0 => l.run(&["true"]).await,
            1 => baseline::spawn("true", &[]).await,
            _ => u.run(&["true"]).await,
        }
    })
    .await;
    local.leased.close().await;
    uncontained.leased.close().await;
    let m = match measured {
        Ok(m) => m,
        Err(e) => return vec![Row::missing(EXEC, 1, format!("{name} p50"), format!("error: {e}"))],
    };
    vec![
        Row::new(EXEC, 1, format!("{name} p50"), Figure::ms(m.p(0, 50.0)))
            .baseline("bare tokio spawn", Figure::ms(m.p(1, 50.0)))
            .baseline("local driver without cgroups", Figure::ms(m.p(2, 50.0)))
            .target(Target::RatioAtMost(0, 1.10))
            .note("\"without cgroups\": `LocalConfig { cgroups: false }`, process groups only"),
        Row::new(EXEC, 1, format!("{name} p99"), Figure::ms(m.p(0, 99.0)))
            .baseline("bare tokio spawn", Figure::ms(m.p(1, 99.0)))
            .baseline("local driver without cgroups", Figure::ms(m.p(2, 99.0))),
    ]
}

/// A bare tokio spawn of `head -c bytes /dev/zero` read through its stdout pipe with
/// 64 KiB reads (what a tokio-based reader can do at best, for comparison).
async fn tokio_pipe(bytes: u64) -> Result<Duration, String> {
    let start = Instant::now();
    let mut child = tokio::process::Command::new("head")
        .args(["-c", &bytes.to_string(), "/dev/zero"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawning head: {e}"))?;
    let mut out = child.stdout.take().ok_or("no stdout")?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen = 0u64;
    loop {
        let n = out.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        seen += n as u64;
    }
    child.wait().await.map_err(|e| e.to_string())?;
    if seen != bytes {
        return Err(format!("tokio pipe: read {seen} of {bytes}"));
    }
    Ok(start.elapsed())
}

/// Row 4: stdout through execute's streaming sink vs a bare pipe.
pub(crate) async fn stdout_rows(config: &Config) -> Vec<Row> {
    let bytes = config.stream_bytes();
    let name = format!("stdout {} MiB via execute sink (local)", bytes >> 20);
    let local = match Local::open(None).await {
        Ok(l) => l,
        Err(e) => return vec![Row::missing("stdout", 4, name, e)],
    };
    let l = &local.leased;
    let measured = interleave(3, 0, config.reps(), |i| async move {
        match i {
            0 => l.stream_stdout(bytes).await.map(|_| ()),
            1 => baseline::pipe(bytes).await.map(|_| ()),
            _ => tokio_pipe(bytes).await.map(|_| ()),
        }
    })
    .await;
    local.leased.close().await;
    match measured {
        Ok(m) => {
            let rate = |i: usize| gbps(bytes, Duration::from_secs_f64(m.p(i, 50.0) / 1e3));
            vec![
                Row::new("stdout", 4, name, Figure::gbps(rate(0)))
                    .baseline("bare pipe", Figure::gbps(rate(1)))
                    .baseline("tokio pipe read", Figure::gbps(rate(2)))
                    .target(Target::RatioAtLeast(0, 0.8))
                    .note("median of the runs; \"tokio pipe read\" is a bare tokio spawn read with 64 KiB reads"),
            ]
        }
        Err(e) => vec![Row::missing("stdout", 4, name, format!("error: {e}"))],
    }
}

/// One copy contender: how to run it once (into a fresh target), timed.
pub(crate) type Contender<'a> =
    Box<dyn Fn() -> std::pin::Pin<Box<dyn Future<Output = Result<Duration, String>> + 'a>> + 'a>;

/// Runs every contender `reps` times, rotating the order, clearing `cleanup` after each;
/// returns each contender's median time in ms.
pub(crate) async fn copy_medians(
    contenders: &[Contender<'_>],
    cleanup: &[PathBuf],
    reps: usize,
) -> Result<Vec<f64>, String> {
    let mut times = vec![Vec::new(); contenders.len()];
    for rep in 0..reps {
        for k in 0..contenders.len() {
            let i = (k + rep) % contenders.len();
            sync_fs();
            let took = contenders[i]().await?;
            times[i].push(took.as_secs_f64() * 1e3);
            for path in cleanup {
                remove(path);
            }
        }
    }
    Ok(times.iter_mut().map(|t| median(t)).collect())
}

fn sync_fs() {
    let _ = std::process::Command::new("sync").status();
}

/// Row 6 (local): 10,000 small files and one big file, in and out, vs `cp -a` and `tar | tar`.
pub(crate) async fn sync_rows(config: &Config) -> Vec<Row> {
    let files = config.small_files();
    let big = config.stream_bytes();
    let names = [
        format!("local sync in {files} small files"),
        format!("local sync out {files} small files"),
        format!("local sync in one {} MiB file", big >> 20),
        format!("local sync out one {} MiB file", big >> 20),
    ];
    match local_sync(config, files, big, &names).await {
        Ok(rows) => rows,
        Err(e) => {
            let why = if e == DRIVER_MISSING { e } else { format!("error: {e}") };
            names
                .iter()
                .map(|n| Row::missing("sync-local", 6, n, why.clone()))
                .collect()
        }
    }
}

async fn local_sync(config: &Config, files: usize, big: u64, names: &[String; 4]) -> Result<Vec<Row>, String> {
    let scratch = Scratch::new("16g")?;
    let local = Local::open(Some(scratch.join("leases"))).await?;
    let result = local_sync_on(config, &scratch, &local, files, big, names).await;
    local.leased.close().await;
    result
}

async fn local_sync_on(
    config: &Config,
    scratch: &Scratch,
    local: &Local,
    files: usize,
    big: u64,
    names: &[String; 4],
) -> Result<Vec<Row>, String> {
    let (small_src, big_dir) = sync_fixtures(scratch, files, big)?;
    let workspace = local.workspace(&local.leased.lease)?;
    let l = &local.leased;
    let cp_dst = scratch.join("cp-dst");
    let tar_dst = scratch.join("tar-dst");
    let out_dst = scratch.join("out-dst");
    let reps = config.reps();
    let mut rows = Vec::new();
    let tmpfs_note = if scratch.is_tmpfs() {
        "on a private tmpfs"
    } else {
        "on a plain temp dir (mounting a tmpfs failed)"
    };
    for (k, (src, entry, ws_name)) in [
        (&small_src, SyncKind::Dir, "small"),
        (&big_dir.join("big.bin"), SyncKind::File, "big.bin"),
    ]
    .into_iter()
    .enumerate()
    {
        let in_ws = workspace.join(ws_name);
        let tar_src: PathBuf = if entry == SyncKind::Dir {
            src.clone()
        } else {
            big_dir.clone()
        };
        let contenders_in: Vec<Contender<'_>> = vec![
            Box::new(|| Box::pin(l.sync_in(entry.file(&src.display().to_string(), ws_name)))),
            Box::new(|| Box::pin(baseline::cp_a(src, &cp_dst))),
            Box::new(|| Box::pin(baseline::tar_tar(&tar_src, &tar_dst))),
        ];
        let cleanup = [in_ws.clone(), cp_dst.clone(), tar_dst.clone()];
        let m_in = copy_medians(&contenders_in, &cleanup, reps).await?;
        // Put the tree in the workspace once more for the way out.
        l.sync_in(entry.file(&src.display().to_string(), ws_name)).await?;
        let tar_out_src: PathBuf = if entry == SyncKind::Dir {
            in_ws.clone()
        } else {
            workspace.clone()
        };
        let contenders_out: Vec<Contender<'_>> = vec![
            Box::new(|| Box::pin(l.sync_out(entry.file(ws_name, &out_dst.display().to_string())))),
            Box::new(|| Box::pin(baseline::cp_a(&in_ws, &cp_dst))),
            Box::new(|| Box::pin(baseline::tar_tar(&tar_out_src, &tar_dst))),
        ];
        let cleanup = [out_dst.clone(), cp_dst.clone(), tar_dst.clone()];
        let m_out = copy_medians(&contenders_out, &cleanup, reps).await?;
        remove(&in_ws);
        let limit = if entry == SyncKind::Dir { 1.5 } else { 1.2 };
        for (j, m) in [m_in, m_out].into_iter().enumerate() {
            let note = if entry == SyncKind::File {
                "tar | tar moves the workspace's only file, the same bytes".to_string()
            } else {
                format!("1 KiB files in directories of 100, {tmpfs_note}; median of {reps} runs")
            };
            rows.push(
                Row::new("sync-local", 6, names[k * 2 + j].clone(), Figure::ms(m[0]))
                    .baseline("cp -a", Figure::ms(m[1]))
                    .baseline("tar | tar", Figure::ms(m[2]))
                    .target(Target::RatioAtMost(0, limit))
                    .note(note),
            );
        }
    }
    Ok(rows)
}

/// Directory tree or one file.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum SyncKind {
    Dir,
    File,
}

impl SyncKind {
    pub(crate) fn file(self, source: &str, target: &str) -> SyncFile {
        match self {
            SyncKind::Dir => SyncFile::directory(source, target),
            SyncKind::File => SyncFile::file(source, target),
        }
    }
}

/// Row 7: 1, 16 and 256 concurrent executes of `true` on one lease vs as many bare spawns.
pub(crate) async fn scale_exec_rows(config: &Config) -> Vec<Row> {
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
                        .target(target)
                        .note(format!(
                            "the bench process's resident memory meanwhile: {:.0} MiB",
                            rss_kib() / 1024.0
                        )),
                );
                rows.push(
                    Row::new("scale-exec", 7, format!("{name}: p50 latency"), Figure::ms(ours.1))
                        .baseline("bare spawns", Figure::ms(bare.1)),
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

/// Row 7: resident memory per open local lease (VmRSS delta over 1,000 leases), measured
/// in a fresh child process so that memory this process freed earlier cannot hide it.
pub(crate) async fn lease_memory_rows(config: &Config) -> Vec<Row> {
    let count = config.leases();
    let name = format!("{count} open local leases: memory per lease");
    match lease_memory_in_child(count).await {
        Ok(kib) => vec![
            Row::new("scale-leases", 7, name, Figure::kib(kib))
                .target(Target::AtMost(64.0))
                .note("VmRSS delta of a fresh bench process over all leases (runtime, store and driver), divided by their number"),
        ],
        Err(e) if e == DRIVER_MISSING => vec![Row::missing("scale-leases", 7, name, e)],
        Err(e) => vec![Row::missing("scale-leases", 7, name, format!("error: {e}"))],
    }
}

/// The hidden option that makes this binary measure lease memory and print it.
pub(crate) const LEASE_MEMORY_CHILD: &str = "--lease-memory-child";

async fn lease_memory_in_child(count: usize) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = tokio::process::Command::new(exe)
        .args([LEASE_MEMORY_CHILD, &count.to_string()])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        return Err(if err.is_empty() {
            format!("child exited {}", out.status)
        } else {
            err
        });
    }
    text.trim().parse().map_err(|_| format!("child printed {text:?}"))
}

/// The child's side: measures, prints KiB per lease, or the error on stderr.
pub(crate) async fn lease_memory_child(count: usize) -> Result<f64, String> {
    lease_memory(count).await
}

async fn lease_memory(count: usize) -> Result<f64, String> {
    let scratch = Scratch::new("1g")?;
    let local = Local::open(Some(scratch.join("leases"))).await?;
    let runtime = Arc::clone(&local.leased.runtime);
    let environment = local.leased.environment.clone();
    let acquire = || async {
        runtime
            .acquire_lease(AcquireRequest::new(&environment, "bench"))
            .await
            .map(|l| l.id)
            .map_err(|e| e.to_string())
    };
    // Warm the allocator and the store before the first reading.
    for _ in 0..50 {
        let id = acquire().await?;
        let _ = runtime.release_lease(&id, LeaseStatus::Released).await;
    }
    let before = rss_kib();
    let mut ids = Vec::with_capacity(count);
    let mut failed = None;
    for _ in 0..count {
        match acquire().await {
            Ok(id) => ids.push(id),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let after = rss_kib();
    for id in &ids {
        let _ = runtime.release_lease(id, LeaseStatus::Released).await;
    }
    local.leased.close().await;
    drop(scratch);
    match failed {
        Some(e) => Err(e),
        None => Ok((after - before).max(0.0) / count as f64),
    }
}

/// The small-file tree and the big file of the sync rows: `(small tree, dir of big.bin)`.
pub(crate) fn sync_fixtures(scratch: &Scratch, files: usize, big: u64) -> Result<(PathBuf, PathBuf), String> {
    let small_src = scratch.join("src-small");
    baseline::make_small_tree(&small_src, files)?;
    let big_dir = scratch.join("src-big");
    std::fs::create_dir_all(&big_dir).map_err(|e| e.to_string())?;
    baseline::make_big_file(&big_dir.join("big.bin"), big)?;
    Ok((small_src, big_dir))
}
