//! Project automation. `cargo xtask` with no arguments lists the tasks.

mod bench;
mod ci;
mod conformance;
mod drivers;
mod fuzz;
#[cfg(test)]
mod layers;
mod python;
mod schemathesis;
mod soak;
mod stress;
mod testlog;
#[cfg(test)]
mod tidy;
#[cfg(test)]
mod tidy_drivers;
mod typescript;
mod util;

use std::process::ExitCode;

const TASKS: &str = "\
cargo xtask <task>

tasks:
  demo                   the main job: build envrt, then acquire a local lease, copy a folder
                         in, run a command, copy results out, show capabilities, release
  ci                     fmt check, clippy -D warnings, doc -Dwarnings, every test (and the
                         Python package's pytest suite, the TypeScript client's npm test,
                         schemathesis against envrt serve)
  conformance [options]  the conformance kit against built-in drivers or a plugin worker
      --driver local|docker|sandbox|all   (default all)
      --manifest PATH [--worker COMMAND]  run the kit against an external plugin worker (its
                                          manifest, or a package dir with paperclipPlugin in
                                          package.json; the command defaults to the manifest's
                                          worker.command, or `node` + entrypoints.worker)
      --cases N                           property-test cases per check
      --deadline SECONDS                  per-check deadline (default 300)
      --report PATH                       one JSON report (default target/conformance/report.json)
  fuzz [options]         build the fuzz targets of fuzz/ with `cargo +nightly fuzz` and run
                         them one at a time (niced), each input bounded to 1 s and the
                         process to -rss_limit_mb; prints the executions per target
      --target T                          only this target (repeatable)
      --seconds S                         seconds per target (default 60; with --runs, a bound)
      --runs N                            end a target after N inputs (libFuzzer's -runs)
      --sanitizer address|none            cargo fuzz's sanitizer (default address)
      --rss-mb M                          libFuzzer's -rss_limit_mb (default 2048)
      --minimize                          merge the findings into fuzz/corpus/T (-merge=1)
  setup                  install and start what the tests need (apt packages, dockerd,
                         the test image, the SDK fixture, the Python venv); idempotent
  docker-image           build the local test image envrt-test:latest
  schemathesis           schemathesis against a fresh envrt serve and its OpenAPI document
                         (the step of ci; its venv: $ENVRT_SCHEMATHESIS_VENV)
  bench [--quick] [--only ROW]  benchmarks as ratios to baselines (target/bench/latest.json;
                         the Python row, also `--only python`, to target/bench/python.json)
      --list                              the scenarios, their rows and targets; runs nothing
  stress [options]       the test suite N times (built once); lists each test that failed
                         at least once, how often and what it said; fails on any failure
      --runs N                            runs (default 10)
      --load                              keep every core busy with a CPU hog meanwhile
      -p CRATE / --test NAME              only these (passed to cargo test; repeatable)
      -- ARGS                             passed to the test binaries
  soak [options]         lease cycles at volume per driver from 16 tasks, plus envrt CLI
                         holders (1 % SIGKILLed, then collected by envrt gc); counts leaked
                         processes, containers, sandboxes, workspaces, active store rows
                         and ssh lease directories (all must be 0) and prints p50/p99 per
                         operation
      --leases N                          lease cycles per driver (default 1000)
      --driver local|docker|sandbox|ssh|all   (default all; ssh: the test sshd)
      --tasks N / --cli N                 concurrent tasks (16) / CLI holders (leases/10)
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => util::run_script("scripts/setup.sh", &[]).and_then(|()| ci::run_all()),
        Some("demo") => demo(),
        Some("setup") => util::run_script("scripts/setup.sh", &[]),
        Some("conformance") => conformance::run(&args[1..]),
        Some("fuzz") => fuzz::run(&args[1..]),
        Some("bench") => bench::run_bench(&args[1..]),
        Some("soak") => soak::run_soak(&args[1..]),
        Some("stress") => stress::run_stress(&args[1..]),
        Some(stress::HOG_TASK) => return stress::hog(),
        Some("schemathesis") => schemathesis::run_schemathesis()
            .and_then(|ok| ok.then_some(()).ok_or_else(|| "schemathesis failed".to_owned())),
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
    build.args(["build", "--quiet", "-p", "envrt-cli", "--bin", "envrt"]);
    util::run(build)?;
    let target = util::target_dir();
    let mut script = std::process::Command::new("sh");
    script
        .arg(util::root().join("crates/envrt-cli/scripts/main-job.sh"))
        .env("ENVRT", target.join("debug/envrt"));
    util::run(script)
}
