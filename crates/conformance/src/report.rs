//! The machine-readable report and the capability matrix line. One run of a test binary
//! writes ONE JSON document ([`RunReport`]) holding every suite it ran, every trial of
//! each (failures, panics and deadline overruns included) and every suite that could not
//! start, with its reason.

use envrt_runtime_core::CapabilitySnapshot;
use serde::{Deserialize, Serialize};

use crate::context::Ctx;

/// How one trial ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Status {
    /// The promise was checked and holds.
    Passed,
    /// The promise is broken, the check panicked, or it overran its deadline.
    Failed,
    /// The check could not look (no probe, `/proc` unreadable, ...): neither a pass nor a
    /// failure; the message says why.
    NotChecked,
    /// A declared deviation: registered, not run.
    Ignored,
}

impl Status {
    /// The word the tables print.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::NotChecked => "not checked",
            Status::Ignored => "ignored",
        }
    }
}

/// One trial's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrialOutcome {
    /// `driver_<key>::<check>`.
    pub name: String,
    /// The promise the check proves, one line (empty in a report written before the kit
    /// carried promises).
    #[serde(default)]
    pub promise: String,
    /// Whether it did not fail (true for passed, not checked and ignored).
    pub passed: bool,
    /// How it ended.
    pub status: Status,
    /// The failure message, or why it was not checked or ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Wall time of the check in milliseconds (up to the deadline for an abandoned one).
    #[serde(default)]
    pub duration_ms: u64,
}

impl TrialOutcome {
    /// An outcome with `status`.
    pub fn new(name: String, status: Status, message: Option<String>, duration_ms: u64) -> Self {
        TrialOutcome {
            name,
            promise: String::new(),
            passed: status != Status::Failed,
            status,
            message,
            duration_ms,
        }
    }

    /// The outcome with the promise its check proves.
    pub fn with_promise(mut self, promise: impl Into<String>) -> Self {
        self.promise = promise.into();
        self
    }
}

/// The report of one driver's run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The driver key.
    pub driver: String,
    /// The environment snapshot.
    pub capabilities: CapabilitySnapshot,
    /// The snapshot of an ephemeral lease.
    pub lease_capabilities: CapabilitySnapshot,
    /// Every trial that was selected (deviations appear as `ignored`; trials a libtest
    /// filter left out are absent).
    pub trials: Vec<TrialOutcome>,
    /// Declared deviations: (trial name, reason); those trials did not run.
    pub deviations: Vec<(String, String)>,
    /// Whether no trial failed.
    pub passed: bool,
}

/// A suite that could not start, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotStarted {
    /// The suite (driver key or a description).
    pub suite: String,
    /// Why it could not start.
    pub reason: String,
    /// True when it was skipped on purpose (not required here), false when that is a
    /// failure.
    pub skipped: bool,
}

/// Everything one run wrote: one JSON document.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunReport {
    /// Whether every suite started (or was skipped on purpose) and no trial failed.
    pub passed: bool,
    /// One report per suite that ran.
    pub suites: Vec<Report>,
    /// Suites that could not start.
    #[serde(default)]
    pub not_started: Vec<NotStarted>,
}

impl RunReport {
    /// Builds the document, computing `passed`.
    pub fn new(suites: Vec<Report>, not_started: Vec<NotStarted>) -> Self {
        let passed = suites.iter().all(|s| s.passed) && not_started.iter().all(|n| n.skipped);
        RunReport {
            passed,
            suites,
            not_started,
        }
    }

    /// Writes the document to `path` (replacing it).
    pub fn write_to(&self, path: &str) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(path, text + "\n")
    }
}

/// Writes a report for a run in which no suite could start (a test binary whose driver is
/// missing), to `ENVRT_CONFORMANCE_REPORT` when set, and prints the reason.
pub fn report_not_started(suite: &str, reason: &str, skipped: bool) {
    print_not_started(suite, reason, skipped);
    write_env_report(&RunReport::new(
        Vec::new(),
        vec![NotStarted {
            suite: suite.to_owned(),
            reason: reason.to_owned(),
            skipped,
        }],
    ));
}

pub(crate) fn print_not_started(suite: &str, reason: &str, skipped: bool) {
    let word = if skipped { "skipped" } else { "cannot start" };
    println!("envrt-not-started {suite}: {word}: {reason}");
}

pub(crate) fn write_env_report(report: &RunReport) {
    if let Ok(path) = std::env::var("ENVRT_CONFORMANCE_REPORT") {
        if let Err(e) = report.write_to(&path) {
            eprintln!("cannot write the conformance report to {path}: {e}");
        }
    }
}

/// `envrt-promise driver_<key>::<check>: <promise>`: the promise a failed or unchecked
/// trial did not prove, printed after the run.
pub(crate) fn promise_line(trial: &TrialOutcome) -> String {
    format!("envrt-promise {}: {}", trial.name, trial.promise)
}

/// `capabilities driver_<key>: key=0/1 ...` for the matrix xtask prints.
pub(crate) fn matrix_line(ctx: &Ctx) -> String {
    let p = &ctx.profile;
    let flags: Vec<String> = p
        .environment
        .entries()
        .map(|(k, v)| format!("{}={}", k.as_str(), u8::from(v)))
        .collect();
    let groups = format!(
        "resume={} destroy={} realize={} execute={} sync={} duplex={}",
        u8::from(p.has_resume),
        u8::from(p.has_destroy),
        u8::from(p.has_realize),
        u8::from(p.has_execute),
        u8::from(p.has_sync),
        u8::from(p.has_duplex)
    );
    format!("envrt-capabilities driver_{}: {} {}", ctx.key, flags.join(" "), groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_carries_its_promise_into_the_json_and_the_promise_line() {
        let trial = TrialOutcome::new(
            "driver_x::execute_exit_codes".into(),
            Status::Failed,
            Some("boom".into()),
            3,
        )
        .with_promise("The command's exit code is reported as it exited.");
        let json = serde_json::to_value(&trial).unwrap();
        assert_eq!(json["promise"], "The command's exit code is reported as it exited.");
        assert_eq!(json["name"], "driver_x::execute_exit_codes");
        assert_eq!(
            promise_line(&trial),
            "envrt-promise driver_x::execute_exit_codes: The command's exit code is reported as it exited."
        );
        // A report written before promises existed still reads.
        let old: TrialOutcome = serde_json::from_value(serde_json::json!({
            "name": "driver_x::a", "passed": true, "status": "passed"
        }))
        .unwrap();
        assert_eq!(old.promise, "");
    }
}
