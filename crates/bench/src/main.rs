//! `envrt-bench`: measures envrt through its facade against the bare tools a user would
//! otherwise reach for, in the same run, and prints one table of figures and ratios (and
//! writes it as JSON). Run it with `cargo xtask bench [--quick] [--only ROW]`.
//!
//! ```text
//! envrt-bench [--quick] [--only ROW]... [--runs N] [--json PATH] [--markdown PATH]
//!             [--report PATH.md] [--compare OLD.json]
//! envrt-bench --list
//! ```
//! `--runs N` runs the selected rows N times; `--report PATH.md` writes every row's median
//! run with its floor, target, verdict and spread over the runs (`summary`), and the same
//! as JSON beside it (`PATH.json`); `--compare OLD.json` prints (and appends to the report)
//! what moved since an earlier report.
//! The rows come from scenarios (`scenario`: execute latency, output capture, duplex,
//! sync, concurrent executes, lease growth, open routes, pools, peers, process sessions,
//! agent-shaped workloads),
//! each run over the driver targets that support it (`targets`: local, Docker, sandbox,
//! SSH); `--list` prints them with their row numbers, groups and targets, and runs nothing.
//! `ROW` is a row number (1–11) or a group key: `exec-local`, `exec-docker`,
//! `exec-sandbox`, `exec-ssh`, `stdout`, `duplex`, `sync-local`, `sync-docker`,
//! `sync-ssh`, `scale-exec` (and under it `scale-exec-docker`, `scale-exec-sandbox`),
//! `scale-leases`, `scale-open` (local, Docker and sandbox rows each), `scale-duplex`,
//! `pool-local`, `pool-docker`, `pool-sandbox`, `peers`, `processes-spawn`,
//! `processes-replay`, `processes-memory`, `exec-supervisor-docker`, `egress`, `agent-loop`,
//! `agent-many`, `service` (`envrt serve`, the `envrt` binary beside this one) (a prefix such
//! as `exec`, `sync`, `processes` or `agent` selects every group under it).

mod baseline;
mod facade;
mod measure;
mod report;
mod scenario;
mod summary;
mod targets;

use std::path::PathBuf;
use std::process::ExitCode;

use report::Row;
use scenario::growth;
use serde_json::json;

/// What to run and how long.
#[derive(Clone, Debug, Default)]
pub(crate) struct Config {
    /// The short run (under 3 minutes on 2 cores).
    pub(crate) quick: bool,
    /// Row numbers or group keys to run; all when empty.
    pub(crate) only: Vec<String>,
    /// Print the scenarios and run nothing.
    pub(crate) list: bool,
}

/// Where the results go, besides the printed table.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Outputs {
    /// Times the selected rows run (1 unless `--runs`).
    pub(crate) runs: usize,
    /// The last run's rows as JSON (`--json`).
    pub(crate) json: Option<PathBuf>,
    /// The last run's rows as Markdown (`--markdown`).
    pub(crate) markdown: Option<PathBuf>,
    /// The report over all runs (`--report PATH.md`, and `PATH.json` beside it).
    pub(crate) report: Option<PathBuf>,
    /// An earlier report to compare with (`--compare OLD.json`).
    pub(crate) compare: Option<PathBuf>,
}

impl Config {
    /// Whether a group is selected.
    pub(crate) fn wants(&self, group: &str, number: u8) -> bool {
        self.only.is_empty()
            || self.only.iter().any(|o| {
                o == group || group.starts_with(&format!("{o}-")) || o.parse::<u8>().is_ok_and(|n| n == number)
            })
    }

    /// Rounds of a fast (sub-10 ms) execute latency measurement.
    pub(crate) fn exec_rounds(&self) -> usize {
        if self.quick { 300 } else { 2000 }
    }

    /// Rounds of a slow (tens of ms) execute latency measurement.
    pub(crate) fn slow_exec_rounds(&self) -> usize {
        if self.quick { 40 } else { 200 }
    }

    /// Bytes streamed in the throughput rows.
    pub(crate) fn stream_bytes(&self) -> u64 {
        if self.quick { 256 << 20 } else { 1 << 30 }
    }

    /// Bytes of the Docker duplex rows: the engine's exec attach moves only tens of MB/s,
    /// so the quick run uses 64 MiB there.
    pub(crate) fn docker_stream_bytes(&self) -> u64 {
        if self.quick { 64 << 20 } else { 1 << 30 }
    }

    /// Files in the small-file sync tree.
    pub(crate) fn small_files(&self) -> usize {
        if self.quick { 2_000 } else { 10_000 }
    }

    /// Repetitions of each copy or throughput measurement (the median is kept).
    pub(crate) fn reps(&self) -> usize {
        let _ = self.quick;
        3
    }

    /// Repetitions of the Docker copy rows (each small-file run into the container's
    /// overlay takes seconds).
    pub(crate) fn docker_reps(&self) -> usize {
        if self.quick { 2 } else { 3 }
    }

    /// Waves of concurrent executes per concurrency level.
    pub(crate) fn waves(&self) -> usize {
        if self.quick { 3 } else { 10 }
    }

    /// Open leases in the memory row.
    pub(crate) fn leases(&self) -> usize {
        1_000
    }

    /// Open duplex routes in the route row (on a driver whose route ceiling is raised to
    /// it; the default ceiling is 128).
    pub(crate) fn routes(&self) -> usize {
        1_000
    }
}

fn parse(args: &[String]) -> Result<(Config, Outputs), String> {
    let mut config = Config::default();
    let mut out = Outputs {
        runs: 1,
        ..Outputs::default()
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--quick" => config.quick = true,
            "--list" => config.list = true,
            "--only" => config.only.push(value()?),
            "--json" => out.json = Some(PathBuf::from(value()?)),
            "--markdown" => out.markdown = Some(PathBuf::from(value()?)),
            "--report" => {
                let path = PathBuf::from(value()?);
                if path.extension().is_none_or(|e| e != "md") {
                    return Err(format!(
                        "--report takes a PATH.md (got {:?})",
                        path.display().to_string()
                    ));
                }
                out.report = Some(path);
            }
            "--compare" => out.compare = Some(PathBuf::from(value()?)),
            "--runs" => {
                let n = value()?;
                out.runs = match n.parse::<usize>() {
                    Ok(n @ 1..=20) => n,
                    _ => return Err(format!("--runs takes 1 to 20 (got {n:?})")),
                };
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok((config, out))
}

/// Reads an earlier report for `--compare`.
fn read_report(path: &std::path::Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))
}

fn machine() -> serde_json::Value {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0);
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    json!({
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "memory_gib": (mem_kib as f64 / (1024.0 * 1024.0) * 10.0).round() / 10.0,
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "cpu": cpu,
    })
}

fn utc_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

async fn run_all(config: &Config) -> Vec<Row> {
    let mut rows = Vec::new();
    for scenario in scenario::SCENARIOS.iter().filter(|s| s.selected(config)) {
        let started = std::time::Instant::now();
        let new = (scenario.run)(config).await;
        eprintln!(
            "envrt-bench: {}: {} row(s) in {:.1} s",
            scenario.section,
            new.len(),
            started.elapsed().as_secs_f64()
        );
        rows.extend(new);
    }
    rows
}

/// The text of `--list`: every scenario with its row number, groups and targets.
fn list() -> String {
    let mut out = format!(
        "targets: {}\nrow groups                                   targets\n",
        targets::KEYS.join(", ")
    );
    for scenario in scenario::SCENARIOS {
        out.push_str(&scenario.line());
        out.push('\n');
    }
    out
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let child = [Some(growth::LEASE_MEMORY_CHILD), Some(growth::CHILD)].contains(&args.first().map(String::as_str));
    let (config, outputs) = match parse(if child { &[] } else { &args }) {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("envrt-bench: {message}");
            return ExitCode::FAILURE;
        }
    };
    if config.list {
        print!("{}", list());
        return ExitCode::SUCCESS;
    }
    // Read the old report first: a bad path should not cost a whole run.
    let old = match outputs.compare.as_deref().map(read_report).transpose() {
        Ok(old) => old,
        Err(message) => {
            eprintln!("envrt-bench: {message}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("envrt-bench: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.first().map(String::as_str) == Some(growth::CHILD) {
        return match runtime.block_on(growth::child(&args[1..])) {
            Ok(measured) => {
                println!("{measured}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.first().map(String::as_str) == Some(growth::LEASE_MEMORY_CHILD) {
        let count = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(1000);
        return match runtime.block_on(growth::lease_memory_child(count)) {
            Ok(kib) => {
                println!("{kib}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    let started = std::time::Instant::now();
    let date = utc_now();
    // Other sessions build on the same cores: the report says how loaded the machine was.
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    let mut all_runs = Vec::new();
    for run in 0..outputs.runs {
        if outputs.runs > 1 {
            eprintln!("envrt-bench: run {} of {}", run + 1, outputs.runs);
        }
        all_runs.push(runtime.block_on(run_all(&config)));
    }
    drop(runtime);
    let rows = all_runs.last().cloned().unwrap_or_default();
    let machine = machine();
    let mode = if config.quick { "quick" } else { "full" };
    println!(
        "envrt-bench ({mode}) {date} — {} cores, {} GiB, kernel {}; took {:.0} s\n",
        machine["nproc"],
        machine["memory_gib"],
        machine["kernel"].as_str().unwrap_or(""),
        started.elapsed().as_secs_f64()
    );
    print!("{}", report::text_table(&rows));
    let header = json!({
        "load": load,
        "date": date,
        "mode": mode,
        "only": config.only,
        "seconds": started.elapsed().as_secs_f64(),
        "machine": machine,
    });
    let (json_path, markdown_path) = (outputs.json.clone(), outputs.markdown.clone());
    if let Err(message) = write_report(&outputs, all_runs, &header, old.as_ref()) {
        eprintln!("envrt-bench: {message}");
        return ExitCode::FAILURE;
    }
    if let Some(path) = json_path {
        let report = report::json_report(&rows, header.clone());
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        if let Err(e) = std::fs::write(&path, text + "\n") {
            eprintln!("envrt-bench: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    if let Some(path) = markdown_path {
        let text = format!(
            "Measured {date} ({mode} run) on {} cores, {} GiB, kernel {}.\n\n{}",
            machine["nproc"],
            machine["memory_gib"],
            machine["kernel"].as_str().unwrap_or(""),
            report::markdown_table(&rows)
        );
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("envrt-bench: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// Writes `--report` (Markdown and JSON over all runs) and prints `--compare`.
fn write_report(
    outputs: &Outputs,
    runs: Vec<Vec<report::Row>>,
    header: &serde_json::Value,
    old: Option<&serde_json::Value>,
) -> Result<(), String> {
    let count = runs.len();
    let summaries = summary::summarise(runs);
    let report = summary::json(header.clone(), count, &summaries);
    let mut compared = None;
    let old_path = outputs
        .compare
        .as_deref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    if let Some(old) = old {
        let text = summary::compare(old, &report).map_err(|e| format!("{}: {e}", old_path))?;
        println!("\nWhat moved since {}:\n\n{text}", old_path);
        compared = Some(text);
    }
    let Some(path) = &outputs.report else { return Ok(()) };
    let m = &header["machine"];
    let mut intro = format!(
        "Measured {} ({} run{}, {} mode) on {} cores, {} GiB, kernel {}; load average {} at the start, {} at the end.",
        header["date"].as_str().unwrap_or(""),
        count,
        if count == 1 { "" } else { "s" },
        header["mode"].as_str().unwrap_or(""),
        m["nproc"],
        m["memory_gib"],
        m["kernel"].as_str().unwrap_or(""),
        header["load"].as_str().unwrap_or("?"),
        std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default(),
    );
    intro.push_str(" Each row shows its median run; the spread is over all runs.");
    let mut text = summary::markdown(&intro, &summaries);
    if let Some(compared) = compared {
        text.push_str(&format!("\nWhat moved since {}:\n\n{compared}", old_path));
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let json_path = path.with_extension("json");
    let body = serde_json::to_string_pretty(&report).unwrap_or_default() + "\n";
    std::fs::write(&json_path, body).map_err(|e| format!("cannot write {}: {e}", json_path.display()))?;
    eprintln!("envrt-bench: wrote {} and {}", path.display(), json_path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_selects_by_number_group_or_prefix() {
        let config = |only: &[&str]| Config {
            quick: true,
            only: only.iter().map(|s| s.to_string()).collect(),
            list: false,
        };
        assert!(config(&[]).wants("sync-docker", 6));
        assert!(config(&["6"]).wants("sync-docker", 6));
        assert!(!config(&["6"]).wants("scale-exec", 7));
        assert!(config(&["sync"]).wants("sync-local", 6));
        assert!(!config(&["sync"]).wants("scale-exec", 7));
        assert!(config(&["exec-local"]).wants("exec-local", 1));
        assert!(!config(&["exec-local"]).wants("exec-docker", 2));
        assert!(!config(&["exec-l"]).wants("exec-local", 1));
        assert!(config(&["peers"]).wants(scenario::peers::GROUP, scenario::peers::NUMBER));
        assert!(config(&["9"]).wants(scenario::peers::GROUP, scenario::peers::NUMBER));
        assert!(!config(&["peers"]).wants("exec-local", 1));
    }

    #[test]
    fn the_list_has_a_header_and_one_line_per_scenario() {
        let text = list();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2 + scenario::SCENARIOS.len());
        assert_eq!(lines[0], "targets: local, docker, sandbox, ssh");
        assert!(lines[1].starts_with("row groups"), "{text}");
        assert!(
            lines.iter().any(|l| l.contains("sync-ssh") && l.ends_with("on ssh")),
            "{text}"
        );
    }

    #[test]
    fn options_parse_and_refuse_unknown_ones() {
        let args: Vec<String> = ["--quick", "--only", "3", "--json", "/x.json"].map(String::from).into();
        let (config, out) = parse(&args).unwrap();
        assert!(config.quick);
        assert_eq!(config.only, ["3"]);
        assert_eq!(out.json, Some(PathBuf::from("/x.json")));
        assert_eq!(out.markdown, None);
        assert_eq!(out.runs, 1);
        let args: Vec<String> = ["--runs", "3", "--report", "/r.md", "--compare", "/o.json"]
            .map(String::from)
            .into();
        let (_, out) = parse(&args).unwrap();
        assert_eq!(
            (out.runs, out.report, out.compare),
            (3, Some("/r.md".into()), Some("/o.json".into()))
        );
        assert_eq!(
            parse(&["--runs".into(), "0".into()]).unwrap_err(),
            "--runs takes 1 to 20 (got \"0\")"
        );
        assert_eq!(
            parse(&["--report".into(), "/r.txt".into()]).unwrap_err(),
            "--report takes a PATH.md (got \"/r.txt\")"
        );
        assert_eq!(
            read_report(std::path::Path::new("/nonexistent/old.json")).unwrap_err(),
            "cannot read /nonexistent/old.json: No such file or directory (os error 2)"
        );
        assert_eq!(parse(&["--only".into()]).unwrap_err(), "--only needs a value");
        assert_eq!(parse(&["--fast".into()]).unwrap_err(), "unknown option \"--fast\"");
        assert!(parse(&["--list".into()]).unwrap().0.list);
    }
}
