//! `cargo xtask bench [--quick] [--only ROW]...`: builds `envrt-bench` (and the sandbox
//! worker) in release mode with the drivers that exist, runs it, and keeps its table as
//! JSON (`target/bench/latest.json`) and Markdown (`target/bench/latest.md`).

use std::path::PathBuf;
use std::process::Command;

use crate::util::{cargo, root, run};

/// Driver features of `envrt-bench`, the crate source file that proves the driver is
/// there, and the text it must contain.
const DRIVERS: &[(&str, &str, &str)] = &[
    ("local", "crates/driver-local/src/lib.rs", "pub struct LocalDriver"),
    ("docker", "crates/driver-docker/src", "pub struct DockerDriver"),
    (
        "sandbox",
        "crates/driver-plugin-sandbox/src",
        "pub struct SandboxDriver",
    ),
    ("ssh", "crates/driver-ssh/src/lib.rs", "pub struct SshDriver"),
];

/// Whether some file under `path` (a file or a directory) contains `needle`.
fn contains(path: &PathBuf, needle: &str) -> bool {
    if path.is_dir() {
        std::fs::read_dir(path)
            .map(|entries| entries.flatten().any(|e| contains(&e.path(), needle)))
            .unwrap_or(false)
    } else {
        std::fs::read_to_string(path).is_ok_and(|s| s.contains(needle))
    }
}

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
    let features: Vec<&str> = DRIVERS
        .iter()
        .filter(|(_, path, needle)| contains(&root().join(path), needle))
        .map(|(feature, _, _)| *feature)
        .collect();
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
    if features.contains(&"sandbox") {
        build.args(["-p", "envrt-sandbox-worker", "--bin", "envrt-sandbox-worker"]);
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
