//! `cargo xtask fuzz`: builds the coverage-guided fuzz targets of `fuzz/` with `cargo
//! +nightly fuzz` and runs them one at a time (niced), each with a memory bound and a
//! per-input timeout, then prints the executions per target from libFuzzer's final stats.
//! A run reads the checked-in corpus (`fuzz/corpus/<target>/`) and the crash inputs
//! (`fuzz/regressions/<target>/`) and writes what it finds to a scratch corpus under
//! `fuzz/target/`; `--minimize` merges that back into the checked-in corpus.
//!
//! `cargo xtask ci` needs no nightly: every corpus is replayed by a stable test in the
//! crate it fuzzes (`tests/fuzz_corpus_replay.rs`), and [`check_corpora`] fails when a
//! target has no corpus or no replay test.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::util::root;

const USAGE: &str = "\
cargo xtask fuzz [--target T]... [--seconds S] [--runs N] [--sanitizer S] [--rss-mb M] [--minimize]
  --target T     only this target (repeatable; default every target in fuzz/fuzz_targets)
  --seconds S    seconds per target (default 60; with --runs, an upper bound)
  --runs N       end a target once it has run N inputs (libFuzzer's -runs)
  --sanitizer S  cargo fuzz's sanitizer: address (default) or none (several times faster)
  --rss-mb M     libFuzzer's -rss_limit_mb (default 2048)
  --minimize     afterwards, merge each target's findings into fuzz/corpus/T (-merge=1)";

/// Every input's time bound, in seconds (libFuzzer's `-timeout`).
const INPUT_TIMEOUT: u32 = 1;

struct Options {
    targets: Vec<String>,
    seconds: u64,
    /// Inputs per target after which it ends, when asked for.
    runs: Option<u64>,
    /// `cargo fuzz --sanitizer`.
    sanitizer: String,
    rss_mb: u64,
    minimize: bool,
    /// The targets' `TMPDIR`, when the run makes one (see [`scratch_dir`]).
    scratch: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        targets: Vec::new(),
        seconds: 60,
        runs: None,
        sanitizer: "address".to_owned(),
        rss_mb: 2048,
        minimize: false,
        scratch: None,
    };
    let mut seconds_given = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value\n\n{USAGE}"))
        };
        let number = |name: &str, text: String| {
            text.parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{name} {text:?}: expected a positive number\n\n{USAGE}"))
        };
        match arg.as_str() {
            "--target" => options.targets.push(value("--target")?),
            "--seconds" => {
                options.seconds = number("--seconds", value("--seconds")?)?;
                seconds_given = true;
            }
            "--runs" => options.runs = Some(number("--runs", value("--runs")?)?),
            "--sanitizer" => match value("--sanitizer")?.as_str() {
                s @ ("address" | "none") => options.sanitizer = s.to_owned(),
                other => return Err(format!("--sanitizer {other:?}: expected address or none\n\n{USAGE}")),
            },
            "--rss-mb" => options.rss_mb = number("--rss-mb", value("--rss-mb")?)?,
            "--minimize" => options.minimize = true,
            other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
        }
    }
    if options.runs.is_some() && !seconds_given {
        // The runs end it; the time bound only catches a run that stalls.
        options.seconds = 24 * 3600;
    }
    Ok(options)
}

/// A directory of this run's under `/dev/shm` for the targets' scratch files, unless the
/// caller set `TMPDIR`: `archive_extract` writes a tree per input, about 450 inputs a second
/// on this machine's disk and 8,000 on tmpfs.
fn scratch_dir() -> Option<PathBuf> {
    if std::env::var_os("TMPDIR").is_some() {
        return None;
    }
    let dir = Path::new("/dev/shm").join(format!("envrt-fuzz-{}", std::process::id()));
    fs::create_dir(&dir).ok().map(|()| dir)
}

fn fuzz_dir() -> PathBuf {
    root().join("fuzz")
}

/// The targets: one `fuzz/fuzz_targets/<name>.rs` each, sorted.
pub(crate) fn targets() -> Result<Vec<String>, String> {
    let dir = fuzz_dir().join("fuzz_targets");
    let entries = fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".rs").map(str::to_owned))
        .collect();
    names.sort();
    Ok(names)
}

/// `cargo +nightly fuzz ...` in `fuzz/`, free of the stable cargo's environment.
fn cargo_fuzz() -> Command {
    let mut command = Command::new("nice");
    command
        .args(["-n", "19", "cargo", "+nightly", "fuzz"])
        .current_dir(fuzz_dir())
        .env_remove("CARGO")
        .env_remove("RUSTC")
        .env_remove("RUSTDOC")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO_TARGET_DIR");
    command
}

/// What one run reached.
struct Outcome {
    target: String,
    executions: Option<u64>,
    seconds: f64,
    result: String,
}

/// The executions in libFuzzer's final stats (`stat::number_of_executed_units: N`), or
/// its closing line (`Done N runs in S second(s)`).
fn executions(log: &str) -> Option<u64> {
    let stat = log
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
        .and_then(|n| n.trim().parse().ok());
    stat.or_else(|| {
        log.lines()
            .rev()
            .find_map(|l| l.strip_prefix("Done ")?.split(' ').next()?.parse().ok())
    })
}

/// How long libFuzzer took to run `artifact` once on its own, in milliseconds.
fn replay_ms(target: &str, artifact: &str) -> Option<u64> {
    let binary = fuzz_dir().join("target/x86_64-unknown-linux-gnu/release").join(target);
    let output = Command::new(binary)
        .arg(artifact)
        .env("ASAN_OPTIONS", "detect_odr_violation=0")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stderr).into_owned();
    text.split(" in ").nth(1)?.split(" ms").next()?.trim().parse().ok()
}

/// Runs `target` for the seconds asked. libFuzzer's `-timeout` is wall-clock time, so on a
/// machine busy enough to starve the niced fuzzer an input that takes milliseconds can
/// trip it: such a timeout (its input replays in under half the bound) is noted and the
/// run goes on for the seconds left, executions summed; any other failure ends the run.
fn run_one(target: &str, options: &Options, work: &Path) -> Result<Outcome, String> {
    let scratch = work.join("corpus").join(target);
    fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let logs = work.join("logs");
    fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let log_path = logs.join(format!("{target}.log"));
    let bound = match options.runs {
        Some(runs) => format!("{runs} inputs, {} s at most", options.seconds),
        None => format!("{} s", options.seconds),
    };
    eprintln!("xtask: fuzzing {target} for {bound} (log: {})", log_path.display());
    let started = Instant::now();
    let mut total: Option<u64> = None;
    let mut notes = Vec::new();
    let result = loop {
        let left = options.seconds.saturating_sub(started.elapsed().as_secs());
        if left < 5 && total.is_some() {
            break "ok".to_owned();
        }
        let runs_left = options.runs.map(|runs| runs.saturating_sub(total.unwrap_or(0)));
        if runs_left == Some(0) {
            break "ok".to_owned();
        }
        let log = fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let mut command = cargo_fuzz();
        command
            .args(["run", "--sanitizer", &options.sanitizer, target])
            .arg(&scratch);
        for seeds in ["corpus", "regressions"] {
            let dir = fuzz_dir().join(seeds).join(target);
            if dir.is_dir() {
                command.arg(dir);
            }
        }
        command.args([
            "--",
            &format!("-max_total_time={}", left.max(1)),
            &format!("-rss_limit_mb={}", options.rss_mb),
            &format!("-timeout={INPUT_TIMEOUT}"),
            "-print_final_stats=1",
        ]);
        if let Some(runs) = runs_left {
            command.arg(format!("-runs={runs}"));
        }
        if let Some(dir) = &options.scratch {
            command.env("TMPDIR", dir);
        }
        let log_err = log.try_clone().map_err(|e| e.to_string())?;
        command.stdout(Stdio::from(log)).stderr(Stdio::from(log_err));
        let status = command
            .status()
            .map_err(|e| format!("cannot start cargo +nightly fuzz: {e}"))?;
        let text = String::from_utf8_lossy(&fs::read(&log_path).unwrap_or_default()).into_owned();
        if let Some(n) = executions(&text) {
            total = Some(total.unwrap_or(0) + n);
        }
        if status.success() {
            break "ok".to_owned();
        }
        let artifact = text
            .lines()
            .find_map(|l| l.split("Test unit written to ").nth(1))
            .map(str::to_owned);
        let timed_out = text.contains("ERROR: libFuzzer: timeout");
        match (&artifact, timed_out) {
            (Some(input), true) => match replay_ms(target, input) {
                Some(ms) if ms < u64::from(INPUT_TIMEOUT) * 500 => {
                    notes.push(format!("starved timeout (replays in {ms} ms)"));
                    let _ = fs::remove_file(input);
                }
                _ => break format!("FAILED: a hang: {input}"),
            },
            (Some(input), false) => break format!("FAILED ({status}): {input}"),
            (None, _) => break format!("FAILED ({status}): see {}", log_path.display()),
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    if options.minimize && result == "ok" {
        minimize(target, &options.sanitizer, &scratch, work)?;
    }
    let result = if notes.is_empty() {
        result
    } else {
        format!("{result}; {}", notes.join(", "))
    };
    Ok(Outcome {
        target: target.to_owned(),
        executions: total,
        seconds,
        result,
    })
}

/// Replaces `fuzz/corpus/<target>` with the `-merge=1` minimization of it and the run's
/// findings.
fn minimize(target: &str, sanitizer: &str, scratch: &Path, work: &Path) -> Result<(), String> {
    let corpus = fuzz_dir().join("corpus").join(target);
    let merged = work.join("merged").join(target);
    let _ = fs::remove_dir_all(&merged);
    fs::create_dir_all(&merged).map_err(|e| format!("{}: {e}", merged.display()))?;
    let mut command = cargo_fuzz();
    command
        .args(["run", "--sanitizer", sanitizer, target])
        .arg(&merged)
        .arg(&corpus)
        .arg(scratch)
        .args(["--", "-merge=1", &format!("-timeout={INPUT_TIMEOUT}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    crate::util::run(command)?;
    let _ = fs::remove_dir_all(&corpus);
    fs::rename(&merged, &corpus).map_err(|e| format!("{}: {e}", corpus.display()))
}

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut options = parse(args)?;
    options.scratch = scratch_dir();
    let all = targets()?;
    let chosen = if options.targets.is_empty() {
        all.clone()
    } else {
        options.targets.clone()
    };
    if let Some(unknown) = chosen.iter().find(|t| !all.contains(t)) {
        return Err(format!("no fuzz target {unknown:?} (targets: {})", all.join(", ")));
    }
    let mut build = cargo_fuzz();
    build.args(["build", "--sanitizer", &options.sanitizer]);
    // `cargo fuzz build` takes one target, or builds them all
    if let [one] = chosen.as_slice() {
        build.arg(one);
    }
    crate::util::run(build)?;
    let work = fuzz_dir().join("target").join("xtask");
    let mut outcomes = Vec::new();
    for target in &chosen {
        let outcome = run_one(target, &options, &work);
        if let Some(dir) = &options.scratch {
            // What a crashed input left behind.
            let _ = fs::remove_dir_all(dir);
            if outcome.is_ok() {
                let _ = fs::create_dir(dir);
            }
        }
        outcomes.push(outcome?);
    }
    if let Some(dir) = &options.scratch {
        let _ = fs::remove_dir_all(dir);
    }
    println!(
        "\n{:<18} {:>14} {:>9} {:>10}  result",
        "target", "executions", "seconds", "exec/s"
    );
    for o in &outcomes {
        let execs = o.executions.map_or("?".to_owned(), |n| n.to_string());
        let rate = o
            .executions
            .map_or("?".to_owned(), |n| format!("{:.0}", n as f64 / o.seconds));
        println!(
            "{:<18} {execs:>14} {:>9.0} {rate:>10}  {}",
            o.target, o.seconds, o.result
        );
    }
    match outcomes.iter().filter(|o| o.result.starts_with("FAILED")).count() {
        0 => Ok(()),
        n => Err(format!("{n} fuzz target(s) failed")),
    }
}

/// The stable half of `cargo xtask ci`: every target has a non-empty checked-in corpus
/// and a replay test (`replay("<target>", ...)` in some crate's
/// `tests/fuzz_corpus_replay.rs`), which `cargo test` then runs.
pub(crate) fn check_corpora() -> Result<(), String> {
    let mut replayed = String::new();
    let crates = root().join("crates");
    for entry in fs::read_dir(&crates)
        .map_err(|e| format!("{}: {e}", crates.display()))?
        .flatten()
    {
        if let Ok(text) = fs::read_to_string(entry.path().join("tests/fuzz_corpus_replay.rs")) {
            // as rustfmt leaves it, wrapped or not
            replayed.extend(text.chars().filter(|c| !c.is_whitespace()));
        }
    }
    let mut problems = Vec::new();
    for target in targets()? {
        let corpus = fuzz_dir().join("corpus").join(&target);
        let files = fs::read_dir(&corpus).map(|d| d.flatten().count()).unwrap_or(0);
        if files == 0 {
            problems.push(format!("fuzz target {target} has no corpus in fuzz/corpus/{target}/"));
        }
        if !replayed.contains(&format!("replay(\"{target}\",")) {
            problems.push(format!(
                "fuzz target {target} is replayed by no crates/*/tests/fuzz_corpus_replay.rs"
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executions_come_from_the_final_stats_or_the_closing_line() {
        let log = "#1024\tpulse  cov: 3\nDone 4242 runs in 2 second(s)\nstat::number_of_executed_units: 4243\n";
        assert_eq!(executions(log), Some(4243));
        assert_eq!(executions("Done 17 runs in 1 second(s)\n"), Some(17));
        assert_eq!(executions("==1== ERROR: libFuzzer: deadly signal\n"), None);
    }

    #[test]
    fn bad_arguments_are_refused_with_the_usage() {
        let args = |a: &[&str]| parse(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>()).err();
        let refused = args(&["--seconds", "0"]).unwrap();
        assert!(
            refused.starts_with("--seconds \"0\": expected a positive number\n\ncargo xtask fuzz"),
            "{refused}"
        );
        assert!(args(&["--target"]).unwrap().starts_with("--target needs a value\n\n"));
        assert!(
            args(&["--what"])
                .unwrap()
                .starts_with("unknown argument \"--what\"\n\n")
        );
        assert!(
            args(&["--sanitizer", "memory"])
                .unwrap()
                .starts_with("--sanitizer \"memory\": expected address or none\n\n")
        );
        assert!(
            args(&["--runs", "x"])
                .unwrap()
                .starts_with("--runs \"x\": expected a positive number\n\n")
        );
        assert_eq!(args(&["--target", "a", "--seconds", "5", "--minimize"]), None);
        let strings = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let runs = parse(&strings(&["--runs", "10000000", "--sanitizer", "none"])).unwrap();
        assert_eq!(
            (runs.runs, runs.seconds, runs.sanitizer.as_str()),
            (Some(10_000_000), 24 * 3600, "none")
        );
        let both = parse(&strings(&["--runs", "5", "--seconds", "9"])).unwrap();
        assert_eq!((both.runs, both.seconds), (Some(5), 9));
    }

    #[test]
    fn every_target_has_a_corpus_and_a_replay_test() {
        assert!(targets().unwrap().len() >= 10, "{:?}", targets());
        check_corpora().unwrap();
    }
}
