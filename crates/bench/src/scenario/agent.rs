//! Agent-shaped workloads (row 14): what a coding agent's harness does to an environment,
//! timed end to end on each target beside the same steps done bare on the host (the
//! floor) and the peers that can run them here.
//!
//! - `agent-loop` (a): a SWE-bench-shaped loop — sync a repository of 2,000 files in, run
//!   50 short commands (`ls -la`, `cat`, `grep -rn`, `python3 -c`) in it, apply a patch
//!   (`patch -p1`), run its test (`python3 test_calc.py`, which fails unless the patch
//!   applied), sync the repository out — on local, Docker (the Debian image of
//!   `scripts/docker-debian-image.sh`), sandbox and ssh; SWE-ReX's `LocalRuntime` does the
//!   same steps (`upload`, `execute`) beside the local row.
//! - `agent-many` (b): 64 agents at once, each the loop with 10 commands on a lease of its
//!   own (local driver), against 64 bare loops at once: throughput in steps per second and
//!   p99 per step.
//!
//! The floor of every loop is the same steps bare on the host: `cp -a` in, a
//! `posix_spawn` per command in the copied tree, `cp -a` out.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use envrt_runtime_core::ExecuteRequest;
use envrt_runtime_core::SyncFile;

use crate::Config;
use crate::baseline;
use crate::facade::Leased;
use crate::measure::{Scratch, median, percentile_ms, q, sh};
use crate::report::{Figure, Row, Target};
use crate::targets::local::Local;
use crate::targets::{docker, sandbox, ssh};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};

/// The row number of the agent-shaped rows.
pub(crate) const NUMBER: u8 = 14;
/// The loop's group key.
pub(crate) const LOOP: &str = "agent-loop";
/// The concurrent agents' group key.
pub(crate) const MANY: &str = "agent-many";

/// Agents at once in `agent-many`.
const AGENTS: usize = 64;

/// The module the patch fixes and the test checks.
const CALC: &str = "def add(a, b):\n    return a - b\n";
const TEST: &str = "import calc\nassert calc.add(2, 3) == 5, calc.add(2, 3)\nprint('ok')\n";
const PATCH: &str =
    "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n";

/// Writes the repository: `files` Python modules of about 1 KiB in directories of 100,
/// plus `calc.py`, `test_calc.py` and `fix.patch`.
pub(crate) fn make_repo(root: &Path, files: usize) -> Result<(), String> {
    let write = |path: PathBuf, text: &str| std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()));
    for i in 0..files {
        let dir = root.join(format!("pkg/d{:02}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let mut text =
            format!("\"\"\"Module {i}.\"\"\"\n\n\ndef f_{i}(x):\n    # TODO: cache this\n    return x * {i}\n");
        while text.len() < 1024 {
            text.push_str(&format!(
                "# filler line for module {i}, so the file is about a kibibyte\n"
            ));
        }
        write(dir.join(format!("mod_{i:04}.py")), &text)?;
    }
    write(root.join("calc.py"), CALC)?;
    write(root.join("test_calc.py"), TEST)?;
    write(root.join("fix.patch"), PATCH)
}

/// The `n` short commands of a loop, run in the repository.
pub(crate) fn commands(n: usize) -> Vec<Vec<String>> {
    let shapes: [&[&str]; 4] = [
        &["ls", "-la", "pkg/d00"],
        &["cat", "calc.py"],
        &["grep", "-rn", "--include=*.py", "-c", "TODO", "pkg/d01"],
        &[
            "python3",
            "-c",
            "import sys; print(sum(range(1000)), sys.version_info[0])",
        ],
    ];
    (0..n)
        .map(|i| shapes[i % shapes.len()].iter().map(|s| s.to_string()).collect())
        .collect()
}

/// The patch and the test, after the commands.
fn finish() -> [Vec<String>; 2] {
    [
        ["patch", "-p1", "-i", "fix.patch"].map(String::from).into(),
        ["python3", "test_calc.py"].map(String::from).into(),
    ]
}

/// Where a loop runs: a lease through the facade, or bare on the host (the floor).
#[derive(Clone, Copy)]
pub(crate) enum Place<'a> {
    Lease(&'a Leased),
    Bare,
}

/// The steps of one loop, each timed: sync in, each command, patch, test, sync out.
pub(crate) struct Steps {
    pub(crate) each: Vec<Duration>,
    pub(crate) total: Duration,
}

/// One loop: `repo` in as `work` (a path relative to the workspace, or a host path when
/// bare), `commands` short commands, patch, test, out to `out` (a host path, absent).
pub(crate) async fn run_loop(
    place: Place<'_>,
    repo: &Path,
    work: &str,
    commands: &[Vec<String>],
    out: &Path,
) -> Result<Steps, String> {
    let start = Instant::now();
    let mut each = Vec::with_capacity(commands.len() + 4);
    let mut step = Instant::now();
    let mut mark = |each: &mut Vec<Duration>| {
        each.push(step.elapsed());
        step = Instant::now();
    };
    match place {
        Place::Lease(l) => {
            let source = repo.display().to_string();
            l.runtime
                .sync_in(&l.lease, &[sync_op(SyncFile::directory(&source, work))])
                .await
                .map_err(|e| format!("sync in: {e}"))?;
        }
        Place::Bare => sh(&format!("cp -a {} {}", q(repo), q(Path::new(work)))).await?,
    }
    mark(&mut each);
    let [patch, test] = finish();
    for argv in commands.iter().chain([&patch, &test]) {
        match place {
            Place::Lease(l) => {
                let mut request = ExecuteRequest::new(&argv[0], argv[1..].iter().cloned());
                request.cwd = Some(work.to_owned());
                let result = l.runtime.execute(&l.lease, request).await.map_err(|e| e.to_string())?;
                if !result.success() {
                    return Err(format!(
                        "{argv:?} exited {:?}: {}",
                        result.exit_code,
                        String::from_utf8_lossy(&result.stderr).trim()
                    ));
                }
            }
            Place::Bare => {
                // Async, so that 64 bare loops at once run at once (a blocking spawn would
                // hold one of the runtime's few worker threads per command).
                let status = tokio::process::Command::new(&argv[0])
                    .args(&argv[1..])
                    .current_dir(work)
                    .stdin(std::process::Stdio::null())
                    .output()
                    .await
                    .map_err(|e| format!("{}: {e}", argv[0]))?;
                if !status.status.success() {
                    return Err(format!("{argv:?} exited {}", status.status));
                }
            }
        }
        mark(&mut each);
    }
    match place {
        Place::Lease(l) => {
            let target = out.display().to_string();
            l.runtime
                .sync_out(&l.lease, &[sync_op(SyncFile::directory(work, &target))])
                .await
                .map_err(|e| format!("sync out: {e}"))?;
        }
        Place::Bare => sh(&format!("cp -a {} {}", q(Path::new(work)), q(out))).await?,
    }
    mark(&mut each);
    // The patch must have arrived: the synced-out module adds.
    let calc = std::fs::read_to_string(out.join("calc.py")).map_err(|e| format!("{}/calc.py: {e}", out.display()))?;
    if !calc.contains("a + b") {
        return Err(format!("the patched calc.py did not come out: {calc:?}"));
    }
    Ok(Steps {
        each,
        total: start.elapsed(),
    })
}

fn sync_op(file: SyncFile) -> envrt_runtime_core::SyncOperation {
    envrt_runtime_core::SyncOperation {
        operation_id: "bench-agent".into(),
        files: vec![file],
        post_upload_commands: Vec::new(),
    }
}

/// Removes what a round left in the lease (its copy of the repository).
pub(crate) async fn clean(place: Place<'_>, work: &str) {
    match place {
        Place::Lease(l) => {
            let _ = l.run(&["rm", "-rf", work]).await;
        }
        Place::Bare => baseline::remove(Path::new(work)),
    }
}

/// Rounds of the loop per contender (the quick run's one round is meant to be repeated
/// with `--runs`: each loop takes seconds on the slower targets).
fn rounds(config: &Config) -> usize {
    if config.quick { 1 } else { 5 }
}

/// SWE-ReX running the loop in its own interpreter (`crates/bench/agent_driver.py`).
pub(crate) struct Peer {
    child: tokio::process::Child,
    io: tokio::sync::Mutex<(
        tokio::process::ChildStdin,
        Lines<BufReader<tokio::process::ChildStdout>>,
    )>,
}

impl Peer {
    /// Starts the driver under SWE-ReX's venv (`ENVRT_SWEREX_VENV`, default
    /// `/opt/envrt-swerex-venv`, made by `scripts/swerex-venv.sh`).
    pub(crate) async fn start() -> Result<Peer, String> {
        let venv = std::env::var("ENVRT_SWEREX_VENV").unwrap_or_else(|_| "/opt/envrt-swerex-venv".into());
        let python = Path::new(&venv).join("bin/python");
        if !python.is_file() {
            return Err(format!(
                "no SWE-ReX virtual environment at {venv} (bash scripts/swerex-venv.sh makes it)"
            ));
        }
        let mut child = tokio::process::Command::new(&python)
            .arg(DRIVER)
            .arg("swerex-local")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: {e}", python.display()))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        reply(&mut lines).await?;
        Ok(Peer {
            child,
            io: tokio::sync::Mutex::new((stdin, lines)),
        })
    }

    /// One loop, timed inside the peer's interpreter.
    async fn run(&self, repo: &Path, work: &Path, out: &Path, commands: &[Vec<String>]) -> Result<Duration, String> {
        let mut all = commands.to_vec();
        all.extend(finish());
        let request = serde_json::json!({"repo": repo, "work": work, "out": out, "commands": all}).to_string() + "\n";
        let mut io = self.io.lock().await;
        let (stdin, lines) = &mut *io;
        stdin
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("agent driver: {e}"))?;
        let answer = reply(lines).await?;
        answer["ns"]
            .as_u64()
            .map(Duration::from_nanos)
            .ok_or_else(|| format!("agent driver said {answer}"))
    }

    /// Closes its input and waits for it to exit.
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

async fn reply(lines: &mut Lines<BufReader<tokio::process::ChildStdout>>) -> Result<serde_json::Value, String> {
    let line = lines
        .next_line()
        .await
        .map_err(|e| format!("agent driver: {e}"))?
        .ok_or("the agent driver exited (its stderr is above)")?;
    let value: serde_json::Value =
        serde_json::from_str(&line).map_err(|e| format!("agent driver said {line:?}: {e}"))?;
    match value["error"].as_str() {
        Some(error) => Err(error.to_owned()),
        None => Ok(value),
    }
}

/// The driver script of the SWE-ReX loop.
const DRIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/agent_driver.py");

/// The loop row of one target: ours, the floor (the same steps bare on the host) and, on
/// local, SWE-ReX, interleaved (one loop of each per round, the order rotated); medians.
pub(crate) async fn loop_row(
    config: &Config,
    target: &str,
    place: Place<'_>,
    scratch: &Scratch,
    peer: Option<&Peer>,
) -> Result<Row, String> {
    let repo = scratch.join("repo");
    if !repo.exists() {
        make_repo(&repo, 2_000)?;
    }
    let cmds = commands(50);
    let contenders = if peer.is_some() { 3 } else { 2 };
    let mut times = vec![Vec::new(); contenders];
    for round in 0..rounds(config) {
        for k in 0..contenders {
            let which = (k + round) % contenders;
            let out = scratch.join(&format!("out-{target}-{which}"));
            baseline::remove(&out);
            let bare_work = scratch.join("bare-work");
            let took = match (which, peer) {
                (2, Some(peer)) => peer.run(&repo, &bare_work, &out, &cmds).await,
                _ => {
                    let (p, work) = if which == 0 {
                        (place, "repo".to_owned())
                    } else {
                        (Place::Bare, bare_work.display().to_string())
                    };
                    let steps = run_loop(p, &repo, &work, &cmds, &out).await;
                    clean(p, &work).await;
                    steps.map(|s| s.total)
                }
            };
            baseline::remove(&out);
            times[which].push(took?.as_secs_f64() * 1e3);
        }
    }
    let mut row = Row::new(
        LOOP,
        NUMBER,
        format!("agent loop on {target}: 2,000 files in, 50 commands, patch, test, out"),
        Figure::ms(median(&mut times[0])),
    );
    if contenders == 3 {
        row = row
            .baseline(
                "SWE-ReX LocalRuntime (upload, execute)",
                Figure::ms(median(&mut times[2])),
            )
            .target(Target::RatioAtMost(0, 1.0));
    }
    Ok(row.floor("the same steps bare on the host", Figure::ms(median(&mut times[1]))))
}

/// Row 14 (a) on every target; the peers beside the targets they compare with.
pub(crate) async fn loops(config: &Config) -> Vec<Row> {
    let name = |t: &str| format!("agent loop on {t}: 2,000 files in, 50 commands, patch, test, out");
    let scratch = match Scratch::new("2g") {
        Ok(s) => s,
        Err(e) => return vec![Row::missing(LOOP, NUMBER, name("local"), format!("error: {e}"))],
    };
    let mut rows = Vec::new();
    // local, with SWE-ReX beside it.
    let peer = Peer::start().await;
    match Local::open(Some(scratch.join("leases"))).await {
        Ok(local) => {
            let row = loop_row(
                config,
                "local",
                Place::Lease(&local.leased),
                &scratch,
                peer.as_ref().ok(),
            )
            .await;
            local.leased.close().await;
            rows.push(match (row, &peer) {
                (Ok(row), Err(why)) => row.note(format!("SWE-ReX not run: {why}")),
                (Ok(row), Ok(_)) => row.note("SWE-ReX: upload (copytree) in, execute per command with cwd, upload out (it has no download); timed inside its interpreter"),
                (Err(e), _) => Row::missing(LOOP, NUMBER, name("local"), format!("error: {e}")),
            });
        }
        Err(e) => rows.push(Row::missing(LOOP, NUMBER, name("local"), format!("error: {e}"))),
    }
    if let Ok(peer) = peer {
        peer.stop().await;
    }
    // Docker, in the Debian image.
    let docker_name = name("docker (envrt-debian:bookworm)");
    match docker::open_image(DEBIAN_IMAGE).await {
        Ok(d) => {
            let row = loop_row(
                config,
                "docker (envrt-debian:bookworm)",
                Place::Lease(&d.leased),
                &scratch,
                None,
            )
            .await;
            d.leased.close().await;
            rows.push(match row {
                Ok(row) => row.note(INSPECT_DOCKER),
                Err(e) => Row::missing(LOOP, NUMBER, docker_name, format!("error: {e}")),
            });
        }
        Err(e) => rows.push(Row::missing(
            LOOP,
            NUMBER,
            docker_name,
            if e.starts_with("n/a") { e } else { format!("error: {e}") },
        )),
    }
    // The sandbox.
    match sandbox::open(&scratch.join("sandbox")).await {
        Ok((leased, driver)) => {
            let row = loop_row(config, "sandbox", Place::Lease(&leased), &scratch, None).await;
            sandbox::close(leased, driver).await;
            rows.push(row.unwrap_or_else(|e| Row::missing(LOOP, NUMBER, name("sandbox"), format!("error: {e}"))));
        }
        Err(e) => rows.push(Row::missing(LOOP, NUMBER, name("sandbox"), e)),
    }
    // ssh.
    match ssh::open().await {
        Ok(d) => {
            let row = loop_row(config, "ssh", Place::Lease(&d.leased), &scratch, None).await;
            d.close().await;
            rows.push(row.unwrap_or_else(|e| Row::missing(LOOP, NUMBER, name("ssh"), format!("error: {e}"))));
        }
        Err(e) => rows.push(Row::missing(LOOP, NUMBER, name("ssh"), e)),
    }
    rows
}

/// Why Inspect AI's Docker sandbox provider has no figure beside the Docker loop.
pub(crate) const INSPECT_DOCKER: &str = "Inspect AI's Docker sandbox provider not run: it drives `docker compose`, and this machine's engine (Debian's docker.io 20.10) has no compose plugin and none can be pulled";

/// The Debian image of the Docker loop.
const DEBIAN_IMAGE: &str = "envrt-debian:bookworm";

/// Row 14 (b): `AGENTS` local leases each running the loop with 10 commands at once, vs
/// as many bare loops at once; throughput in steps per second and p99 per step.
pub(crate) async fn many(config: &Config) -> Vec<Row> {
    let names = [
        format!("{AGENTS} concurrent agent loops (local, 10 commands each): throughput"),
        format!("{AGENTS} concurrent agent loops (local): p99 per step"),
    ];
    let fail = |e: String| {
        names
            .iter()
            .map(|n| Row::missing(MANY, NUMBER, n.clone(), format!("error: {e}")))
            .collect()
    };
    let scratch = match Scratch::new("4g") {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let repo = scratch.join("repo");
    if let Err(e) = make_repo(&repo, 2_000) {
        return fail(e);
    }
    let mut leases = Vec::new();
    for _ in 0..AGENTS {
        match Local::open(Some(scratch.join("leases"))).await {
            Ok(l) => leases.push(l),
            Err(e) => {
                for l in leases {
                    l.leased.close().await;
                }
                return fail(e);
            }
        }
    }
    let cmds = commands(10);
    let wave = |bare: bool| {
        let (repo, cmds, scratch, leases) = (&repo, &cmds, &scratch, &leases);
        async move {
            let start = Instant::now();
            let runs = (0..AGENTS).map(|i| async move {
                let out = scratch.join(&format!("many-out-{i}"));
                let (place, work) = if bare {
                    (
                        Place::Bare,
                        scratch.join(&format!("many-bare-{i}")).display().to_string(),
                    )
                } else {
                    (Place::Lease(&leases[i].leased), "repo".to_owned())
                };
                let steps = run_loop(place, repo, &work, cmds, &out).await;
                clean(place, &work).await;
                baseline::remove(&out);
                steps
            });
            let all = futures::future::join_all(runs).await;
            let took = start.elapsed();
            let mut each = Vec::new();
            for steps in all {
                each.extend(steps?.each);
            }
            Ok::<_, String>((each.len() as f64 / took.as_secs_f64(), each))
        }
    };
    let mut results = [(Vec::new(), Vec::new()), (Vec::new(), Vec::new())];
    let mut error = None;
    for round in 0..(if config.quick { 1 } else { 3 }) {
        for k in 0..2 {
            let bare = (k + round) % 2 == 1;
            match wave(bare).await {
                Ok((rate, each)) => {
                    results[bare as usize].0.push(rate);
                    results[bare as usize].1.extend(each);
                }
                Err(e) => error = Some(e),
            }
        }
    }
    for l in leases {
        l.leased.close().await;
    }
    if let Some(e) = error {
        return fail(e);
    }
    let [(mut ours_rate, ours_steps), (mut bare_rate, bare_steps)] = results;
    vec![
        Row::new(MANY, NUMBER, names[0].clone(), Figure::ops(median(&mut ours_rate)))
            .floor("the same loops bare on the host", Figure::ops(median(&mut bare_rate)))
            .note("steps per second: sync in, each command, patch, test, sync out count one each; one lease per agent"),
        Row::new(
            MANY,
            NUMBER,
            names[1].clone(),
            Figure::ms(percentile_ms(&ours_steps, 99.0)),
        )
        .floor(
            "the same loops bare on the host",
            Figure::ms(percentile_ms(&bare_steps, 99.0)),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_bare_loop_applies_the_patch_and_brings_the_repository_out() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        make_repo(&repo, 150).unwrap();
        assert!(repo.join("pkg/d01/mod_0149.py").is_file());
        assert!(std::fs::metadata(repo.join("pkg/d00/mod_0000.py")).unwrap().len() >= 1024);
        let work = dir.path().join("work").display().to_string();
        let out = dir.path().join("out");
        let steps = run_loop(Place::Bare, &repo, &work, &commands(5), &out).await.unwrap();
        // sync in, 5 commands, patch, test, sync out.
        assert_eq!(steps.each.len(), 9);
        assert_eq!(
            std::fs::read_to_string(out.join("calc.py")).unwrap(),
            "def add(a, b):\n    return a + b\n"
        );
        // Without the patch the test fails, so a loop whose patch did not apply cannot pass.
        let unpatched = std::process::Command::new("python3")
            .arg("test_calc.py")
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(!unpatched.status.success());
        assert_eq!(commands(6)[4], commands(6)[0]);
    }
}
