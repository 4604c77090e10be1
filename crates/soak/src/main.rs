//! `soak`: many lease cycles per driver from concurrent tasks, plus `envrt` CLI holders of
//! which some are SIGKILLed mid-command and collected by `envrt gc`; then counts what was
//! left behind (all must be 0) and prints p50/p99 per operation. Run it with
//! `cargo xtask soak [--leases N] [--driver local|docker|sandbox|ssh|all]`.
//!
//! ```text
//! soak [--leases N] [--driver KEY|all] [--tasks N] [--cli N] [--no-gc]
//! ```
//! `--no-gc` skips `envrt gc`, so the killed holders' leftovers must show in the leak
//! counts: a check of the checker.
//! `--cli N` (default: a tenth of `--leases`, at least 4) CLI holders run two at a time
//! beside the tasks; 1 % of them (at least one) are killed. The `envrt` and
//! `envrt-sandbox-worker` binaries are looked for beside this one.

mod cli;
mod cycle;
mod drivers;

use envrt_soak::leaks;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub(crate) leases: usize,
    pub(crate) drivers: Vec<String>,
    pub(crate) tasks: usize,
    pub(crate) cli: usize,
    pub(crate) gc: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut leases = 1_000;
    let mut driver = "all".to_owned();
    let mut tasks = 16;
    let mut cli = None;
    let mut gc = true;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut number = || -> Result<usize, String> {
            let v = it.next().ok_or(format!("{arg} needs a value"))?;
            v.parse().map_err(|_| format!("{arg} {v:?} is not a number"))
        };
        match arg.as_str() {
            "--leases" => leases = number()?,
            "--tasks" => tasks = number()?.max(1),
            "--cli" => cli = Some(number()?),
            "--no-gc" => gc = false,
            "--driver" => driver = it.next().ok_or("--driver needs a value")?.clone(),
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    let drivers = match driver.as_str() {
        "all" => vec!["local".into(), "docker".into(), "sandbox".into(), "ssh".into()],
        "local" | "docker" | "sandbox" | "ssh" => vec![driver],
        other => return Err(format!("unknown driver {other:?}: local, docker, sandbox, ssh or all")),
    };
    Ok(Options {
        leases,
        drivers,
        tasks,
        cli: cli.unwrap_or((leases / 10).max(4)),
        gc,
    })
}

/// Durations per operation name, and the errors seen.
#[derive(Default)]
pub(crate) struct Record {
    pub(crate) timings: BTreeMap<&'static str, Vec<Duration>>,
    pub(crate) errors: Vec<String>,
}

/// A [`Record`] shared by the tasks.
pub(crate) type Shared = Arc<Mutex<Record>>;

/// Adds one timing.
pub(crate) fn time(record: &Shared, op: &'static str, took: Duration) {
    record.lock().unwrap().timings.entry(op).or_default().push(took);
}

/// Adds one error.
pub(crate) fn fail(record: &Shared, error: String) {
    record.lock().unwrap().errors.push(error);
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p / 100.0).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// Beside this executable (cargo builds them into the same directory).
pub(crate) fn sibling(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let path = exe.with_file_name(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!("{} is missing (build it first)", path.display()))
    }
}

async fn soak_driver(key: &str, options: &Options) -> Result<bool, String> {
    let scratch = tempfile::Builder::new()
        .prefix("envrt-soak-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let run = format!("{}-{}", std::process::id(), key);
    let started = Instant::now();
    let record: Shared = Arc::default();
    let setup = drivers::Setup::start(key, scratch.path(), &run).await?;
    let cycles = cycle::run(&setup, options, record.clone());
    let holders = cli::run(key, scratch.path(), options, record.clone());
    let ((), ()) = tokio::join!(cycles, holders);
    setup.shutdown().await;
    let leaks = leaks::count(key, scratch.path(), &run).await;
    envrt_soak::ssh::forget(scratch.path());
    if !options.gc {
        cli::collect(scratch.path()).await;
    }
    let took = started.elapsed();

    let record = record.lock().unwrap();
    println!(
        "\n== {key}: {} lease cycles from {} tasks, {} CLI holders, in {:.0} s",
        options.leases,
        options.tasks,
        options.cli,
        took.as_secs_f64()
    );
    println!("{:<14} {:>7} {:>10} {:>10}", "operation", "count", "p50 ms", "p99 ms");
    for (op, durations) in &record.timings {
        let mut sorted = durations.clone();
        sorted.sort();
        println!(
            "{op:<14} {:>7} {:>10} {:>10}",
            sorted.len(),
            ms(percentile(&sorted, 50.0)),
            ms(percentile(&sorted, 99.0))
        );
    }
    println!(
        "leaked: {} processes, {} containers, {} sandboxes, {} workspaces, {} active store rows, {} ssh lease dirs",
        leaks.processes, leaks.containers, leaks.sandboxes, leaks.workspaces, leaks.active_rows, leaks.remote_dirs
    );
    for detail in leaks.details.iter().take(20) {
        println!("  left: {detail}");
    }
    println!("errors: {}", record.errors.len());
    for error in record.errors.iter().take(20) {
        println!("  error: {error}");
    }
    Ok(leaks.total() == 0 && record.errors.is_empty())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse(&args) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("soak: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut clean = true;
    for key in &options.drivers {
        match rt.block_on(soak_driver(key, &options)) {
            Ok(ok) => clean &= ok,
            Err(e) => {
                println!("\n== {key}: could not run: {e}");
                clean = false;
            }
        }
    }
    if clean {
        println!("\nsoak: no leaks, no errors");
        ExitCode::SUCCESS
    } else {
        println!("\nsoak: FAILED (leaks or errors above)");
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_default_and_parse() {
        let o = parse(&[]).unwrap();
        assert_eq!((o.leases, o.tasks, o.cli, o.gc), (1_000, 16, 100, true));
        assert_eq!(o.drivers, ["local", "docker", "sandbox", "ssh"]);
        let o = parse(&args(&["--leases", "20", "--driver", "docker", "--no-gc"])).unwrap();
        assert_eq!((o.leases, o.cli, o.gc), (20, 4, false));
        assert_eq!(o.drivers, ["docker"]);
        assert_eq!(
            parse(&args(&["--driver", "kubernetes"])).unwrap_err(),
            "unknown driver \"kubernetes\": local, docker, sandbox, ssh or all"
        );
        assert_eq!(
            parse(&args(&["--leases", "x"])).unwrap_err(),
            "--leases \"x\" is not a number"
        );
    }

    #[test]
    fn percentiles_pick_the_nearest_rank() {
        let sorted: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&sorted, 50.0), Duration::from_millis(51));
        assert_eq!(percentile(&sorted, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&sorted[..1], 99.0), Duration::from_millis(1));
    }

    #[test]
    fn one_holder_in_a_hundred_is_killed_and_at_least_one() {
        let kills = |total: usize| (0..total).filter(|n| cli::killed(*n, total)).count();
        assert_eq!(kills(4), 1);
        assert_eq!(kills(100), 1);
        assert_eq!(kills(1_000), 10);
    }
}
