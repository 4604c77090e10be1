//! Open duplex routes (row 7, `scale-duplex`): 1,000 routes open at once on one sandbox
//! worker, opened and echoed through, vs as many bare `bwrap` processes.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use envrt_driver_plugin_sandbox::{RouteSlots, SandboxDriver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::Config;
use crate::facade::Leased;
use crate::measure::{Scratch, rss_of};
use crate::report::{Figure, Row};
use crate::targets::sandbox::{self, SANDBOX_PATH, bwrap_args, worker_path};

/// Row 7: 1,000 open duplex routes at once on one worker (sandbox).
pub(crate) async fn sandbox(config: &Config) -> Vec<Row> {
    let name = format!("{} open duplex routes (sandbox): open + echo all", config.routes());
    sandbox_rows(config, name).await
}

async fn sandbox_rows(config: &Config, name: String) -> Vec<Row> {
    let scratch = match Scratch::new("1g") {
        Ok(s) => s,
        Err(e) => return sandbox::missing("scale-duplex", 7, &[name], &e),
    };
    // The default ceiling (128 routes in the whole process) stays; this driver gets a
    // ceiling of its own, as an embedder that wants more routes would configure. So does
    // the open timeout: each open's 30 s runs from its send, and the worker starts the
    // sandboxes one at a time, so the last of 1,000 opens sent at once waits for the
    // 999 before it (17 s at load 54 on two cores; past 30 s at load 35 once, which
    // failed the row with the timeout). The row measures throughput, not that queue.
    let routes = config.routes();
    let open_timeout = Duration::from_secs(300);
    let (leased, driver) =
        match sandbox::open_with(&scratch.join("leases"), RouteSlots::new(routes), open_timeout).await {
            Ok(o) => o,
            Err(e) => return sandbox::missing("scale-duplex", 7, &[name], &e),
        };
    let bare_dir = scratch.join("bare");
    let _ = std::fs::create_dir_all(&bare_dir);
    let ours = open_routes(&leased, &driver, routes).await;
    let bare = match worker_path() {
        Ok(worker) => bare_routes(&bwrap_args(&bare_dir, &worker), routes).await,
        Err(e) => Err(e),
    };
    sandbox::close(leased, driver).await;
    match (ours, bare) {
        (Ok((ours, worker_kib, slowest)), Ok(bare)) => vec![
            Row::new("scale-duplex", 7, name, Figure::ms(ours.as_secs_f64() * 1e3))
                .baseline(format!("{routes} bare bwrap cat"), Figure::ms(bare.as_secs_f64() * 1e3))
                .note(format!(
                    "open {routes} `cat` channels at once, write a line to each and read it back, close; \
                     worker RSS grew {worker_kib:.0} KiB with all routes open; the slowest open \
                     answered after {:.1} s",
                    slowest.as_secs_f64()
                )),
        ],
        (Err(e), _) | (_, Err(e)) => sandbox::missing("scale-duplex", 7, &[name], &e),
    }
}

/// Opens `routes` `cat` channels at once, echoes a line on each, closes them all.
/// Returns the time, the worker's RSS growth (KiB) while all were open and the slowest
/// open's wait.
async fn open_routes(
    leased: &Leased,
    driver: &SandboxDriver,
    routes: usize,
) -> Result<(Duration, f64, Duration), String> {
    let worker_rss = || driver.worker_pid().map(|p| rss_of(&p.to_string())).unwrap_or(0.0);
    let rss_before = worker_rss();
    let start = Instant::now();
    let argv = vec!["cat".to_string()];
    let opened = futures_join(
        (0..routes)
            .map(|_| {
                let runtime = Arc::clone(&leased.runtime);
                let lease = leased.lease.clone();
                let argv = argv.clone();
                tokio::spawn(async move {
                    let asked = Instant::now();
                    let opened = runtime
                        .open_duplex_channel(&lease, &argv)
                        .await
                        .map_err(|e| e.to_string());
                    (opened, asked.elapsed())
                })
            })
            .collect(),
    )
    .await?;
    // The slowest open's wait, from its call to its answer (every open is sent at once,
    // and the worker starts the sandboxes one at a time).
    let slowest = opened.iter().map(|(_, waited)| *waited).max().unwrap_or_default();
    let opened: Vec<_> = opened.into_iter().map(|(o, _)| o).collect();
    let failed = opened.iter().filter(|o| o.is_err()).count();
    if let Some(Err(e)) = opened.iter().find(|o| o.is_err()) {
        // Measured at the failure: how far it got, and how many processes the sandbox
        // user (65534) had then (a root worker's sandboxes run as that user, and the
        // worker's init sets a process limit per sandbox).
        return Err(format!(
            "{e}: {} of {routes} routes opened; the sandbox user had {} processes; \
             the slowest open answered after {:.1} s",
            routes - failed,
            processes_of(65534),
            slowest.as_secs_f64()
        ));
    }
    let channels: Vec<_> = opened.into_iter().collect::<Result<_, _>>()?;
    let channels: Vec<Arc<Box<dyn envrt_runtime_core::DuplexChannel>>> = channels.into_iter().map(Arc::new).collect();
    let echoes = futures_join(
        channels
            .iter()
            .map(|c| {
                let c = Arc::clone(c);
                tokio::spawn(async move {
                    c.write(b"ping\n").await.map_err(|e| e.to_string())?;
                    let mut got = Vec::new();
                    while got.len() < 5 {
                        match c.read().await.map_err(|e| e.to_string())? {
                            Some(chunk) => got.extend(chunk),
                            None => break,
                        }
                    }
                    if got == b"ping\n" {
                        Ok(())
                    } else {
                        Err(format!("echo came back as {got:?}"))
                    }
                })
            })
            .collect(),
    )
    .await?;
    let rss_open = worker_rss();
    for e in echoes {
        e?;
    }
    for c in &channels {
        let _ = c.close_input().await;
    }
    for c in &channels {
        let _ = c.wait().await;
        let _ = c.close().await;
    }
    Ok((start.elapsed(), (rss_open - rss_before).max(0.0), slowest))
}

/// Processes whose real uid is `uid`.
fn processes_of(uid: u32) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("status")).is_ok_and(|s| {
                s.lines()
                    .find(|l| l.starts_with("Uid:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .is_some_and(|u| u == uid.to_string())
            })
        })
        .count()
}

/// The same with bare `bwrap cat` processes and pipes.
async fn bare_routes(args: &[String], routes: usize) -> Result<Duration, String> {
    let start = Instant::now();
    let tasks = (0..routes)
        .map(|_| {
            let args = args.to_vec();
            tokio::spawn(async move {
                let mut child = tokio::process::Command::new("bwrap")
                    .args(&args)
                    .arg("cat")
                    .env_clear()
                    .env("PATH", SANDBOX_PATH)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(|e| e.to_string())?;
                let mut stdin = child.stdin.take().ok_or("no stdin")?;
                let mut stdout = child.stdout.take().ok_or("no stdout")?;
                stdin.write_all(b"ping\n").await.map_err(|e| e.to_string())?;
                let mut got = [0u8; 5];
                stdout.read_exact(&mut got).await.map_err(|e| e.to_string())?;
                drop(stdin);
                child.wait().await.map_err(|e| e.to_string())?;
                Ok::<_, String>(())
            })
        })
        .collect();
    for r in futures_join(tasks).await? {
        r?;
    }
    Ok(start.elapsed())
}

async fn futures_join<T: Send + 'static>(handles: Vec<tokio::task::JoinHandle<T>>) -> Result<Vec<T>, String> {
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.map_err(|e| e.to_string())?);
    }
    Ok(out)
}
