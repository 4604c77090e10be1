//! `cargo xtask conformance`: runs the kit's test targets, prints the capability matrix
//! and a table per suite (passed, failed, not checked, ignored), prints why a suite could
//! not start, writes ONE JSON report for the whole run, exits non-zero on any failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::util::{cargo, root};

#[derive(Debug)]
struct Options {
    drivers: Vec<String>,
    worker: Option<String>,
    manifest: Option<String>,
    cases: Option<String>,
    deadline: Option<String>,
    report: PathBuf,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        drivers: Vec::new(),
        worker: None,
        manifest: None,
        cases: None,
        deadline: None,
        report: root().join("target/conformance/report.json"),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--driver" => {
                let driver = value()?;
                let known = crate::drivers::keys()?;
                if driver == "all" {
                    options.drivers = known;
                } else if known.contains(&driver) {
                    options.drivers.push(driver);
                } else {
                    return Err(format!("unknown driver {driver:?}; one of {known:?} or all"));
                }
            }
            "--worker" => options.worker = Some(absolute_words(&value()?)),
            "--manifest" => {
                // The suite runs in its own package directory: make the path absolute.
                let manifest = value()?;
                let path = std::fs::canonicalize(&manifest).map_err(|e| format!("--manifest {manifest}: {e}"))?;
                options.manifest = Some(path.to_string_lossy().into_owned());
            }
            "--cases" => {
                let cases = value()?;
                cases
                    .parse::<u32>()
                    .map_err(|_| format!("--cases takes a number, not {cases:?}"))?;
                options.cases = Some(cases);
            }
            "--deadline" => {
                let deadline = value()?;
                if !deadline.parse::<f64>().is_ok_and(|s| s.is_finite() && s > 0.0) {
                    return Err(format!(
                        "--deadline takes a positive number of seconds, not {deadline:?}"
                    ));
                }
                options.deadline = Some(deadline);
            }
            "--report" => options.report = PathBuf::from(value()?),
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    if options.worker.is_some() && options.manifest.is_none() {
        return Err("--worker needs --manifest (the worker's plugin manifest)".into());
    }
    if options.manifest.is_some() {
        if !options.drivers.is_empty() {
            return Err("--manifest replaces --driver".into());
        }
        options.drivers.push("worker".into());
    } else if options.drivers.is_empty() {
        options.drivers = crate::drivers::keys()?;
    }
    Ok(options)
}

/// `--worker` is run from the kit's package directory: make its words that name existing
/// files here (`worker.mjs`, `./bin/w`) absolute.
fn absolute_words(command: &str) -> String {
    command
        .split_whitespace()
        .map(|word| {
            let path = Path::new(word);
            let looks_like_file = !word.starts_with('-') && (word.contains('/') || word.contains('.'));
            match std::fs::canonicalize(path) {
                Ok(full) if looks_like_file && path.is_relative() => full.to_string_lossy().into_owned(),
                _ => word.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What one test binary left: its report document, or why there is none.
fn run_target(driver: &str, options: &Options, part: &Path) -> Result<(Value, bool), String> {
    // `worker` (a third-party worker, `--manifest`) runs the suite of the driver that
    // runs workers.
    let drivers = crate::drivers::workspace()?;
    let owner = match driver {
        "worker" => drivers.iter().find(|d| d.worker.is_some()),
        key => drivers.iter().find(|d| d.key == key),
    };
    let target = owner.map_or(driver, |d| d.key.as_str());
    if !root().join(format!("crates/conformance/tests/{target}.rs")).exists() {
        return Err(format!("no conformance target for driver {driver:?} yet"));
    }
    if let Some(worker) = owner.and_then(|d| d.worker.as_deref()) {
        // The worker is a binary of another package: build it first.
        let mut build = cargo();
        build.args(["build", "-p", worker, "--bin", worker]);
        crate::util::run(build)?;
    }
    let _ = std::fs::remove_file(part);
    let mut command: Command = cargo();
    command
        .args(["test", "-p", "envrt-conformance", "--test", target, "--"])
        .env("ENVRT_CONFORMANCE_REPORT", part)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(cases) = &options.cases {
        command.env("ENVRT_CONFORMANCE_CASES", cases);
    }
    if let Some(deadline) = &options.deadline {
        command.env("ENVRT_CONFORMANCE_DEADLINE", deadline);
    }
    if let Some(manifest) = &options.manifest {
        command.env("ENVRT_WORKER_MANIFEST", manifest);
    }
    if let Some(worker) = &options.worker {
        command.env("ENVRT_WORKER_COMMAND", worker);
    }
    eprintln!("xtask: conformance for {driver}");
    let output = command.output().map_err(|e| format!("cannot run cargo: {e}"))?;
    print!("{}", String::from_utf8_lossy(&output.stdout));
    let ok = output.status.success();
    match std::fs::read_to_string(part) {
        Ok(text) => {
            let document: Value =
                serde_json::from_str(&text).map_err(|e| format!("the report {} is not JSON: {e}", part.display()))?;
            Ok((document, ok))
        }
        Err(_) => Err(format!(
            "the {target} test binary ended with {} without writing a report (build or start-up \
             failure; its output is above)",
            output.status
        )),
    }
}

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let options = parse(args)?;
    let parts_dir = root().join("target/conformance/parts");
    std::fs::create_dir_all(&parts_dir).map_err(|e| format!("{}: {e}", parts_dir.display()))?;
    let mut suites: Vec<Value> = Vec::new();
    let mut not_started: Vec<Value> = Vec::new();
    let mut binaries_ok = true;
    for driver in &options.drivers {
        match run_target(driver, &options, &parts_dir.join(format!("{driver}.json"))) {
            Ok((document, ok)) => {
                binaries_ok &= ok;
                suites.extend(document["suites"].as_array().cloned().unwrap_or_default());
                not_started.extend(document["notStarted"].as_array().cloned().unwrap_or_default());
            }
            Err(reason) => {
                binaries_ok = false;
                not_started.push(json!({"suite": driver, "reason": reason, "skipped": false}));
            }
        }
    }
    let document = combine(suites, not_started, binaries_ok);
    print_summary(&document);
    if let Some(parent) = options.report.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    let text = serde_json::to_string_pretty(&document).map_err(|e| e.to_string())?;
    std::fs::write(&options.report, text + "\n").map_err(|e| format!("{}: {e}", options.report.display()))?;
    println!("report: {}", options.report.display());
    if document["passed"] == true {
        Ok(())
    } else {
        Err("conformance failed".into())
    }
}

const STATUSES: [&str; 4] = ["passed", "failed", "notChecked", "ignored"];

/// The one document of the run: every suite's trials, what did not start, the counts.
fn combine(suites: Vec<Value>, not_started: Vec<Value>, binaries_ok: bool) -> Value {
    let trials: Vec<&Value> = suites
        .iter()
        .flat_map(|s| s["trials"].as_array().into_iter().flatten())
        .collect();
    let mut checks: Vec<&str> = trials
        .iter()
        .filter_map(|t| t["name"].as_str()?.split_once("::").map(|(_, c)| c))
        .collect();
    checks.sort_unstable();
    checks.dedup();
    let counts: serde_json::Map<String, Value> = STATUSES
        .iter()
        .map(|s| {
            (
                s.to_string(),
                json!(trials.iter().filter(|t| t["status"] == *s).count()),
            )
        })
        .collect();
    let passed =
        binaries_ok && suites.iter().all(|s| s["passed"] == true) && not_started.iter().all(|n| n["skipped"] == true);
    json!({
        "passed": passed,
        "checkCount": checks.len(),
        "trialCount": trials.len(),
        "counts": counts,
        "drivers": suites,
        "notStarted": not_started,
    })
}

fn print_summary(document: &Value) {
    let suites = document["drivers"].as_array().cloned().unwrap_or_default();
    print_matrix(&suites);
    println!(
        "\n{:<20} {:>7} {:>7} {:>12} {:>8}  result",
        "driver", "passed", "failed", "not checked", "ignored"
    );
    for suite in &suites {
        let count = |status: &str| {
            suite["trials"]
                .as_array()
                .map(|t| t.iter().filter(|t| t["status"] == status).count())
                .unwrap_or(0)
        };
        println!(
            "{:<20} {:>7} {:>7} {:>12} {:>8}  {}",
            suite["driver"].as_str().unwrap_or("?"),
            count("passed"),
            count("failed"),
            count("notChecked"),
            count("ignored"),
            if suite["passed"] == true { "ok" } else { "FAILED" }
        );
    }
    let not_started = document["notStarted"].as_array().cloned().unwrap_or_default();
    for n in &not_started {
        let word = if n["skipped"] == true { "skipped" } else { "FAILED" };
        println!(
            "{:<20} {:>7} {:>7} {:>12} {:>8}  {word}",
            n["suite"].as_str().unwrap_or("?"),
            "-",
            "-",
            "-",
            "-"
        );
    }
    print_lines(&suites, "notChecked", "\nnot checked (the check could not look):");
    print_lines(&suites, "failed", "\nfailed:");
    print_lines(&suites, "ignored", "\ndeclared deviations (reported as ignored):");
    if !not_started.is_empty() {
        println!("\nsuites that did not start:");
        for n in &not_started {
            println!(
                "  {}: {}",
                n["suite"].as_str().unwrap_or("?"),
                n["reason"].as_str().unwrap_or("?")
            );
        }
    }
    println!(
        "\n{} distinct checks, {} trials: {}",
        document["checkCount"], document["trialCount"], document["counts"]
    );
}

fn print_lines(suites: &[Value], status: &str, title: &str) {
    let lines: Vec<String> = suites
        .iter()
        .flat_map(|s| s["trials"].as_array().cloned().unwrap_or_default())
        .filter(|t| t["status"] == status)
        .map(|t| {
            let message = t["message"].as_str().unwrap_or("");
            let first = message.lines().next().unwrap_or("");
            format!("  {}: {first}", t["name"].as_str().unwrap_or("?"))
        })
        .collect();
    if !lines.is_empty() {
        println!("{title}");
        for line in lines {
            println!("{line}");
        }
    }
}

fn print_matrix(suites: &[Value]) {
    let keys = [
        "reusableLeases",
        "nativeSyncIn",
        "nativeSyncOut",
        "persistentProcessSessions",
        "independentControlCommands",
        "incrementalSessionOutput",
        "concurrentSyncOperations",
        "duplexCommandStream",
        "runnerWebSocketIngress",
    ];
    if suites.is_empty() {
        return;
    }
    println!("\ncapability matrix (environment snapshot; 1 = granted)");
    let width = suites
        .iter()
        .map(|s| s["driver"].as_str().unwrap_or("?").len())
        .max()
        .unwrap_or(0)
        .max(6)
        + 2;
    print!("{:<28}", "");
    for suite in suites {
        print!("{:>width$}", suite["driver"].as_str().unwrap_or("?"));
    }
    println!();
    for key in keys {
        print!("{key:<28}");
        for suite in suites {
            let granted = suite["capabilities"][key] == true;
            print!("{:>width$}", u8::from(granted));
        }
        println!();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn option_errors_are_clear() {
        assert_eq!(
            parse(&args(&["--driver", "zzz"])).err().unwrap(),
            format!(
                "unknown driver \"zzz\"; one of {:?} or all",
                crate::drivers::keys().unwrap()
            )
        );
        assert_eq!(
            parse(&args(&["--worker", "w"])).err().unwrap(),
            "--worker needs --manifest (the worker's plugin manifest)"
        );
        assert_eq!(
            parse(&args(&["--cases", "x"])).err().unwrap(),
            "--cases takes a number, not \"x\""
        );
        assert_eq!(
            parse(&args(&["--deadline", "0"])).err().unwrap(),
            "--deadline takes a positive number of seconds, not \"0\""
        );
        let all = parse(&args(&[])).unwrap();
        // Every workspace driver, in member order: the built-in four first.
        assert_eq!(all.drivers, crate::drivers::keys().unwrap());
        assert_eq!(all.drivers[..4], ["local", "docker", "sandbox", "ssh"]);
    }

    #[test]
    fn a_manifest_alone_selects_the_worker() {
        let manifest = root().join("crates/driver-plugin-sandbox/reference-worker.manifest.json");
        let options = parse(&args(&["--manifest", manifest.to_str().unwrap()])).unwrap();
        assert_eq!(options.drivers, vec!["worker"]);
        assert_eq!(options.worker, None);
    }

    #[test]
    fn one_document_counts_every_trial_and_fails_on_what_did_not_start() {
        let suite = |driver: &str, statuses: &[&str]| {
            json!({
                "driver": driver,
                "passed": !statuses.contains(&"failed"),
                "trials": statuses.iter().enumerate().map(|(i, s)| json!({
                    "name": format!("driver_{driver}::check_{i}"), "status": s
                })).collect::<Vec<_>>(),
            })
        };
        let doc = combine(
            vec![
                suite("a", &["passed", "notChecked"]),
                suite("b", &["passed", "failed", "ignored"]),
            ],
            vec![json!({"suite": "c", "reason": "no engine", "skipped": true})],
            true,
        );
        assert_eq!(doc["passed"], false);
        assert_eq!(doc["checkCount"], 3);
        assert_eq!(doc["trialCount"], 5);
        assert_eq!(
            doc["counts"],
            json!({"passed": 2, "failed": 1, "notChecked": 1, "ignored": 1})
        );
        let ok = combine(vec![suite("a", &["passed"])], Vec::new(), true);
        assert_eq!(ok["passed"], true);
        let not_started = combine(
            vec![suite("a", &["passed"])],
            vec![json!({"suite": "docker", "reason": "no engine", "skipped": false})],
            true,
        );
        assert_eq!(not_started["passed"], false);
        assert_eq!(
            combine(vec![suite("a", &["passed"])], Vec::new(), false)["passed"],
            false
        );
    }
}
