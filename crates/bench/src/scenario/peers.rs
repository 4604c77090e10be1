//! Row 9, the peers in the same run: SWE-ReX (local execute, 256 MiB of captured output,
//! remote execute through its HTTP server) and Inspect AI's local sandbox exec, each beside
//! the envrt row that does the same job.
//!
//! A peer runs in its own interpreter, in the virtual environment the set-up makes
//! (`scripts/swerex-venv.sh`: `ENVRT_SWEREX_VENV`, default `/opt/envrt-swerex-venv`;
//! `scripts/python-venv.sh`: `ENVRT_VENV`, default `/opt/envrt-venv`), under
//! `crates/bench/peers_driver.py`, started once per row: the driver times each operation
//! inside the interpreter and reports the time, so neither the interpreter's start nor the
//! pipe to this process is in a peer's figure. The rounds are interleaved with envrt's
//! (one run of each per round, the order rotated) exactly as every other latency row. A
//! missing virtual environment skips the row loudly (a `SKIPPED:` line naming it).

use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use envrt_runtime_core::ExecuteRequest;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::Mutex;

use crate::Config;
use crate::facade::Leased;
use crate::measure::{Interleaved, gbps, interleave_reported};
use crate::report::{Figure, Row, Target};
use crate::targets::local::Local;

/// The row number of the peer rows.
pub(crate) const NUMBER: u8 = 9;
/// Their group key.
pub(crate) const GROUP: &str = "peers";

/// The driver script every peer runs under.
const DRIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/peers_driver.py");

/// A peer's interpreter: the venv's python, from `var` or `default`, and the script that
/// makes it.
pub(crate) struct Venv {
    what: &'static str,
    var: &'static str,
    default: &'static str,
    script: &'static str,
}

pub(crate) const SWEREX: Venv = Venv {
    what: "SWE-ReX",
    var: "ENVRT_SWEREX_VENV",
    default: "/opt/envrt-swerex-venv",
    script: "scripts/swerex-venv.sh",
};

const INSPECT: Venv = Venv {
    what: "Inspect AI",
    var: "ENVRT_VENV",
    default: "/opt/envrt-venv",
    script: "scripts/python-venv.sh",
};

impl Venv {
    /// The python of the venv, or the loud skip text when there is none.
    fn python(&self) -> Result<PathBuf, String> {
        let dir = std::env::var_os(self.var)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(self.default));
        self.python_in(&dir)
    }

    fn python_in(&self, dir: &std::path::Path) -> Result<PathBuf, String> {
        let python = dir.join("bin/python");
        if python.is_file() {
            Ok(python)
        } else {
            Err(format!(
                "SKIPPED: no {} virtual environment at {} (bash {} makes it; {} moves it)",
                self.what,
                dir.display(),
                self.script,
                self.var
            ))
        }
    }
}

/// One running driver: requests go in on its stdin, replies come back one line each.
pub(crate) struct Peer {
    child: Child,
    io: Mutex<(ChildStdin, Lines<BufReader<ChildStdout>>)>,
    ops: Vec<String>,
}

impl Peer {
    /// Starts `peers_driver.py kind` under `venv`'s python and waits for its `ready`.
    pub(crate) async fn start(venv: &Venv, kind: &str) -> Result<Peer, String> {
        let python = venv.python()?;
        let mut child = tokio::process::Command::new(&python)
            .arg(DRIVER)
            .arg(kind)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: {e}", python.display()))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let ready = read_reply(&mut lines).await?;
        let ops = ready["ready"]
            .as_array()
            .ok_or_else(|| format!("{kind} driver: unexpected first line {ready}"))?
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        Ok(Peer {
            child,
            io: Mutex::new((stdin, lines)),
            ops,
        })
    }

    pub(crate) fn has(&self, op: &str) -> bool {
        self.ops.iter().any(|o| o == op)
    }

    /// Runs `op` on `argv` once (checking `bytes` of stdout when given); the peer's own time.
    pub(crate) async fn time(&self, op: &str, argv: &[&str], bytes: Option<u64>) -> Result<Duration, String> {
        let mut io = self.io.lock().await;
        let (stdin, lines) = &mut *io;
        let request = json!({"op": op, "argv": argv, "bytes": bytes}).to_string() + "\n";
        stdin
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("peer driver: {e}"))?;
        let reply = read_reply(lines).await?;
        reply["ns"]
            .as_u64()
            .map(Duration::from_nanos)
            .ok_or_else(|| format!("{op}: {reply}"))
    }

    /// Closes its input (the driver stops its server and exits) and waits for it.
    pub(crate) async fn stop(mut self) {
        drop(self.io);
        if tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// One reply line as JSON; its `error` as the error.
async fn read_reply(lines: &mut Lines<BufReader<ChildStdout>>) -> Result<Value, String> {
    let line = lines
        .next_line()
        .await
        .map_err(|e| format!("peer driver: {e}"))?
        .ok_or("the peer driver exited (its stderr is above)")?;
    let value: Value = serde_json::from_str(&line).map_err(|e| format!("peer driver said {line:?}: {e}"))?;
    match value["error"].as_str() {
        Some(error) => Err(error.to_owned()),
        None => Ok(value),
    }
}

/// The bash-session row: envrt's `true` against the peer's `op` (a SWE-ReX bash session),
/// in fewer rounds (each session command takes 100+ ms); none when the execute rows failed.
async fn session_rounds(
    config: &Config,
    executes_measured: bool,
    leased: &Leased,
    peer: &Peer,
    op: &str,
) -> Option<Result<Interleaved, String>> {
    if !executes_measured {
        return None;
    }
    let measured = interleave_reported(2, 3, config.slow_exec_rounds(), |i| async move {
        match i {
            0 => timed(leased.run(&["true"])).await,
            _ => peer.time(op, &["true"], None).await,
        }
    })
    .await;
    Some(measured)
}

/// Times an envrt call from this process.
async fn timed<Fut: Future<Output = Result<(), String>>>(fut: Fut) -> Result<Duration, String> {
    let start = Instant::now();
    fut.await?;
    Ok(start.elapsed())
}

/// Rows that could not run: the skip line printed once, every row saying why.
fn missing(names: &[String], why: &str) -> Vec<Row> {
    if why.starts_with("SKIPPED") {
        println!("{why}");
    }
    let why = if why.starts_with("n/a") || why.starts_with("SKIPPED") {
        why.to_owned()
    } else {
        format!("error: {why}")
    };
    names
        .iter()
        .map(|n| Row::missing(GROUP, NUMBER, n.clone(), why.clone()))
        .collect()
}

/// Every peer row, each with its envrt row's lease opened beside it.
pub(crate) async fn rows(config: &Config) -> Vec<Row> {
    let mut rows = local_rows(config).await;
    rows.extend(output_rows(config).await);
    rows.extend(remote_rows(config).await);
    rows.extend(inspect_rows(config).await);
    rows
}

/// Local execute `true`: the local driver through the facade vs SWE-ReX's
/// `LocalRuntime.execute` and `subprocess.run` in the same interpreter (and the driver
/// without cgroups, so that their cost shows in the same run); then, in a measurement of
/// its own with fewer rounds, vs SWE-ReX's bash session.
async fn local_rows(config: &Config) -> Vec<Row> {
    let names = [
        "local execute `true` p50 vs SWE-ReX",
        "local execute `true` p99 vs SWE-ReX",
        "local execute `true` p50 vs SWE-ReX bash session",
    ]
    .map(String::from);
    let peer = match Peer::start(&SWEREX, "swerex").await {
        Ok(p) => p,
        Err(e) => return missing(&names, &e),
    };
    let opened = match Local::open(None).await {
        Ok(l) => Local::open_contained(None, false).await.map(|u| (l, u)),
        Err(e) => Err(e),
    };
    let (local, uncontained) = match opened {
        Ok(o) => o,
        Err(e) => {
            peer.stop().await;
            return missing(&names, &e);
        }
    };
    let (l, u, p) = (&local.leased, &uncontained.leased, &peer);
    let measured = interleave_reported(4, 30, config.exec_rounds() / 2, |i| async move {
        match i {
            0 => timed(l.run(&["true"])).await,
            1 => p.time("swerex-local", &["true"], None).await,
            2 => p.time("subprocess", &["true"], None).await,
            _ => timed(u.run(&["true"])).await,
        }
    })
    .await;
    let session = session_rounds(config, measured.is_ok(), l, p, "swerex-session").await;
    local.leased.close().await;
    uncontained.leased.close().await;
    peer.stop().await;
    let m = match measured {
        Ok(m) => m,
        Err(e) => return missing(&names, &e),
    };
    let [p50, p99, vs_session] = names;
    let ms = |i: usize, p: f64| Figure::ms(m.p(i, p));
    let mut rows = vec![
        Row::new(GROUP, NUMBER, p50, ms(0, 50.0))
            .baseline("SWE-ReX LocalRuntime.execute", ms(1, 50.0))
            .baseline("subprocess.run (same interpreter)", ms(2, 50.0))
            .baseline("local driver without cgroups", ms(3, 50.0))
            .target(Target::RatioAtMost(0, 1.0))
            .note("envrt: the local driver through the facade (cgroups on, its default); SWE-ReX: Command(argv, shell=False), a fresh process per command"),
        Row::new(GROUP, NUMBER, p99, ms(0, 99.0))
            .baseline("SWE-ReX LocalRuntime.execute", ms(1, 99.0))
            .baseline("subprocess.run (same interpreter)", ms(2, 99.0))
            .baseline("local driver without cgroups", ms(3, 99.0)),
    ];
    rows.push(match session {
        Some(Ok(s)) => Row::new(GROUP, NUMBER, vs_session, Figure::ms(s.p(0, 50.0)))
            .baseline("SWE-ReX bash session", Figure::ms(s.p(1, 50.0)))
            .note("\"bash session\": BashAction(command=\"true\") in one pexpect bash, what SWE-agent drives; fewer rounds (each takes 100+ ms)"),
        Some(Err(e)) => Row::missing(GROUP, NUMBER, vs_session, format!("error: {e}")),
        None => Row::missing(GROUP, NUMBER, vs_session, "n/a (the execute rows failed)"),
    });
    rows
}

/// 256 MiB (1 GiB in the full run) of `head -c N /dev/zero` captured by execute vs
/// SWE-ReX's `LocalRuntime.execute`, which captures it too.
async fn output_rows(config: &Config) -> Vec<Row> {
    let bytes = config.stream_bytes();
    let names = [format!("stdout {} MiB captured by execute vs SWE-ReX", bytes >> 20)];
    let peer = match Peer::start(&SWEREX, "swerex").await {
        Ok(p) => p,
        Err(e) => return missing(&names, &e),
    };
    let local = match Local::open(None).await {
        Ok(l) => l,
        Err(e) => {
            peer.stop().await;
            return missing(&names, &e);
        }
    };
    let count = bytes.to_string();
    let argv = ["head", "-c", count.as_str(), "/dev/zero"];
    let (l, p, argv) = (&local.leased, &peer, &argv);
    let measured = interleave_reported(3, 0, config.reps(), |i| async move {
        match i {
            0 => capture(l, argv, bytes).await,
            1 => p.time("swerex-local", argv, Some(bytes)).await,
            _ => p.time("subprocess", argv, Some(bytes)).await,
        }
    })
    .await;
    local.leased.close().await;
    peer.stop().await;
    let m = match measured {
        Ok(m) => m,
        Err(e) => return missing(&names, &e),
    };
    let rate = |i: usize| Figure::gbps(gbps(bytes, Duration::from_secs_f64(m.p(i, 50.0) / 1e3)));
    let [name] = names;
    vec![
        Row::new(GROUP, NUMBER, name, rate(0))
            .baseline("SWE-ReX LocalRuntime.execute", rate(1))
            .baseline("subprocess.run (same interpreter)", rate(2))
            .target(Target::RatioAtLeast(0, 3.0))
            .note("median of the runs; both capture the whole stdout and return it (envrt: ExecuteRequest.max_output_bytes = N)"),
    ]
}

/// Runs `argv` on `leased` with its whole stdout captured; checks it had `bytes`.
async fn capture(leased: &Leased, argv: &[&str], bytes: u64) -> Result<Duration, String> {
    let mut request = ExecuteRequest::new(argv[0], argv[1..].iter().copied());
    request.max_output_bytes = Some(bytes as usize);
    let start = Instant::now();
    let result = leased
        .runtime
        .execute(&leased.lease, request)
        .await
        .map_err(|e| e.to_string())?;
    let took = start.elapsed();
    if !result.success() || result.stdout.len() as u64 != bytes {
        return Err(format!(
            "capturing {bytes} bytes: exit {:?}, got {}",
            result.exit_code,
            result.stdout.len()
        ));
    }
    Ok(took)
}

/// Remote execute `true`: a sandbox lease (the facade talking to the reference worker, a
/// separate long-lived process on this machine, over its protocol) vs SWE-ReX's
/// `RemoteRuntime.execute` against `swerex-remote` on 127.0.0.1.
async fn remote_rows(config: &Config) -> Vec<Row> {
    let names = [
        "remote execute `true` p50 vs SWE-ReX",
        "remote execute `true` p99 vs SWE-ReX",
        "remote execute `true` p50 vs SWE-ReX remote bash session",
    ]
    .map(String::from);
    remote_on_sandbox(config, names).await
}

async fn remote_on_sandbox(config: &Config, names: [String; 3]) -> Vec<Row> {
    let scratch = match crate::measure::Scratch::new("1g") {
        Ok(s) => s,
        Err(e) => return missing(&names, &e),
    };
    let peer = match Peer::start(&SWEREX, "swerex").await {
        Ok(p) => p,
        Err(e) => return missing(&names, &e),
    };
    let (leased, driver) = match crate::targets::sandbox::open(&scratch.join("leases")).await {
        Ok(o) => o,
        Err(e) => {
            peer.stop().await;
            return missing(&names, &e);
        }
    };
    // The isolation SWE-ReX's server leaves to whatever runs it, measured beside: the
    // worker's own bwrap with its init in front of `true`, as the worker starts a command.
    use crate::targets::sandbox::{bare_bwrap, bwrap_args, worker_path};
    let bare_dir = scratch.join("bare");
    let _ = std::fs::create_dir_all(&bare_dir);
    let args = match worker_path() {
        Ok(worker) => bwrap_args(&bare_dir, &worker),
        Err(e) => {
            crate::targets::sandbox::close(leased, driver).await;
            peer.stop().await;
            return missing(&names, &e);
        }
    };
    let via_init = [envrt_sandbox_worker::INIT_PATH, "--sandbox-init", "1", "--", "true"];
    let (s, p, args, via_init) = (&leased, &peer, &args, &via_init);
    let measured = interleave_reported(3, 30, config.exec_rounds() / 2, |i| async move {
        match i {
            0 => timed(s.run(&["true"])).await,
            1 => p.time("swerex-remote", &["true"], None).await,
            _ => timed(bare_bwrap(args, via_init, None)).await,
        }
    })
    .await;
    let session = session_rounds(config, measured.is_ok(), s, p, "swerex-remote-session").await;
    crate::targets::sandbox::close(leased, driver).await;
    peer.stop().await;
    let m = match measured {
        Ok(m) => m,
        Err(e) => return missing(&names, &e),
    };
    let [p50, p99, vs_session] = names;
    let ms = |i: usize, p: f64| Figure::ms(m.p(i, p));
    let mut rows = vec![
        Row::new(GROUP, NUMBER, p50, ms(0, 50.0))
            .baseline("SWE-ReX RemoteRuntime.execute", ms(1, 50.0))
            .baseline("bare bwrap via worker init", ms(2, 50.0))
            .note("envrt: a sandbox lease (facade → reference worker process → bwrap per command); SWE-ReX: RemoteRuntime (aiohttp, a new connection per request) → swerex-remote (uvicorn) on 127.0.0.1 → subprocess.run; \"bare bwrap via worker init\": the isolation alone, which SWE-ReX's server leaves to the container it runs in; no goal in the issue"),
        Row::new(GROUP, NUMBER, p99, ms(0, 99.0))
            .baseline("SWE-ReX RemoteRuntime.execute", ms(1, 99.0))
            .baseline("bare bwrap via worker init", ms(2, 99.0)),
    ];
    rows.push(match session {
        Some(Ok(m)) => Row::new(GROUP, NUMBER, vs_session, Figure::ms(m.p(0, 50.0)))
            .baseline("SWE-ReX remote bash session", Figure::ms(m.p(1, 50.0))),
        Some(Err(e)) => Row::missing(GROUP, NUMBER, vs_session, format!("error: {e}")),
        None => Row::missing(GROUP, NUMBER, vs_session, "n/a (the execute rows failed)"),
    });
    rows
}

/// Inspect AI's local sandbox exec vs envrt's Python package (and its Inspect provider)
/// in the same interpreter, and the local driver through the Rust facade.
async fn inspect_rows(config: &Config) -> Vec<Row> {
    let names = ["local exec `true` p50 vs Inspect local sandbox"].map(String::from);
    let peer = match Peer::start(&INSPECT, "inspect").await {
        Ok(p) => p,
        Err(e) => return missing(&names, &e),
    };
    let local = match Local::open(None).await {
        Ok(l) => l,
        Err(e) => {
            peer.stop().await;
            return missing(&names, &e);
        }
    };
    let package = peer.has("envrt-package");
    let (l, p) = (&local.leased, &peer);
    let measured = interleave_reported(4, 20, config.exec_rounds() / 2, |i| async move {
        match i {
            0 if package => p.time("envrt-package", &["true"], None).await,
            0 => Ok(Duration::ZERO),
            1 => p.time("inspect-local", &["true"], None).await,
            2 if package => p.time("envrt-inspect", &["true"], None).await,
            2 => Ok(Duration::ZERO),
            _ => timed(l.run(&["true"])).await,
        }
    })
    .await;
    local.leased.close().await;
    peer.stop().await;
    let m = match measured {
        Ok(m) => m,
        Err(e) => return missing(&names, &e),
    };
    let [p50] = names;
    let ms = |i: usize| Figure::ms(m.p(i, 50.0));
    let row = if package {
        Row::new(GROUP, NUMBER, p50, ms(0))
            .baseline("Inspect local sandbox exec", ms(1))
            .baseline("envrt Inspect provider exec", ms(2))
            .target(Target::RatioAtMost(0, 1.2))
    } else {
        Row::missing(
            GROUP,
            NUMBER,
            p50,
            "n/a (the envrt package is not installed in the venv)",
        )
        .baseline("Inspect local sandbox exec", ms(1))
    };
    vec![
        row.baseline("envrt local driver via Rust facade", ms(3))
            .note("ours: envrt's Python package, Lease.exec, in the same interpreter as Inspect (the venv's build; cargo xtask bench builds it release first)"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_venv_is_a_loud_skip_naming_it() {
        let err = SWEREX.python_in(std::path::Path::new("/nonexistent/venv")).unwrap_err();
        assert_eq!(
            err,
            "SKIPPED: no SWE-ReX virtual environment at /nonexistent/venv (bash scripts/swerex-venv.sh makes it; ENVRT_SWEREX_VENV moves it)"
        );
        let rows = missing(&["a".into(), "b".into()], &err);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].ours.as_ref().unwrap_err(), &err);
        assert_eq!(
            missing(&["a".into()], "boom")[0].ours.as_ref().unwrap_err(),
            "error: boom"
        );
    }

    #[tokio::test]
    async fn reported_times_are_kept_and_the_order_rotates() {
        let calls = std::sync::Mutex::new(Vec::new());
        let calls_ref = &calls;
        let m = interleave_reported(2, 1, 3, |i| async move {
            calls_ref.lock().unwrap().push(i);
            Ok(Duration::from_millis(10 + i as u64))
        })
        .await
        .unwrap();
        assert_eq!(m.samples[0], vec![Duration::from_millis(10); 3]);
        assert_eq!(m.samples[1], vec![Duration::from_millis(11); 3]);
        assert_eq!(calls.into_inner().unwrap(), [0, 1, 0, 1, 1, 0, 0, 1]);
    }

    /// The driver against a real interpreter: the SWE-ReX venv when the set-up made it.
    #[tokio::test]
    async fn the_driver_times_real_commands_and_reports_failures() {
        if let Err(skip) = SWEREX.python() {
            println!("{skip}");
            return;
        }
        let peer = Peer::start(&SWEREX, "swerex").await.unwrap();
        for op in ["swerex-local", "swerex-remote", "swerex-session", "subprocess"] {
            assert!(peer.has(op), "{op} in {:?}", peer.ops);
        }
        let took = peer
            .time("swerex-local", &["head", "-c", "1000", "/dev/zero"], Some(1000))
            .await;
        assert!(took.unwrap() > Duration::ZERO);
        assert_eq!(
            peer.time("swerex-local", &["false"], None).await.unwrap_err(),
            "RuntimeError: ['false'] exited 1"
        );
        assert_eq!(
            peer.time("subprocess", &["head", "-c", "10", "/dev/zero"], Some(11))
                .await
                .unwrap_err(),
            "RuntimeError: subprocess: stdout had 10 bytes, not 11"
        );
        assert_eq!(
            peer.time("nope", &["true"], None).await.unwrap_err(),
            "KeyError: 'nope'"
        );
        peer.stop().await;
    }
}
