//! `cargo xtask conformance`: runs the kit's test targets, prints the capability matrix
//! and a pass/fail table, writes a JSON report, exits non-zero on any failure.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::util::{cargo, root};

const DRIVERS: &[&str] = &["local", "docker", "sandbox"];

struct Options {
    drivers: Vec<String>,
    worker: Option<String>,
    manifest: Option<String>,
    cases: Option<String>,
    report: PathBuf,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        drivers: Vec::new(),
        worker: None,
        manifest: None,
        cases: None,
        report: root().join("target/conformance/report.json"),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--driver" => {
                let driver = value()?;
                if driver == "all" {
                    options.drivers = DRIVERS.iter().map(|s| s.to_string()).collect();
                } else if DRIVERS.contains(&driver.as_str()) {
                    options.drivers.push(driver);
                } else {
                    return Err(format!("unknown driver {driver:?}; one of {DRIVERS:?} or all"));
                }
            }
            "--worker" => options.worker = Some(value()?),
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
            "--report" => options.report = PathBuf::from(value()?),
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    if options.worker.is_some() != options.manifest.is_some() {
        return Err("--worker and --manifest go together".into());
    }
    if options.worker.is_some() {
        if !options.drivers.is_empty() {
            return Err("--worker replaces --driver".into());
        }
        options.drivers.push("worker".into());
    } else if options.drivers.is_empty() {
        options.drivers = DRIVERS.iter().map(|s| s.to_string()).collect();
    }
    Ok(options)
}

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let options = parse(args)?;
    if let Some(parent) = options.report.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    let _ = std::fs::remove_file(&options.report);
    let mut rows = Vec::new();
    let mut matrix = Vec::new();
    let mut deviations: Vec<String> = Vec::new();
    for driver in &options.drivers {
        let target = if driver == "worker" { "sandbox" } else { driver.as_str() };
        if !root().join(format!("crates/conformance/tests/{target}.rs")).exists() {
            return Err(format!("no conformance target for driver {driver:?} yet"));
        }
        if target == "sandbox" {
            // The reference worker is a binary of another package: build it first.
            let mut build = cargo();
            build.args([
                "build",
                "-p",
                "envrt-driver-plugin-sandbox",
                "--bin",
                "envrt-sandbox-worker",
            ]);
            crate::util::run(build)?;
        }
        let mut command: Command = cargo();
        command
            .args(["test", "-p", "envrt-conformance", "--test", target, "--"])
            .env("ENVRT_CONFORMANCE_REPORT", &options.report)
            .stdout(Stdio::piped());
        if let Some(cases) = &options.cases {
            command.env("ENVRT_CONFORMANCE_CASES", cases);
        }
        if let (Some(worker), Some(manifest)) = (&options.worker, &options.manifest) {
            command
                .env("ENVRT_WORKER_COMMAND", worker)
                .env("ENVRT_WORKER_MANIFEST", manifest);
        }
        eprintln!("xtask: conformance for {driver}");
        let output = command.output().map_err(|e| format!("cannot run cargo: {e}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        print!("{stdout}");
        matrix.extend(
            stdout
                .lines()
                .filter_map(|l| l.strip_prefix("envrt-capabilities "))
                .map(String::from),
        );
        deviations.extend(
            stdout
                .lines()
                .filter_map(|l| l.strip_prefix("envrt-deviation "))
                .map(String::from),
        );
        let (passed, failed, _) = crate::util::count_results(&stdout);
        rows.push((driver.clone(), passed, failed, output.status.success()));
    }
    print_matrix(&matrix);
    println!("\n{:<10} {:>7} {:>7}  result", "driver", "passed", "failed");
    for (driver, passed, failed, ok) in &rows {
        println!(
            "{driver:<10} {passed:>7} {failed:>7}  {}",
            if *ok { "ok" } else { "FAILED" }
        );
    }
    if !deviations.is_empty() {
        println!("\ndeclared deviations (reported as ignored):");
        for line in &deviations {
            println!("  {line}");
        }
    }
    println!("report: {}", options.report.display());
    if rows.iter().all(|r| r.3) {
        Ok(())
    } else {
        Err("conformance failed".into())
    }
}

fn print_matrix(lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    let parsed: Vec<(String, Vec<(String, String)>)> = lines
        .iter()
        .filter_map(|line| {
            let (driver, rest) = line.split_once(": ")?;
            let pairs = rest
                .split_whitespace()
                .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
                .collect();
            Some((driver.trim_start_matches("driver_").to_string(), pairs))
        })
        .collect();
    let Some((_, first)) = parsed.first() else { return };
    println!("\ncapability matrix (environment snapshot; 1 = granted)");
    let width = parsed.iter().map(|(d, _)| d.len()).max().unwrap_or(0).max(6) + 2;
    print!("{:<28}", "");
    for (driver, _) in &parsed {
        print!("{driver:>width$}");
    }
    println!();
    for (i, (key, _)) in first.iter().enumerate() {
        print!("{key:<28}");
        for (_, pairs) in &parsed {
            print!("{:>width$}", pairs.get(i).map(|p| p.1.as_str()).unwrap_or("?"));
        }
        println!();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_errors_are_clear() {
        let args = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse(&args(&["--driver", "zzz"])).err().unwrap(),
            "unknown driver \"zzz\"; one of [\"local\", \"docker\", \"sandbox\"] or all"
        );
        assert_eq!(
            parse(&args(&["--worker", "w"])).err().unwrap(),
            "--worker and --manifest go together"
        );
        assert_eq!(
            parse(&args(&["--cases", "x"])).err().unwrap(),
            "--cases takes a number, not \"x\""
        );
        let all = parse(&args(&[])).unwrap();
        assert_eq!(all.drivers, vec!["local", "docker", "sandbox"]);
    }
}
