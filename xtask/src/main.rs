//! Project automation. `cargo xtask` with no arguments lists the tasks.

mod bench;
mod ci;
mod conformance;
#[cfg(test)]
mod tidy;
mod util;

use std::process::ExitCode;

const TASKS: &str = "\
cargo xtask <task>

tasks:
  demo                   the main job: build envrt, then acquire a local lease, copy a folder
                         in, run a command, copy results out, show capabilities, release
  ci                     fmt check, clippy -D warnings, doc -Dwarnings, every test
  conformance [options]  the conformance kit against built-in drivers or a plugin worker
      --driver local|docker|sandbox|all   (default all)
      --worker COMMAND --manifest FILE    run the kit against an external plugin worker
      --cases N                           property-test cases per check
      --report PATH                       JSON report (default target/conformance/report.json)
  setup                  install and start what the tests need (apt packages, dockerd,
                         the test image, the SDK fixture); idempotent
  docker-image           build the local test image envrt-test:latest
  bench [--quick] [--only ROW]  benchmarks as ratios to baselines (target/bench/latest.json)
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => util::run_script("scripts/setup.sh", &[]).and_then(|()| ci::run_all()),
        Some("demo") => demo(),
        Some("setup") => util::run_script("scripts/setup.sh", &[]),
        Some("conformance") => conformance::run(&args[1..]),
        Some("bench") => bench::run_bench(&args[1..]),
        Some("docker-image") => util::run_script("scripts/docker-test-image.sh", &[]),
        Some(other) => Err(format!("unknown task {other:?}\n\n{TASKS}")),
        None => {
            print!("{TASKS}");
            return ExitCode::SUCCESS;
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Builds the `envrt` binary and runs the main-job script with it.
fn demo() -> Result<(), String> {
    let mut build = util::cargo();
    build.args(["build", "--quiet", "-p", "envrt", "--bin", "envrt"]);
    util::run(build)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| util::root().join("target"));
    let target = if target.is_absolute() {
        target
    } else {
        util::root().join(target)
    };
    let mut script = std::process::Command::new("sh");
    script
        .arg(util::root().join("crates/envrt/scripts/main-job.sh"))
        .env("ENVRT", target.join("debug/envrt"));
    util::run(script)
}
