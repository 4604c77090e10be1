//! `cargo xtask stress [--runs N] [--load] [-p CRATE]... [--test NAME]... [-- ARGS]`: the
//! test suite N times in a row (built once), optionally with every core kept busy, then
//! each test that failed at least once with how often and what it said.

use std::collections::BTreeMap;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::testlog::{self, Failure};
use crate::util::{cargo, run, target_dir};

struct Options {
    runs: usize,
    load: bool,
    /// `-p CRATE` and `--test NAME` for cargo.
    selection: Vec<String>,
    /// After `--`: for the test binaries.
    test_args: Vec<String>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        runs: 10,
        load: false,
        selection: Vec::new(),
        test_args: Vec::new(),
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().cloned().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--runs" => {
                let runs = value("--runs")?;
                options.runs = runs
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or(format!("--runs {runs:?} is not a positive number"))?;
            }
            "--load" => options.load = true,
            "-p" | "--package" | "--test" => {
                let v = value(arg)?;
                options.selection.extend([arg.clone(), v]);
            }
            "--" => {
                options.test_args = args.cloned().collect();
                break;
            }
            other => return Err(format!("unknown stress option {other:?}")),
        }
    }
    Ok(options)
}

/// Processes that keep every core busy until dropped (or until xtask is gone: each hog
/// leaves when its parent changes, and dies with Ctrl-C like the rest of the group).
struct Hogs(Vec<Child>);

impl Hogs {
    fn start() -> Result<Hogs, String> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let exe = std::env::current_exe().map_err(|e| format!("cannot find xtask itself: {e}"))?;
        let mut hogs = Hogs(Vec::new());
        for _ in 0..cores {
            let child = Command::new(&exe)
                .arg(HOG_TASK)
                .stdin(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start a CPU hog: {e}"))?;
            hogs.0.push(child);
        }
        eprintln!("xtask: {cores} CPU hogs running");
        Ok(hogs)
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The hidden task a hog runs.
pub(crate) const HOG_TASK: &str = "__cpu-hog";

/// Spins until the parent process is gone.
pub(crate) fn hog() -> ExitCode {
    let parent = std::os::unix::process::parent_id();
    let mut x: u64 = 1;
    loop {
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        if std::os::unix::process::parent_id() != parent {
            return ExitCode::SUCCESS;
        }
    }
}

pub(crate) fn run_stress(args: &[String]) -> Result<(), String> {
    let options = parse(args)?;
    let selection: Vec<String> = if options.selection.is_empty() {
        vec!["--workspace".into()]
    } else {
        options.selection.clone()
    };
    let mut build = cargo();
    build.args(["test", "--no-run", "--all-features"]).args(&selection);
    run(build)?;
    let logs = target_dir().join("stress");
    std::fs::create_dir_all(&logs).map_err(|e| format!("cannot create {}: {e}", logs.display()))?;

    let hogs = if options.load { Some(Hogs::start()?) } else { None };
    let started = Instant::now();
    // (target, test) -> runs it failed in, with the message of each.
    let mut failed: BTreeMap<(String, String), Vec<(usize, String)>> = BTreeMap::new();
    for n in 1..=options.runs {
        let mut test = cargo();
        test.args(["test", "--all-features", "--no-fail-fast"])
            .args(&selection)
            .env("CARGO_TERM_COLOR", "never");
        for required in [
            "ENVRT_REQUIRE_DOCKER",
            "ENVRT_REQUIRE_SANDBOX",
            "ENVRT_REQUIRE_SSH",
            "ENVRT_REQUIRE_NETWORK",
        ] {
            if std::env::var_os(required).is_none() {
                test.env(required, "1");
            }
        }
        if !options.test_args.is_empty() {
            test.arg("--").args(&options.test_args);
        }
        let run_started = Instant::now();
        let (ok, output) = testlog::run_merged(&test, false)?;
        let log = logs.join(format!("run-{n}.log"));
        let _ = std::fs::write(&log, &output);
        let mut report = testlog::parse(&output);
        if !ok && report.failures.is_empty() {
            report.failures.push(Failure {
                target: "(cargo test)".into(),
                test: "(run)".into(),
                message: format!("cargo test failed without naming a test; see {}", log.display()),
            });
        }
        println!(
            "run {n}/{}: {} passed, {} failed, {} skipped in {:.0} s",
            options.runs,
            report.passed,
            report.failed,
            report.ignored,
            run_started.elapsed().as_secs_f64()
        );
        for failure in report.failures {
            println!("  FAILED {} :: {}", failure.target, failure.test);
            failed
                .entry((failure.target, failure.test))
                .or_default()
                .push((n, failure.message));
        }
    }
    drop(hogs);
    let took = started.elapsed().as_secs_f64();
    let load = if options.load { " under full CPU load" } else { "" };
    if failed.is_empty() {
        println!(
            "stress: {} of {} runs passed{load} in {took:.0} s",
            options.runs, options.runs
        );
        return Ok(());
    }
    println!("\ntests that failed at least once:");
    for ((target, test), runs) in &failed {
        println!("\n{target} :: {test} — failed {} of {} runs", runs.len(), options.runs);
        // The same message once, with the runs that printed it.
        let mut messages: Vec<(&str, Vec<usize>)> = Vec::new();
        for (n, message) in runs {
            match messages.iter_mut().find(|(m, _)| *m == message.as_str()) {
                Some((_, ns)) => ns.push(*n),
                None => messages.push((message, vec![*n])),
            }
        }
        for (message, ns) in messages {
            println!("  runs {ns:?}:");
            for line in message.lines() {
                println!("    {line}");
            }
        }
    }
    let bad_runs: std::collections::BTreeSet<usize> = failed.values().flatten().map(|(n, _)| *n).collect();
    Err(format!(
        "{} of {} runs failed{load} ({took:.0} s); logs in {}",
        bad_runs.len(),
        options.runs,
        logs.display()
    ))
}
