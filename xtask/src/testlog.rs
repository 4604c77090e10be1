//! Running `cargo test --no-fail-fast` with stdout and stderr in one stream, and reading
//! that stream back: the libtest counts, and every failed test with its target (as
//! cargo's own rerun hint names it, e.g. `-p envrt-cli --test docker`) and its message.

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};

/// One failed test (or a whole test binary that failed without naming a test).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    /// Cargo's rerun arguments for the test binary, e.g. `-p envrt-cli --test docker`.
    pub(crate) target: String,
    /// The test's name; `(binary)` when the binary failed without a failing test.
    pub(crate) test: String,
    /// What the test printed, without the backtrace.
    pub(crate) message: String,
}

/// What one `cargo test` run reported.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) passed: usize,
    pub(crate) failed: usize,
    pub(crate) ignored: usize,
    pub(crate) failures: Vec<Failure>,
}

/// Longest message kept per failure, in lines.
const MESSAGE_LINES: usize = 40;
/// Output lines of a binary kept to explain a failure that names no test.
const TAIL_LINES: usize = 15;

/// Reads the merged output of `cargo test --no-fail-fast`.
pub(crate) fn parse(output: &str) -> Report {
    let mut report = Report::default();
    // Failures of the binary now running; its target is named only after it ends.
    let mut pending: Vec<(String, String)> = Vec::new();
    let mut tail: Vec<&str> = Vec::new();
    let mut section: Option<(String, Vec<&str>)> = None;
    let mut in_failures = false;
    let mut in_backtrace = false;
    for line in output.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("Running ") || trimmed.starts_with("Doc-tests ") {
            pending.clear();
            tail.clear();
            in_failures = false;
            section = None;
            continue;
        }
        if let Some(target) = rerun_target(trimmed) {
            close(&mut section, &mut pending);
            if pending.is_empty() {
                // Not a libtest failure (a harness-less binary that panicked, a crash):
                // the binary counts as one failed test.
                report.failed += 1;
                let start = tail.len().saturating_sub(TAIL_LINES);
                pending.push(("(binary)".into(), tail[start..].join("\n").trim().to_owned()));
            }
            for (test, message) in pending.drain(..) {
                report.failures.push(Failure {
                    target: target.clone(),
                    test,
                    message,
                });
            }
            tail.clear();
            continue;
        }
        tail.push(line);
        if line.starts_with("test result:") {
            close(&mut section, &mut pending);
            in_failures = false;
            let (p, f, i) = crate::util::count_results(line);
            report.passed += p;
            report.failed += f;
            report.ignored += i;
            continue;
        }
        if let Some(name) = line.strip_prefix("test ").and_then(|l| l.strip_suffix(" ... FAILED")) {
            // libtest-mimic pads the name to a column.
            let name = name.trim_end();
            if !pending.iter().any(|(t, _)| t == name) {
                pending.push((name.to_owned(), String::new()));
            }
            continue;
        }
        if line == "failures:" {
            close(&mut section, &mut pending);
            in_failures = true;
            continue;
        }
        if !in_failures {
            continue;
        }
        if let Some(name) = section_start(line) {
            close(&mut section, &mut pending);
            section = Some((name.to_owned(), Vec::new()));
            in_backtrace = false;
            continue;
        }
        if let Some((_, lines)) = &mut section {
            if line.starts_with("stack backtrace:") {
                in_backtrace = true;
            } else if in_backtrace && (line.starts_with("  ") || line.starts_with("note: ")) {
                // A frame, a location or the "details omitted" note.
            } else {
                in_backtrace = false;
                if lines.len() < MESSAGE_LINES {
                    lines.push(line);
                }
            }
        }
    }
    report
}

/// `---- NAME stdout ----` (libtest) or `---- NAME ----` (libtest-mimic).
fn section_start(line: &str) -> Option<&str> {
    let inner = line.strip_prefix("---- ")?.strip_suffix(" ----")?;
    Some(inner.strip_suffix(" stdout").unwrap_or(inner))
}

/// The target of cargo's `error: test failed, to rerun pass `ARGS`` line.
fn rerun_target(line: &str) -> Option<String> {
    let rest = line
        .strip_prefix("error: test failed, to rerun pass `")
        .or_else(|| line.strip_prefix("error: doctest failed, to rerun pass `"))?;
    Some(rest.strip_suffix('`').unwrap_or(rest).to_owned())
}

/// `thread 'name' (1234) panicked at ...` without the thread id, which differs from run
/// to run, so the same failure reads the same every time.
fn without_thread_id(line: &str) -> String {
    let Some(rest) = line.strip_prefix("thread '") else {
        return line.to_owned();
    };
    let Some(quote) = rest.find("' (") else {
        return line.to_owned();
    };
    let after = &rest[quote + 3..];
    match after.find(')') {
        Some(close) if close > 0 && after[..close].bytes().all(|b| b.is_ascii_digit()) => {
            format!("thread '{}'{}", &rest[..quote], &after[close + 1..])
        }
        _ => line.to_owned(),
    }
}

/// Ends a failure section: its text becomes the message of its pending failure.
fn close(section: &mut Option<(String, Vec<&str>)>, pending: &mut Vec<(String, String)>) {
    let Some((name, lines)) = section.take() else { return };
    let lines: Vec<String> = lines.into_iter().map(without_thread_id).collect();
    let message = lines.join("\n").trim().to_owned();
    match pending.iter_mut().find(|(t, _)| *t == name) {
        Some((_, m)) => *m = message,
        None => pending.push((name, message)),
    }
}

/// Runs `command` (a `cargo test ...`) with stderr merged into stdout; each line is
/// echoed when `echo`, and the whole output returned with whether it exited 0.
pub(crate) fn run_merged(command: &Command, echo: bool) -> Result<(bool, String), String> {
    let shown = crate::util::shown(command);
    eprintln!("xtask: running {shown}");
    // One pipe for both streams keeps cargo's "Running" lines in order with the output.
    let mut merged = Command::new("sh");
    merged
        .arg("-c")
        .arg("exec \"$@\" 2>&1")
        .arg("sh")
        .arg(command.get_program())
        .args(command.get_args())
        .stdout(Stdio::piped());
    if let Some(dir) = command.get_current_dir() {
        merged.current_dir(dir);
    }
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => merged.env(key, value),
            None => merged.env_remove(key),
        };
    }
    let mut child = merged.spawn().map_err(|e| format!("cannot start {shown}: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut all = String::new();
    let mut out = std::io::stdout().lock();
    for line in std::io::BufReader::new(stdout).split(b'\n') {
        let line = line.map_err(|e| format!("reading {shown}: {e}"))?;
        let line = String::from_utf8_lossy(&line);
        if echo {
            let _ = writeln!(out, "{line}");
        }
        all.push_str(&line);
        all.push('\n');
    }
    let status = child.wait().map_err(|e| format!("waiting for {shown}: {e}"))?;
    Ok((status.success(), all))
}

/// Lines of a failure's message shown in the closing summary.
const SUMMARY_LINES: usize = 12;

/// Prints failures grouped by target, each with the start of its message: the summary is
/// the end of the log, the part a truncated CI log still shows.
pub(crate) fn print_failures(failures: &[Failure]) {
    print!("{}", summary(failures));
}

fn summary(failures: &[Failure]) -> String {
    let mut targets: Vec<&str> = failures.iter().map(|f| f.target.as_str()).collect();
    targets.dedup();
    let mut out = String::new();
    for target in targets {
        out.push_str(&format!("  {target}:\n"));
        for failure in failures.iter().filter(|f| f.target == target) {
            out.push_str(&format!("    {}\n", failure.test));
            let lines: Vec<&str> = failure.message.lines().collect();
            for line in lines.iter().take(SUMMARY_LINES) {
                out.push_str(&format!("      | {line}\n"));
            }
            if lines.len() > SUMMARY_LINES {
                out.push_str(&format!("      | ({} more lines)\n", lines.len() - SUMMARY_LINES));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "\
     Running unittests src/lib.rs (target/debug/deps/ftx-2f9c)

running 0 tests

test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

     Running tests/t1.rs (target/debug/deps/t1-6275)

running 2 tests
test b ... ok
test a ... FAILED

failures:

---- a stdout ----
out a

thread 'a' (9648) panicked at tests/t1.rs:2:29:
assertion `left == right` failed: one is not two
  left: 1
 right: 2
stack backtrace:
   0: __rustc::rust_begin_unwind
             at /rustc/library/std/src/panicking.rs:689:5
note: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose backtrace.


failures:
    a

test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.10s

error: test failed, to rerun pass `-p ftx --test t1`
     Running tests/open_race.rs (target/debug/deps/open_race-6b05)
thread 'main' panicked at tests/open_race.rs:9:9:
a writer failed
error: test failed, to rerun pass `-p envrt-store-sqlite --test open_race`
     Running tests/conformance.rs (target/debug/deps/conformance-1)

running 2 tests
test driver_local::x ... ok
test driver_local::y                     ... FAILED

failures:

---- driver_local::y ----
leaked a process

failures:
    driver_local::y

test result: FAILED. 1 passed; 1 failed; 3 ignored; 0 measured; 0 filtered out; finished in 0.10s

error: test failed, to rerun pass `-p envrt-conformance --test conformance`
   Doc-tests ftx

running 1 test
test src/lib.rs - f (line 2) ... ok

test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.10s

error: 3 targets failed:
    `-p ftx --test t1`
";

    #[test]
    fn reads_counts_and_every_failure_with_its_target_and_message() {
        let report = parse(RUN);
        assert_eq!((report.passed, report.failed, report.ignored), (3, 3, 3));
        assert_eq!(
            report.failures,
            vec![
                Failure {
                    target: "-p ftx --test t1".into(),
                    test: "a".into(),
                    message: "out a\n\nthread 'a' panicked at tests/t1.rs:2:29:\nassertion `left == right` failed: one is not two\n  left: 1\n right: 2".into(),
                },
                Failure {
                    target: "-p envrt-store-sqlite --test open_race".into(),
                    test: "(binary)".into(),
                    message: "thread 'main' panicked at tests/open_race.rs:9:9:\na writer failed".into(),
                },
                Failure {
                    target: "-p envrt-conformance --test conformance".into(),
                    test: "driver_local::y".into(),
                    message: "leaked a process".into(),
                },
            ]
        );
    }

    #[test]
    fn the_summary_shows_each_failure_once_with_its_message() {
        let report = parse(RUN);
        assert_eq!(
            summary(&report.failures[2..]),
            "  -p envrt-conformance --test conformance:\n    driver_local::y\n      | leaked a process\n"
        );
        let long = Failure {
            target: "t".into(),
            test: "x".into(),
            message: (1..=14).map(|n| n.to_string()).collect::<Vec<_>>().join("\n"),
        };
        let shown = summary(&[long]);
        assert!(shown.ends_with("      | 12\n      | (2 more lines)\n"), "{shown}");
    }

    #[test]
    fn thread_ids_are_dropped_from_panic_lines() {
        assert_eq!(
            without_thread_id("thread 'x::y' (3367) panicked at a.rs:1:2:"),
            "thread 'x::y' panicked at a.rs:1:2:"
        );
        assert_eq!(
            without_thread_id("thread 'x' (abc) panicked"),
            "thread 'x' (abc) panicked"
        );
        assert_eq!(without_thread_id("no thread"), "no thread");
    }

    #[test]
    fn a_clean_run_has_no_failures() {
        let report = parse(
            "     Running tests/a.rs (x)\n\nrunning 1 test\ntest a ... ok\n\ntest result: ok. 1 passed; 0 failed; 0 ignored\n",
        );
        assert_eq!(report.failures, Vec::new());
        assert_eq!((report.passed, report.failed, report.ignored), (1, 0, 0));
    }
}
