//! The operations a driver may lack, as data: one row per operation with its stable
//! error kind and the words its refusal ends with. [`RuntimeError::Unsupported`] renders
//! `Environment driver "{key}" does not support {words}.` from the row, so the gate's
//! table names an operation instead of building an error.
//!
//! [`RuntimeError::Unsupported`]: super::RuntimeError::Unsupported

use std::fmt;

/// An optional operation a driver may not support (the `operation` of
/// [`RuntimeError::Unsupported`](super::RuntimeError::Unsupported)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UnsupportedOperation {
    /// `resume_lease` (no resume group, or the snapshot denies `reusableLeases`).
    Resume,
    /// `destroy_lease`.
    Destroy,
    /// `realize_workspace`.
    Realize,
    /// `execute`.
    Execute,
    /// `sync_in` / `sync_out` (no sync group, or the snapshot denies that direction).
    Sync,
    /// `open_duplex_channel` (no duplex group).
    Duplex,
    /// An acquire asked for an expiry the driver cannot guarantee (it attested none, or a
    /// later one); the lease was released again (fail closed).
    Expiry,
    /// `capture_template`.
    TemplateCapture,
    /// `delete_template`.
    TemplateDelete,
    /// `templates` (listing), or an acquire from a template.
    Templates,
    /// The process verbs (`spawn`, `processes`, `output`, ...): no process group, or the
    /// snapshot denies `persistentProcessSessions`.
    ProcessSessions,
    /// `pause_lease` / `unpause_lease` (no pause group).
    Pause,
    /// `expose` (no exposed-ports group).
    ExposePorts,
    /// `fork_lease` (no fork group).
    Fork,
    /// An idle timeout or keep-alive (no idle group).
    IdleTimeout,
    /// `extend` (no extend group).
    Extend,
    /// `runner_ingress` (no runner ingress group, or the snapshot denies
    /// `runnerWebSocketIngress`).
    RunnerIngress,
}

/// One row: the operation, its stable error kind, the words its refusal ends with.
type Row = (UnsupportedOperation, &'static str, &'static str);

/// The table, in the enum's order (a test keeps it so).
const ROWS: [Row; 17] = [
    (UnsupportedOperation::Resume, "resume_unsupported", "lease resume"),
    (UnsupportedOperation::Destroy, "destroy_unsupported", "lease destroy"),
    (
        UnsupportedOperation::Realize,
        "realize_unsupported",
        "workspace realization",
    ),
    (
        UnsupportedOperation::Execute,
        "execute_unsupported",
        "command execution",
    ),
    (UnsupportedOperation::Sync, "sync_unsupported", "native file sync"),
    (UnsupportedOperation::Duplex, "duplex_unsupported", "duplex channels"),
    (UnsupportedOperation::Expiry, "expiry_unsupported", "lease expiry"),
    (
        UnsupportedOperation::TemplateCapture,
        "template_capture_unsupported",
        "template capture",
    ),
    (
        UnsupportedOperation::TemplateDelete,
        "template_delete_unsupported",
        "template deletion",
    ),
    (UnsupportedOperation::Templates, "templates_unsupported", "templates"),
    (
        UnsupportedOperation::ProcessSessions,
        "process_sessions_unsupported",
        "persistent process sessions",
    ),
    (UnsupportedOperation::Pause, "pause_unsupported", "pause"),
    (
        UnsupportedOperation::ExposePorts,
        "expose_unsupported",
        "exposed lease ports",
    ),
    (UnsupportedOperation::Fork, "fork_unsupported", "lease fork"),
    (
        UnsupportedOperation::IdleTimeout,
        "idle_timeout_unsupported",
        "idle timeouts",
    ),
    (
        UnsupportedOperation::Extend,
        "extend_unsupported",
        "moving a lease's expiry",
    ),
    (
        UnsupportedOperation::RunnerIngress,
        "runner_ingress_unsupported",
        "runner WebSocket ingress",
    ),
];

impl UnsupportedOperation {
    /// Every operation, in table order.
    pub const ALL: [UnsupportedOperation; 17] = [
        UnsupportedOperation::Resume,
        UnsupportedOperation::Destroy,
        UnsupportedOperation::Realize,
        UnsupportedOperation::Execute,
        UnsupportedOperation::Sync,
        UnsupportedOperation::Duplex,
        UnsupportedOperation::Expiry,
        UnsupportedOperation::TemplateCapture,
        UnsupportedOperation::TemplateDelete,
        UnsupportedOperation::Templates,
        UnsupportedOperation::ProcessSessions,
        UnsupportedOperation::Pause,
        UnsupportedOperation::ExposePorts,
        UnsupportedOperation::Fork,
        UnsupportedOperation::IdleTimeout,
        UnsupportedOperation::Extend,
        UnsupportedOperation::RunnerIngress,
    ];

    fn row(self) -> &'static Row {
        &ROWS[self as usize]
    }

    /// The stable `snake_case` kind of the refusal (`duplex_unsupported`, ...), what
    /// [`RuntimeError::kind`](super::RuntimeError::kind) answers for it.
    pub fn kind(self) -> &'static str {
        self.row().1
    }

    /// The words the refusal ends with (`duplex channels`); also its `Display`.
    pub fn words(self) -> &'static str {
        self.row().2
    }
}

impl fmt::Display for UnsupportedOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.words())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RuntimeError;

    #[test]
    fn the_table_follows_the_enum() {
        for (index, operation) in UnsupportedOperation::ALL.into_iter().enumerate() {
            assert_eq!(ROWS[index].0, operation);
        }
    }

    /// Every (key, operation) row renders the exact text and kind the ten variants this
    /// one replaced had.
    #[test]
    fn every_row_renders_the_pinned_text_and_kind() {
        let rows: [(&str, UnsupportedOperation, &str, &str); 16] = [
            (
                "local",
                UnsupportedOperation::Resume,
                "Environment driver \"local\" does not support lease resume.",
                "resume_unsupported",
            ),
            (
                "docker",
                UnsupportedOperation::Destroy,
                "Environment driver \"docker\" does not support lease destroy.",
                "destroy_unsupported",
            ),
            (
                "k",
                UnsupportedOperation::Realize,
                "Environment driver \"k\" does not support workspace realization.",
                "realize_unsupported",
            ),
            (
                "k",
                UnsupportedOperation::Execute,
                "Environment driver \"k\" does not support command execution.",
                "execute_unsupported",
            ),
            (
                "ssh",
                UnsupportedOperation::Sync,
                "Environment driver \"ssh\" does not support native file sync.",
                "sync_unsupported",
            ),
            (
                "local",
                UnsupportedOperation::Duplex,
                "Environment driver \"local\" does not support duplex channels.",
                "duplex_unsupported",
            ),
            (
                "fake",
                UnsupportedOperation::Expiry,
                "Environment driver \"fake\" does not support lease expiry.",
                "expiry_unsupported",
            ),
            (
                "k",
                UnsupportedOperation::TemplateCapture,
                "Environment driver \"k\" does not support template capture.",
                "template_capture_unsupported",
            ),
            (
                "k",
                UnsupportedOperation::TemplateDelete,
                "Environment driver \"k\" does not support template deletion.",
                "template_delete_unsupported",
            ),
            (
                "a \"quoted\" key",
                UnsupportedOperation::Templates,
                "Environment driver \"a \"quoted\" key\" does not support templates.",
                "templates_unsupported",
            ),
            (
                "docker",
                UnsupportedOperation::ProcessSessions,
                "Environment driver \"docker\" does not support persistent process sessions.",
                "process_sessions_unsupported",
            ),
            (
                "ssh",
                UnsupportedOperation::Pause,
                "Environment driver \"ssh\" does not support pause.",
                "pause_unsupported",
            ),
            (
                "sandbox",
                UnsupportedOperation::Fork,
                "Environment driver \"sandbox\" does not support lease fork.",
                "fork_unsupported",
            ),
            (
                "ssh",
                UnsupportedOperation::IdleTimeout,
                "Environment driver \"ssh\" does not support idle timeouts.",
                "idle_timeout_unsupported",
            ),
            (
                "sandbox",
                UnsupportedOperation::Extend,
                "Environment driver \"sandbox\" does not support moving a lease's expiry.",
                "extend_unsupported",
            ),
            (
                "local",
                UnsupportedOperation::RunnerIngress,
                "Environment driver \"local\" does not support runner WebSocket ingress.",
                "runner_ingress_unsupported",
            ),
        ];
        for (key, operation, text, kind) in rows {
            let error = RuntimeError::Unsupported {
                key: key.into(),
                operation,
            };
            assert_eq!(error.to_string(), text);
            assert_eq!(error.kind(), kind);
            assert!(!error.retryable(), "{error}");
        }
    }
}
