//! `cargo xtask bench [--quick] [--only ROW]...`: builds `envrt-bench` (and the sandbox
//! workers its drivers need, and the process supervisor, also static for Docker leases
//! when the process session rows run) in release mode, runs it, and keeps its table as
//! JSON (`target/bench/latest.json`) and Markdown (`target/bench/latest.md`).
//! `--runs N`, `--report PATH.md` (and `PATH.json` beside it) and `--compare OLD.json` go
//! to the bench: N runs, one report of every row's median run with its floor and spread,
//! and what moved since an earlier report.
//! `cargo xtask bench --list` runs a debug build with `--list` instead: every scenario with
//! its row number, groups and driver targets, nothing measured.

use std::path::PathBuf;
use std::process::Command;

use crate::util::{cargo, root, run};

pub(crate) fn run_bench(args: &[String]) -> Result<(), String> {
    let mut passed = Vec::new();
    let mut only_python = false;
    let mut list = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => passed.push(arg.clone()),
            // The report over several runs and the comparison with an earlier one are the
            // bench's own (crates/bench/src/summary.rs); a relative path is the caller's.
            "--runs" | "--report" | "--compare" => {
                let value = it.next().ok_or(format!("{arg} needs a value"))?;
                let value = if arg == "--runs" {
                    value.clone()
                } else {
                    std::path::absolute(value)
                        .map_err(|e| format!("{value}: {e}"))?
                        .display()
                        .to_string()
                };
                passed.extend([arg.clone(), value]);
            }
            "--list" => list = true,
            "--only" => {
                let row = it.next().ok_or("--only needs a row number or group key")?;
                if row == "python" {
                    only_python = true;
                    continue;
                }
                passed.extend(["--only".to_string(), row.clone()]);
            }
            other => {
                return Err(format!(
                    "unknown option {other:?}; bench takes --quick, --only ROW, --runs N, --report PATH.md, --compare OLD.json and --list"
                ));
            }
        }
    }
    if only_python {
        return crate::python::run_bench(passed.iter().any(|a| a == "--quick"));
    }
    if list {
        let mut bench = cargo();
        bench.args([
            "run",
            "--quiet",
            "-p",
            "envrt-bench",
            "--bin",
            "envrt-bench",
            "--",
            "--list",
        ]);
        return run(bench);
    }
    let drivers = crate::drivers::workspace()?;
    // One cargo invocation for the bench and the workers, so that they share one feature
    // set and the sandbox crate is compiled once.
    // The process supervisor goes beside the bench and the workers: the local, sandbox and
    // SSH leases of the process session rows (10) find it there.
    let mut build = cargo();
    build.args(["build", "--release", "-p", "envrt-bench", "--bin", "envrt-bench"]);
    build.args(["-p", "envrt-agent", "--bin", "envrt-agent"]);
    // The egress proxy a Docker lease's traffic goes through (row 13), beside the bench.
    build.args(["-p", "envrt-egress", "--bin", "envrt-egress"]);
    // The service rows (15) start the `envrt` binary beside the bench.
    build.args(["-p", "envrt-cli", "--bin", "envrt"]);
    for worker in drivers.iter().filter_map(|d| d.worker.as_deref()) {
        build.args(["-p", worker, "--bin", worker]);
    }
    run(build)?;
    let only: Vec<&String> = passed.windows(2).filter(|w| w[0] == "--only").map(|w| &w[1]).collect();
    // Docker leases need the supervisor built static (it runs in images without a C
    // library of their own); the bench finds it in the target directory's
    // `x86_64-unknown-linux-gnu/release`.
    let docker_sessions = [
        "10",
        "11",
        "exec",
        "processes",
        "processes-spawn",
        "processes-replay",
        "exec-supervisor",
        "exec-supervisor-docker",
    ];
    if only.is_empty() || only.iter().any(|o| docker_sessions.contains(&o.as_str())) {
        let mut agent = cargo();
        agent
            .args(["build", "--release", "-p", "envrt-agent", "--bin", "envrt-agent"])
            .args(["--target", "x86_64-unknown-linux-gnu"])
            .env("RUSTFLAGS", "-C target-feature=+crt-static");
        run(agent)?;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    let out_dir = root().join("target/bench");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    // The peer rows time the envrt Python package beside Inspect AI: build it release.
    if only.is_empty() || only.iter().any(|o| ["peers", "9"].contains(&o.as_str())) {
        crate::python::prepare_peers()?;
    }
    let mut bench = Command::new(target.join("release/envrt-bench"));
    bench
        .args(&passed)
        .arg("--json")
        .arg(out_dir.join("latest.json"))
        .arg("--markdown")
        .arg(out_dir.join("latest.md"))
        .current_dir(root());
    run(bench)?;
    eprintln!("xtask: wrote {}", out_dir.join("latest.json").display());
    if passed.iter().any(|a| a == "--only") {
        return Ok(());
    }
    crate::python::run_bench(passed.iter().any(|a| a == "--quick"))
}
