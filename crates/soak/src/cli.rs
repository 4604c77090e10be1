//! `envrt` CLI holders beside the cycles: each runs one `envrt exec` in its own state
//! directory; 1 % of them (at least one) are SIGKILLed once their command runs, and
//! `envrt gc` then has to collect what they left.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::{Options, Shared, fail, time};

/// Holders running at once.
const AT_ONCE: usize = 2;
/// Bound on one CLI invocation.
const LIMIT: Duration = Duration::from_secs(300);

use envrt_soak::cli_state_dir as state_dir;

fn config(key: &str) -> String {
    let mut text = format!("[[environment]]\nid = \"soak\"\ndriver = \"{key}\"\n");
    if key == "docker" {
        text.push_str(&format!(
            "[environment.config]\nimage = \"{}\"\n",
            crate::drivers::image()
        ));
    }
    if key == "ssh" {
        // The soak's runtime read the same settings first: a missing sshd failed there.
        if let Ok(host) = envrt_soak::ssh::Host::from_env_file() {
            text.push_str("[environment.config]\n");
            for (name, value) in crate::drivers::ssh_config(&host) {
                text.push_str(&format!("{name} = {value}\n"));
            }
        }
    }
    text
}

/// Whether holder `n` of `total` is the one in a hundred that gets killed.
pub(crate) fn killed(n: usize, total: usize) -> bool {
    n % 100 == (total / 2) % 100
}

/// Runs `options.cli` holders, then `envrt gc`.
pub(crate) async fn run(key: &str, scratch: &Path, options: &Options, record: Shared) {
    if options.cli == 0 {
        return;
    }
    let envrt = match crate::sibling("envrt") {
        Ok(path) => path,
        Err(e) => return fail(&record, format!("CLI holders: {e}")),
    };
    let state = state_dir(scratch);
    let config_path = scratch.join("envrt.toml");
    if let Err(e) = std::fs::write(&config_path, config(key)) {
        return fail(&record, format!("CLI config: {e}"));
    }
    let base = Arc::new((envrt, state, config_path));
    let next = Arc::new(AtomicUsize::new(0));
    let total = options.cli;
    let mut workers = Vec::new();
    for _ in 0..AT_ONCE {
        let (base, next, record) = (base.clone(), next.clone(), record.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= total {
                    return 0;
                }
                let kill = killed(n, total);
                let t = Instant::now();
                match holder(&base, kill).await {
                    Ok(()) if !kill => time(&record, "cli_exec", t.elapsed()),
                    Ok(()) => {}
                    Err(e) => fail(&record, format!("CLI holder {n}: {e}")),
                }
            }
        }));
    }
    for worker in workers {
        let _ = worker.await;
    }
    let kills = (0..total).filter(|n| killed(*n, total)).count();
    if !options.gc {
        return;
    }
    let t = Instant::now();
    match envrt_command(&base).arg("gc").output().await {
        Ok(out) => {
            time(&record, "cli_gc", t.elapsed());
            let text = String::from_utf8_lossy(&out.stdout);
            let expected = format!("gc: {kills} released, 0 failed");
            if !out.status.success() || !text.lines().any(|l| l == expected) {
                fail(
                    &record,
                    format!(
                        "envrt gc: {}, expected \"{expected}\": {text}{}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    ),
                );
            }
        }
        Err(e) => fail(&record, format!("envrt gc: {e}")),
    }
}

/// Runs `envrt gc` without checking it: the clean-up after a `--no-gc` run.
pub(crate) async fn collect(scratch: &Path) {
    if let Ok(envrt) = crate::sibling("envrt") {
        let base = (envrt, state_dir(scratch), scratch.join("envrt.toml"));
        let _ = envrt_command(&base).arg("gc").output().await;
    }
}

fn envrt_command(base: &(PathBuf, PathBuf, PathBuf)) -> Command {
    let (envrt, state, config) = base;
    let mut command = Command::new(envrt);
    command
        .arg("--state-dir")
        .arg(state)
        .arg("--config")
        .arg(config)
        .env_remove("ENVRT_CONFIG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// One `envrt exec`; when `kill`, SIGKILLed as soon as its command has started.
async fn holder(base: &(PathBuf, PathBuf, PathBuf), kill: bool) -> Result<(), String> {
    let script = if kill {
        "echo started; exec sleep 300"
    } else {
        "echo started; sleep 0.1"
    };
    let mut child = envrt_command(base)
        .args(["exec", "--env-id", "soak", "-n", "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start envrt: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(LIMIT, lines.next_line())
        .await
        .map_err(|_| "no output in time".to_owned())?
        .map_err(|e| e.to_string())?;
    if first.as_deref() != Some("started") {
        let out = child.wait_with_output().await.map_err(|e| e.to_string())?;
        return Err(format!(
            "first line {first:?}, {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if kill {
        child.start_kill().map_err(|e| e.to_string())?;
        let _ = child.wait().await;
        return Ok(());
    }
    let out = tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .map_err(|_| "did not finish in time".to_owned())?
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}
