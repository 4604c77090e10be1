//! The machine-readable report and the capability matrix line.

use std::io::Write;

use envrt_runtime_core::CapabilitySnapshot;
use serde::{Deserialize, Serialize};

use crate::context::Ctx;

/// One trial's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialOutcome {
    /// `driver_<key>::<check>`.
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
    /// The failure message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
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
    /// Every trial that ran (filtered trials are absent).
    pub trials: Vec<TrialOutcome>,
    /// Whether everything passed.
    pub passed: bool,
}

impl Report {
    /// Appends the report as one JSON line to `path`.
    pub fn append_to(&self, path: &str) -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        let line = serde_json::to_string(self).map_err(std::io::Error::other)?;
        writeln!(file, "{line}")
    }
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
