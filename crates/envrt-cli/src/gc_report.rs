//! What `envrt gc` did (or, with `--dry-run`, would do): printed line by line as it goes,
//! or with `--json` gathered into one document printed at the end.
//!
//! The document (`--json`):
//!
//! ```json
//! {
//!   "ok": true,
//!   "dryRun": false,
//!   "leases": [{"id": "…", "reason": "expired" | "holder_gone" | "lease_lost" | "retry_cleanup",
//!               "holderPid": 123 | null, "killedProcesses": 0, "done": true, "error": null}],
//!   "orphans": [{"kind": "workspace", "id": "…", "lease": "…" | null, "done": true}],
//!   "errors": ["envrt: gc could not reconcile driver \"docker\": …"],
//!   "released": 1,
//!   "failed": 0
//! }
//! ```
//!
//! `done` is false for everything a dry run lists, and for a lease whose release failed
//! (its `error` is the failure's text). `errors` holds the failures that are not one
//! lease's release (a reconcile, killing what a dead holder left running), each the exact
//! line the text form prints on stderr. `released` and `failed` are the counts of the text
//! form's last line `gc: N released, M failed`; `ok` is `failed == 0`, and the exit code is
//! 0 when it is true, 1 otherwise.

use serde_json::{Value, json};

/// Why gc releases a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// Past its expiry: recorded `expired`.
    Expired,
    /// Active, its holder process (this pid) is gone: recorded `failed`.
    HolderGone(u32),
    /// Active, but its backend resource is gone (removed behind envrt's back): recorded
    /// `failed`.
    Lost,
    /// A clean-up failed earlier: released again.
    RetryCleanup,
}

impl Reason {
    /// The text form's parenthesis.
    fn why(self) -> String {
        match self {
            Reason::Expired => "it expired".to_owned(),
            Reason::HolderGone(pid) => format!("its holder, pid {pid}, is gone"),
            Reason::Lost => "it is lost: its provider resource is gone".to_owned(),
            Reason::RetryCleanup => "retrying a clean-up that failed earlier".to_owned(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Reason::Expired => "expired",
            Reason::HolderGone(_) => "holder_gone",
            Reason::Lost => "lease_lost",
            Reason::RetryCleanup => "retry_cleanup",
        }
    }
}

/// The gc run's account.
pub(crate) struct GcReport {
    json: bool,
    dry_run: bool,
    leases: Vec<Value>,
    orphans: Vec<Value>,
    errors: Vec<String>,
    released: u64,
    failed: u64,
    /// Processes killed per lease, before its release is recorded.
    killed: Vec<(String, u64)>,
}

impl GcReport {
    pub(crate) fn new(json: bool, dry_run: bool) -> GcReport {
        GcReport {
            json,
            dry_run,
            leases: Vec::new(),
            orphans: Vec::new(),
            errors: Vec::new(),
            released: 0,
            failed: 0,
            killed: Vec::new(),
        }
    }

    /// A lease gc releases (`outcome` `None` on a dry run: it would).
    pub(crate) fn lease(&mut self, id: &str, reason: Reason, outcome: Option<Result<(), String>>) {
        let why = reason.why();
        let (done, error) = match &outcome {
            None => {
                self.line(format!("would release lease {id} ({why})"));
                (false, None)
            }
            Some(Ok(())) => {
                self.released += 1;
                self.line(format!("released lease {id} ({why})"));
                (true, None)
            }
            Some(Err(e)) => {
                self.failed += 1;
                self.error_line(format!("envrt: gc could not release lease {id} ({why}): {e}"));
                (false, Some(e.clone()))
            }
        };
        let killed = self
            .killed
            .iter()
            .filter(|(lease, _)| lease == id)
            .map(|(_, n)| n)
            .sum::<u64>();
        self.leases.push(json!({
            "id": id,
            "reason": reason.name(),
            "holderPid": match reason { Reason::HolderGone(pid) => Some(pid), _ => None },
            "killedProcesses": killed,
            "done": done,
            "error": error,
        }));
    }

    /// Processes a dead holder left running in `lease`, killed before its release.
    pub(crate) fn killed(&mut self, lease: &str, count: u64) {
        if count > 0 {
            self.line(format!(
                "killed {} left running in lease {lease}",
                crate::plural(count, "process", "processes")
            ));
        }
        self.killed.push((lease.to_owned(), count));
    }

    /// An orphan resource gc removes (or would, on a dry run).
    pub(crate) fn orphan(&mut self, kind: &str, id: &str, lease: Option<&str>) {
        let shown = lease.unwrap_or("-");
        if self.dry_run {
            self.line(format!("would remove orphan {kind} {id} (lease {shown})"));
        } else {
            self.released += 1;
            self.line(format!("removed orphan {kind} {id} (lease {shown})"));
        }
        self.orphans
            .push(json!({"kind": kind, "id": id, "lease": lease, "done": !self.dry_run}));
    }

    /// A failure that is not one lease's release: the exact stderr line.
    pub(crate) fn failure(&mut self, line: String) {
        self.failed += 1;
        self.error_line(line);
    }

    fn line(&self, text: String) {
        if !self.json {
            crate::out!("{text}");
        }
    }

    fn error_line(&mut self, text: String) {
        if self.json {
            self.errors.push(text);
        } else {
            crate::say!("{text}");
        }
    }

    /// Prints the summary (the text form's last line, or the document) and gives the exit
    /// code.
    pub(crate) fn finish(self) -> u8 {
        if self.json {
            let document = json!({
                "ok": self.failed == 0,
                "dryRun": self.dry_run,
                "leases": self.leases,
                "orphans": self.orphans,
                "errors": self.errors,
                "released": self.released,
                "failed": self.failed,
            });
            crate::out!(
                "{}",
                serde_json::to_string_pretty(&document).unwrap_or_else(|_| "null".into())
            );
        } else if !self.dry_run {
            crate::out!("gc: {} released, {} failed", self.released, self.failed);
        }
        if self.failed == 0 { 0 } else { 1 }
    }
}
