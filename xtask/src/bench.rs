//! `cargo xtask bench [--quick] [--only ROW]...`: builds `envrt-bench` (and the sandbox
//! workers its drivers need) in release mode with every workspace driver, runs it, and keeps its table as
//! JSON (`target/bench/latest.json`) and Markdown (`target/bench/latest.md`).

use std::path::PathBuf;
use std::process::Command;

use crate::util::{cargo, root, run};

pub(crate) fn run_bench(args: &[String]) -> Result<(), String> {
    let mut passed = Vec::new();
    let mut only_python = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => passed.push(arg.clone()),
            "--only" => {
                let row = it.next().ok_or("--only needs a row number or group key")?;
                if row == "python" {
                    only_python = true;
                    continue;
                }
                passed.extend(["--only".to_string(), row.clone()]);
            }
            other => return Err(format!("unknown option {other:?}; bench takes --quick and --only ROW")),
        }
    }
    if only_python {
        return crate::python::run_bench(passed.iter().any(|a| a == "--quick"));
    }
    // One bench feature per workspace driver the bench has rows for, named after its key (a
    // driver the bench has no feature for, such as the example driver, is not measured).
    let bench_features = crate::drivers::features_of("envrt-bench")?;
    let drivers: Vec<crate::drivers::Driver> = crate::drivers::workspace()?
        .into_iter()
        .filter(|d| bench_features.contains(&d.key))
        .collect();
    let features: Vec<&str> = drivers.iter().map(|d| d.key.as_str()).collect();
    eprintln!("xtask: drivers present: {features:?}");
    // One cargo invocation for the bench and the worker, so both share one feature set
    // and the sandbox crate is compiled once.
    let mut build = cargo();
    build.args(["build", "--release", "-p", "envrt-bench", "--no-default-features"]);
    if !features.is_empty() {
        let qualified: Vec<String> = features.iter().map(|f| format!("envrt-bench/{f}")).collect();
        build.args(["--features", &qualified.join(",")]);
    }
    build.args(["--bin", "envrt-bench"]);
    for worker in drivers.iter().filter_map(|d| d.worker.as_deref()) {
        build.args(["-p", worker, "--bin", worker]);
    }
    run(build)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    let out_dir = root().join("target/bench");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    // The peer rows time the envrt Python package beside Inspect AI: build it release.
    let only: Vec<&String> = passed.windows(2).filter(|w| w[0] == "--only").map(|w| &w[1]).collect();
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
