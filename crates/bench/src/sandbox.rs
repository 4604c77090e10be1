//! Rows of the sandbox plugin driver with the reference worker: execute latency (3),
//! duplex throughput (5), open duplex routes (7); and the duplex measurement the Docker
//! rows share.

use std::time::Duration;

use crate::Config;
use crate::baseline;
use crate::facade::Leased;
use crate::measure::{gbps, interleave, sh};
use crate::report::{Figure, Row, Target};

/// The names of a driver's two duplex rows.
pub(crate) fn duplex_names(driver: &str, bytes: u64) -> Vec<String> {
    let mib = bytes >> 20;
    vec![
        format!("{driver} duplex read {mib} MiB"),
        format!("{driver} duplex write {mib} MiB"),
    ]
}

/// Duplex read and write throughput on `leased` vs a bare pipe (and `extra`, a shell
/// baseline for the read row); the read and write rows must reach `min_ratio` of the pipe.
pub(crate) async fn duplex_measure(
    leased: &Leased,
    config: &Config,
    names: Vec<String>,
    min_ratio: f64,
    bytes: u64,
    extra: Option<(&str, &str)>,
) -> Vec<Row> {
    let granted = leased
        .runtime
        .resolve_capabilities(&leased.lease)
        .await
        .ok()
        .flatten()
        .is_some_and(|s| s.duplex_command_stream);
    if !granted {
        return names
            .into_iter()
            .map(|n| Row::missing("duplex", 5, n, "n/a (driver grants no duplex yet)"))
            .collect();
    }
    let contenders = if extra.is_some() { 4 } else { 3 };
    let extra_script = extra.map(|e| e.1);
    let measured = interleave(contenders, 0, config.reps(), |i| async move {
        match i {
            0 => leased.duplex_read(bytes).await.map(|_| ()),
            1 => leased.duplex_write(bytes).await.map(|_| ()),
            2 => baseline::pipe(bytes).await.map(|_| ()),
            _ => sh(extra_script.unwrap_or("true")).await,
        }
    })
    .await;
    let m = match measured {
        Ok(m) => m,
        Err(e) => {
            return names
                .into_iter()
                .map(|n| Row::missing("duplex", 5, n, format!("error: {e}")))
                .collect();
        }
    };
    let rate = |i: usize| Figure::gbps(gbps(bytes, Duration::from_secs_f64(m.p(i, 50.0) / 1e3)));
    let mut read = Row::new("duplex", 5, names[0].clone(), rate(0))
        .baseline("bare pipe", rate(2))
        .target(Target::RatioAtLeast(0, min_ratio));
    if let Some((name, _)) = extra {
        read = read.baseline(name, rate(3));
    }
    let write = Row::new("duplex", 5, names[1].clone(), rate(1))
        .baseline("bare pipe", rate(2))
        .target(Target::RatioAtLeast(0, min_ratio))
        .note("64 KiB writes into `cat > /dev/null`, from opening the channel to the exit");
    vec![read, write]
}

/// Row 3: `true` through the facade, the sandbox driver and the reference worker vs a bare
/// `bwrap` with the worker's flags, and vs the local driver.
pub(crate) async fn exec_rows(config: &Config) -> Vec<Row> {
    let name = "sandbox execute `true`";
    #[cfg(feature = "sandbox")]
    return imp::exec_rows(config, name).await;
    #[cfg(not(feature = "sandbox"))]
    {
        let _ = config;
        vec![Row::missing(
            "exec-sandbox",
            3,
            format!("{name} p50"),
            crate::facade::DRIVER_MISSING,
        )]
    }
}

/// Row 5 (sandbox).
pub(crate) async fn duplex_rows(config: &Config) -> Vec<Row> {
    let names = duplex_names("sandbox", config.stream_bytes());
    #[cfg(feature = "sandbox")]
    return imp::duplex_rows(config, names).await;
    #[cfg(not(feature = "sandbox"))]
    names
        .into_iter()
        .map(|n| Row::missing("duplex", 5, n, crate::facade::DRIVER_MISSING))
        .collect()
}

/// Row 7: 1,000 open duplex routes at once on one worker (sandbox).
pub(crate) async fn route_rows(config: &Config) -> Vec<Row> {
    let name = format!("{} open duplex routes (sandbox): open + echo all", config.routes());
    #[cfg(feature = "sandbox")]
    return imp::route_rows(config, name).await;
    #[cfg(not(feature = "sandbox"))]
    vec![Row::missing("scale-duplex", 7, name, crate::facade::DRIVER_MISSING)]
}

#[cfg(feature = "sandbox")]
pub(crate) mod imp {
    use std::path::{Path, PathBuf};
    use std::process::Stdio;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use envrt_driver_plugin_sandbox::{DuplexLimits, PluginManifest, RouteSlots, SandboxDriver, SandboxOptions};
    use envrt_runtime_core::JsonMap;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use crate::Config;
    use crate::facade::Leased;
    use crate::local::Local;
    use crate::measure::{Scratch, interleave, rss_of};
    use crate::report::{Figure, Row, Target};

    /// The `PATH` the worker gives bwrap and every sandboxed command.
    use envrt_sandbox_worker::{INIT_PATH, SANDBOX_PATH};

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

    fn missing(group: &'static str, number: u8, names: &[String], e: &str) -> Vec<Row> {
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

    pub(super) async fn exec_rows(config: &Config, name: &str) -> Vec<Row> {
        let p50 = format!("{name} p50");
        let scratch = match Scratch::new("1g") {
            Ok(s) => s,
            Err(e) => return missing("exec-sandbox", 3, &[p50], &e),
        };
        let (leased, driver) = match open(&scratch.join("leases")).await {
            Ok(o) => o,
            Err(e) => return missing("exec-sandbox", 3, &[p50], &e),
        };
        let local = match Local::open(None).await {
            Ok(l) => l,
            Err(e) => {
                close(leased, driver).await;
                return missing("exec-sandbox", 3, &[p50], &e);
            }
        };
        let bare_dir = scratch.join("bare");
        let _ = std::fs::create_dir_all(&bare_dir);
        let args = match worker_path() {
            Ok(worker) => bwrap_args(&bare_dir, &worker),
            Err(e) => return missing("exec-sandbox", 3, &[p50], &e),
        };
        let (s, l, args) = (&leased, &local.leased, &args);
        // The worker's init reports the status on an inherited descriptor; 1 (the captured
        // stdout) stands in for the worker's status pipe.
        let via_init = [INIT_PATH, "--sandbox-init", "1", "--", "true"];
        let via_init = &via_init;
        let measured = interleave(4, 20, config.exec_rounds() / 2, |i| async move {
            match i {
                0 => s.run(&["true"]).await,
                1 => bare_bwrap(args, &["true"], None).await,
                2 => l.run(&["true"]).await,
                _ => bare_bwrap(args, via_init, None).await,
            }
        })
        .await;
        local.leased.close().await;
        close(leased, driver).await;
        match measured {
            Ok(m) => vec![
                Row::new("exec-sandbox", 3, p50, Figure::ms(m.p(0, 50.0)))
                    .baseline("bare bwrap", Figure::ms(m.p(1, 50.0)))
                    .baseline("local driver", Figure::ms(m.p(2, 50.0)))
                    .baseline("bare bwrap via worker init", Figure::ms(m.p(3, 50.0)))
                    .target(Target::PlusAtMost(0, 1.5))
                    .note("\"via worker init\": the same bwrap running `true` under the worker binary's init role, as the worker does"),
                Row::new("exec-sandbox", 3, format!("{name} p99"), Figure::ms(m.p(0, 99.0)))
                    .baseline("bare bwrap", Figure::ms(m.p(1, 99.0)))
                    .baseline("local driver", Figure::ms(m.p(2, 99.0))),
            ],
            Err(e) => missing("exec-sandbox", 3, &[p50], &e),
        }
    }

    pub(super) async fn duplex_rows(config: &Config, names: Vec<String>) -> Vec<Row> {
        let scratch = match Scratch::new("1g") {
            Ok(s) => s,
            Err(e) => return missing("duplex", 5, &names, &e),
        };
        let (leased, driver) = match open(&scratch.join("leases")).await {
            Ok(o) => o,
            Err(e) => return missing("duplex", 5, &names, &e),
        };
        let rows = super::duplex_measure(&leased, config, names, 0.3, config.stream_bytes(), None).await;
        close(leased, driver).await;
        rows
    }

    pub(super) async fn route_rows(config: &Config, name: String) -> Vec<Row> {
        let scratch = match Scratch::new("1g") {
            Ok(s) => s,
            Err(e) => return missing("scale-duplex", 7, &[name], &e),
        };
        // The default ceiling (128 routes in the whole process) stays; this driver gets a
        // ceiling of its own, as an embedder that wants more routes would configure. So does
        // the open timeout: each open's 30 s runs from its send, and the worker starts the
        // sandboxes one at a time, so the last of 1,000 opens sent at once waits for the
        // 999 before it (17 s at load 54 on two cores; past 30 s at load 35 once, which
        // failed the row with the timeout). The row measures throughput, not that queue.
        let routes = config.routes();
        let open_timeout = Duration::from_secs(300);
        let (leased, driver) = match open_with(&scratch.join("leases"), RouteSlots::new(routes), open_timeout).await {
            Ok(o) => o,
            Err(e) => return missing("scale-duplex", 7, &[name], &e),
        };
        let bare_dir = scratch.join("bare");
        let _ = std::fs::create_dir_all(&bare_dir);
        let ours = open_routes(&leased, &driver, routes).await;
        let bare = match worker_path() {
            Ok(worker) => bare_routes(&bwrap_args(&bare_dir, &worker), routes).await,
            Err(e) => Err(e),
        };
        close(leased, driver).await;
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
            (Err(e), _) | (_, Err(e)) => missing("scale-duplex", 7, &[name], &e),
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
        let channels: Vec<Arc<Box<dyn envrt_runtime_core::DuplexChannel>>> =
            channels.into_iter().map(Arc::new).collect();
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
}
