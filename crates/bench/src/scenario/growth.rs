//! How cost grows with open leases (row 7): host memory per open lease (`scale-leases`) on
//! every target but SSH, and on Docker and the sandbox acquire / execute latency with many
//! leases open (`scale-open`; the local target's is `open_leases.rs`), each against the
//! same operation with one lease open.
//!
//! Both are measured in a fresh child process (`envrt-bench --growth-child …`), so that
//! memory this process freed earlier cannot hide growth, and so that the child's own
//! resident memory is the host process's. The child opens one runtime per lease count
//! (its own driver each: its own engine client, or its own worker), fills them, reads
//! memory around the filling of the largest, then times the operations interleaved.
//!
//! **Memory per lease** is the growth of the proportional set size (`Pss` in
//! `/proc/PID/smaps_rollup`, which splits shared pages among their sharers) of the host
//! process (runtime, store, driver) — and for the sandbox of the worker process too —
//! from before the largest runtime's leases were acquired to after, divided by their
//! number. The container (its `containerd-shim`, init and command) and the sandbox
//! (`bwrap` and what runs in it) are not counted: the goal is the host's cost beside them.

use serde_json::Value;

use std::sync::Arc;

use envrt_runtime_core::{AcquireRequest, LeaseStatus};

use crate::Config;
use crate::measure::{Scratch, rss_kib};
use crate::report::{Figure, Row, Target};
use crate::targets::local::Local;

/// The hidden option that makes this binary run the child's side and print JSON.
pub(crate) const CHILD: &str = "--growth-child";

/// The label every container of the child carries (its value: the parent's pid), so the
/// parent removes whatever a failed child left behind.
const LABEL: &str = "envrt.bench-growth";

/// Lease counts per driver: the first is the small-scale baseline.
fn counts(driver: &str, config: &Config) -> Vec<usize> {
    match driver {
        // Each Docker lease is a running container (a shim of some MiB and a second or so
        // to create on this machine): 1,000 would take the machine's memory and 15 minutes.
        "docker" if config.quick => vec![1, 50],
        "docker" => vec![1, 200],
        _ => vec![1, 100, 1000],
    }
}

/// Rounds of acquire + release and of execute per runtime.
fn rounds(driver: &str, config: &Config) -> (usize, usize) {
    match driver {
        "docker" => (if config.quick { 8 } else { 30 }, config.slow_exec_rounds()),
        _ => (config.exec_rounds() / 3, config.exec_rounds() / 3),
    }
}

/// The rows of Docker and the sandbox: memory (`scale-leases`) and/or latency
/// (`scale-open`).
pub(crate) async fn rows(config: &Config, memory: bool, open: bool) -> Vec<Row> {
    let mut rows = Vec::new();
    for driver in ["docker", "sandbox"] {
        let counts = counts(driver, config);
        let (acquire_rounds, exec_rounds) = if open { rounds(driver, config) } else { (0, 0) };
        let measured = in_child(driver, acquire_rounds, exec_rounds, &counts).await;
        if memory {
            rows.push(memory_row(driver, &counts, &measured));
        }
        if open {
            rows.extend(open_rows(driver, &counts, &measured));
        }
    }
    rows
}

/// Row 7: resident memory per open local lease (VmRSS delta over 1,000 leases), measured
/// in a fresh child process so that memory this process freed earlier cannot hide it.
pub(crate) async fn local_memory(config: &Config) -> Vec<Row> {
    let count = config.leases();
    let name = format!("{count} open local leases: memory per lease");
    match lease_memory_in_child(count).await {
        Ok(kib) => vec![
            Row::new("scale-leases", 7, name, Figure::kib(kib))
                .target(Target::AtMost(64.0))
                .note("VmRSS delta of a fresh bench process over all leases (runtime, store and driver), divided by their number"),
        ],
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

fn memory_row(driver: &str, counts: &[usize], measured: &Result<Value, String>) -> Row {
    let count = counts[counts.len() - 1];
    let name = format!("{count} open {driver} leases: host memory per lease");
    let m = match measured {
        Ok(m) => m,
        Err(e) => return Row::missing("scale-leases", 7, name, e.clone()),
    };
    let f = |k: &str| m[k].as_f64().unwrap_or(f64::NAN);
    let (host, worker) = (f("host_pss_kib"), f("worker_pss_kib"));
    let what = if driver == "sandbox" {
        format!(
            "bench process {host:.1} KiB + worker {worker:.1} KiB; RSS {:.1} + {:.1} KiB",
            f("host_rss_kib"),
            f("worker_rss_kib")
        )
    } else {
        format!(
            "RSS {:.1} KiB; beside it, per container, dockerd grew {:.0} KiB RSS and a containerd-shim holds {:.0} KiB RSS on average (not counted)",
            f("host_rss_kib"),
            f("dockerd_rss_kib"),
            f("shim_rss_kib")
        )
    };
    Row::new("scale-leases", 7, name, Figure::kib(host + worker.max(0.0)))
        .target(Target::AtMost(64.0))
        .note(format!(
            "Pss growth (smaps_rollup) of a fresh bench process{} from 1 to {count} open leases, per lease added: {what}",
            if driver == "sandbox" { " and its worker" } else { "" }
        ))
}

fn open_rows(driver: &str, counts: &[usize], measured: &Result<Value, String>) -> Vec<Row> {
    let m = match measured {
        Ok(m) => m,
        Err(e) => {
            return vec![Row::missing(
                "scale-open",
                7,
                format!("{driver} acquire + release / execute with leases open"),
                e.clone(),
            )];
        }
    };
    let mut rows = Vec::new();
    for (key, what) in [("acquire_ms", "acquire + release"), ("execute_ms", "execute `true`")] {
        let p50 = |i: usize| m[key][i].as_f64().unwrap_or(f64::NAN);
        for (i, open) in counts.iter().enumerate().skip(1) {
            rows.push(
                Row::new(
                    "scale-open",
                    7,
                    format!("{driver} {what} p50, {open} leases open"),
                    Figure::ms(p50(i)),
                )
                .baseline("1 lease open", Figure::ms(p50(0))),
            );
        }
    }
    rows
}

/// Runs the child and parses its JSON; afterwards removes any container it left.
async fn in_child(driver: &str, acquire_rounds: usize, exec_rounds: usize, counts: &[usize]) -> Result<Value, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut args = vec![
        CHILD.to_owned(),
        driver.to_owned(),
        acquire_rounds.to_string(),
        exec_rounds.to_string(),
    ];
    args.extend(counts.iter().map(usize::to_string));
    let out = tokio::process::Command::new(exe)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| e.to_string());
    if driver == "docker" {
        let filter = format!("label={LABEL}={}", std::process::id());
        let _ = crate::measure::sh(&format!(
            "ids=$(docker ps -aq --filter {filter}); [ -z \"$ids\" ] || docker rm -f $ids"
        ))
        .await;
    }
    let out = out?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        return Err(if err.is_empty() {
            format!("error: child exited {}", out.status)
        } else if err.starts_with("n/a") {
            err
        } else {
            format!("error: {err}")
        });
    }
    serde_json::from_str(text.trim()).map_err(|_| format!("error: child printed {text:?}"))
}

/// The child's side: `DRIVER ACQUIRE_ROUNDS EXEC_ROUNDS COUNT...`; prints one JSON object.
pub(crate) async fn child(args: &[String]) -> Result<Value, String> {
    let number = |i: usize| -> Result<usize, String> {
        args.get(i)
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("{CHILD}: argument {i} is not a number"))
    };
    let driver = args.first().map(String::as_str).unwrap_or("");
    let (acquire_rounds, exec_rounds) = (number(1)?, number(2)?);
    let counts = (3..args.len()).map(number).collect::<Result<Vec<_>, _>>()?;
    if counts.is_empty() {
        return Err(format!("{CHILD}: no lease counts"));
    }
    child_side::child(driver, acquire_rounds, exec_rounds, &counts).await
}

/// `Pss` and `Rss` (KiB) of a process from `/proc/PID/smaps_rollup`; zeros when unreadable.
pub(crate) fn pss_rss(pid: &str) -> (f64, f64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0.0)
    };
    (field("Pss:"), field("Rss:"))
}

/// The child process's side: one runtime per lease count on Docker or the sandbox, filled,
/// its memory read around the filling, and the operations timed.
mod child_side {
    use std::sync::Arc;

    use envrt_driver_docker::{DockerConfig, DockerDriver};
    use envrt_driver_plugin_sandbox::SandboxDriver;
    use envrt_runtime_core::{AcquireRequest, JsonMap, LeaseStatus};
    use serde_json::{Value, json};

    use super::{LABEL, pss_rss};
    use crate::facade::Leased;
    use crate::measure::{Scratch, interleave, rss_of};

    /// One runtime holding leases: the facade's first one and `extra`.
    struct Opened {
        leased: Leased,
        extra: Vec<String>,
        sandbox: Option<Arc<SandboxDriver>>,
    }

    impl Opened {
        async fn open(driver: &str, scratch: &Scratch, index: usize) -> Result<Opened, String> {
            if driver == "docker" {
                let mut config = DockerConfig::default();
                let parent = std::os::unix::process::parent_id().to_string();
                config.extra_labels.insert(LABEL.to_owned(), parent);
                let docker = DockerDriver::connect(config)
                    .await
                    .map_err(|e| format!("n/a (no engine): {e}"))?;
                let mut env = JsonMap::new();
                env.insert("image".into(), crate::targets::docker::IMAGE.into());
                let leased = Leased::open(Arc::new(docker), env).await?;
                Ok(Opened {
                    leased,
                    extra: Vec::new(),
                    sandbox: None,
                })
            } else {
                let root = scratch.join(&format!("leases-{index}"));
                let (leased, driver) = crate::targets::sandbox::open(&root).await?;
                Ok(Opened {
                    leased,
                    extra: Vec::new(),
                    sandbox: Some(driver),
                })
            }
        }

        async fn acquire(&self) -> Result<String, String> {
            self.leased
                .runtime
                .acquire_lease(AcquireRequest::new(&self.leased.environment, "bench"))
                .await
                .map(|l| l.id)
                .map_err(|e| e.to_string())
        }

        async fn release(&self, id: &str) -> Result<(), String> {
            self.leased
                .runtime
                .release_lease(id, LeaseStatus::Released)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }

        /// Acquires until `count` leases are open.
        async fn fill(&mut self, count: usize) -> Result<(), String> {
            while self.extra.len() + 1 < count {
                let id = self
                    .acquire()
                    .await
                    .map_err(|e| format!("acquiring lease {} of {count}: {e}", self.extra.len() + 2))?;
                self.extra.push(id);
            }
            Ok(())
        }

        fn worker(&self) -> Option<String> {
            self.sandbox.as_ref()?.worker_pid().map(|p| p.to_string())
        }

        /// Releases every lease (up to 16 at once) and stops the worker.
        async fn close(self) {
            use futures::StreamExt;
            let this = &self;
            futures::stream::iter(self.extra.iter())
                .for_each_concurrent(16, |id| async move {
                    let _ = this.release(id).await;
                })
                .await;
            let Opened { leased, sandbox, .. } = self;
            leased.close().await;
            if let Some(driver) = sandbox {
                driver.shutdown().await;
            }
        }
    }

    /// The pids of the running containers' shims (`containerd-shim*` processes).
    fn shims() -> Vec<String> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.starts_with("containerd-shim"))
            })
            .collect()
    }

    fn dockerd() -> Option<String> {
        let dir = std::fs::read_dir("/proc").ok()?;
        dir.flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .find(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "dockerd"))
    }

    pub(super) async fn child(
        driver: &str,
        acquire_rounds: usize,
        exec_rounds: usize,
        counts: &[usize],
    ) -> Result<Value, String> {
        let scratch = Scratch::new("1g")?;
        let mut opened = Vec::new();
        let result = measure(driver, &scratch, &mut opened, acquire_rounds, exec_rounds, counts).await;
        for o in opened {
            o.close().await;
        }
        result
    }

    async fn measure(
        driver: &str,
        scratch: &Scratch,
        opened: &mut Vec<Opened>,
        acquire_rounds: usize,
        exec_rounds: usize,
        counts: &[usize],
    ) -> Result<Value, String> {
        for i in 0..counts.len() {
            opened.push(Opened::open(driver, scratch, i).await?);
        }
        let last = counts.len() - 1;
        for (o, &count) in opened.iter_mut().zip(counts).take(last) {
            o.fill(count).await?;
        }
        // Warm the allocator, the store and the engine connection on the measured runtime.
        let big = &mut opened[last];
        for _ in 0..if driver == "docker" { 3 } else { 50 } {
            let id = big.acquire().await?;
            big.release(&id).await?;
        }
        let worker = big.worker();
        let read_worker = || worker.as_deref().map(pss_rss).unwrap_or((0.0, 0.0));
        let (dockerd, shims_before) = (dockerd(), shims().len());
        let dockerd_before = dockerd.as_deref().map(rss_of).unwrap_or(0.0);
        let (host_before, worker_before) = (pss_rss("self"), read_worker());
        big.fill(counts[last]).await?;
        let (host_after, worker_after) = (pss_rss("self"), read_worker());
        let dockerd_after = dockerd.as_deref().map(rss_of).unwrap_or(0.0);
        let added = (counts[last] - 1) as f64;
        let shim_pids = shims();
        let shim_rss: f64 = shim_pids.iter().map(|p| pss_rss(p).1).sum();
        let per = |after: f64, before: f64| (after - before) / added;
        let mut out = json!({
            "count": counts[last],
            "host_pss_kib": per(host_after.0, host_before.0),
            "host_rss_kib": per(host_after.1, host_before.1),
            "worker_pss_kib": per(worker_after.0, worker_before.0),
            "worker_rss_kib": per(worker_after.1, worker_before.1),
            "dockerd_rss_kib": per(dockerd_after, dockerd_before),
            "shim_rss_kib": if shim_pids.len() > shims_before { shim_rss / shim_pids.len() as f64 } else { 0.0 },
        });
        if acquire_rounds > 0 {
            let runs = &*opened;
            let acquire = interleave(runs.len(), 1, acquire_rounds, |i| async move {
                let id = runs[i].acquire().await?;
                runs[i].release(&id).await
            })
            .await?;
            let execute = interleave(runs.len(), 3, exec_rounds, |i| async move {
                runs[i].leased.run(&["true"]).await
            })
            .await?;
            out["acquire_ms"] = (0..runs.len()).map(|i| acquire.p(i, 50.0)).collect();
            out["execute_ms"] = (0..runs.len()).map(|i| execute.p(i, 50.0)).collect();
        }
        Ok(out)
    }
}
