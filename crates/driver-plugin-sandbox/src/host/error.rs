//! Typed errors of the sandbox host. Each `Display` is the project's exact text; the
//! driver hands them to callers inside [`DriverError::Other`] with the typed error as its
//! source, so callers match with [`SandboxError::of`].

use envrt_driver_api::DriverError;

use crate::protocol::ErrorData;
use crate::protocol::codes;

/// An error of the plugin worker host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The manifest does not parse or lacks what the host needs.
    #[error("Invalid plugin manifest: {message}")]
    Manifest {
        /// What is wrong.
        message: String,
    },
    /// The worker could not be started or did not complete `initialize`.
    #[error("Worker initialize failed for \"{plugin_id}\": {message}")]
    InitializeFailed {
        /// The plugin id.
        plugin_id: String,
        /// Why.
        message: String,
    },
    /// A call got no answer in time.
    #[error("RPC call \"{method}\" timed out after {ms}ms")]
    Timeout {
        /// The method.
        method: String,
        /// The timeout in milliseconds.
        ms: u64,
    },
    /// The worker exited while the call was pending (code -32000).
    #[error("Worker process exited (code={}, signal={}){}", fmt_opt(.code), fmt_opt(.signal), fmt_stderr(.stderr))]
    WorkerExited {
        /// The exit code, when it exited normally.
        code: Option<i32>,
        /// The signal name, when a signal ended it.
        signal: Option<String>,
        /// The last ~8 KB of its stderr.
        stderr: String,
    },
    /// No worker is running and none will be (shut down, or crashed too often).
    #[error("Worker for plugin \"{plugin_id}\" is unavailable: {reason}")]
    WorkerUnavailable {
        /// The plugin id.
        plugin_id: String,
        /// Why.
        reason: String,
    },
    /// The worker crashed (or its restart failed) and the host is waiting out the restart
    /// backoff: the call was not sent. Retryable: a worker may serve once the backoff
    /// has passed (see [`SandboxError::retry_after`]).
    #[error(
        "Worker for plugin \"{plugin_id}\" is unavailable ({reason}); the host tries it again in {retry_in_ms} ms."
    )]
    WorkerRestarting {
        /// The plugin id.
        plugin_id: String,
        /// Why it is down: `it exited: code={code}, signal={signal}` or
        /// `its restart failed: {error}`.
        reason: String,
        /// How long until the host starts the worker again, in milliseconds.
        retry_in_ms: u64,
    },
    /// The worker answered with a JSON-RPC error; the text is the worker's message.
    #[error("{message}")]
    Rpc {
        /// The method called.
        method: String,
        /// The error code.
        code: i64,
        /// The worker's message.
        message: String,
        /// The structured refusal in the error's `data` (`{kind, fields}`), when the
        /// worker sent one (the reference worker does; SDK workers send text only).
        data: Option<ErrorData>,
    },
    /// The worker's result does not have the protocol's shape.
    #[error("Worker returned an invalid result for \"{method}\": {message}")]
    InvalidResult {
        /// The method.
        method: String,
        /// What is wrong.
        message: String,
    },
    /// The live worker does not advertise the method in `supportedMethods`.
    #[error("Worker for plugin \"{plugin_id}\" does not advertise \"{method}\".")]
    NotAdvertised {
        /// The plugin id.
        plugin_id: String,
        /// The method.
        method: String,
    },
    /// Input that cannot be sent to the worker.
    #[error("Invalid input: {message}")]
    InvalidInput {
        /// What is wrong.
        message: String,
    },
    /// The process-wide duplex route ceiling is reached; nothing was sent.
    #[error("DUPLEX_CHANNEL_ROUTE_BUSY")]
    RouteBusy,
    /// The worker's open reply was malformed or did not echo the route id (an error reply,
    /// a timeout or the worker's exit is returned as itself).
    #[error("DUPLEX_CHANNEL_OPEN_FAILED")]
    OpenFailed {
        /// Why (logged, not shown: the text is fixed).
        reason: String,
    },
    /// `close_input` on a worker that does not advertise `duplexChannelCloseInput`.
    #[error("Duplex channel half-close is not supported: the worker does not advertise \"duplexChannelCloseInput\".")]
    CloseInputUnsupported,
    /// The host ended the route (a bound was passed, a protocol error, the worker exited).
    #[error("Duplex route {route_id} was ended by the host: {reason}")]
    RouteEnded {
        /// The host route id.
        route_id: String,
        /// Why.
        reason: String,
    },
    /// The worker's close acknowledgement did not echo the ids; the worker was retired.
    #[error("Duplex close of {route_id} was not acknowledged with the route's ids; the worker was retired.")]
    CloseNotAcknowledged {
        /// The host route id.
        route_id: String,
    },
}

fn fmt_opt<T: std::fmt::Display>(value: &Option<T>) -> String {
    match value {
        Some(v) => v.to_string(),
        None => "null".to_owned(),
    }
}

fn fmt_stderr(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        format!("\n\nWorker stderr:\n{}", stderr.trim_end())
    }
}

impl SandboxError {
    /// The plugin protocol code of this error, where it has one.
    pub fn code(&self) -> Option<i64> {
        match self {
            SandboxError::WorkerExited { .. }
            | SandboxError::WorkerUnavailable { .. }
            | SandboxError::WorkerRestarting { .. } => Some(codes::WORKER_UNAVAILABLE),
            SandboxError::Timeout { .. } => Some(codes::TIMEOUT),
            SandboxError::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// How long to wait before trying again, for an error that is worth retrying: the
    /// rest of a crashed worker's restart backoff.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            SandboxError::WorkerRestarting { retry_in_ms, .. } => Some(std::time::Duration::from_millis(*retry_in_ms)),
            _ => None,
        }
    }

    /// Whether the same call may succeed later unchanged: only a worker that is down and
    /// restarting ([`SandboxError::WorkerRestarting`], whose text names the wait) is; the
    /// driver returns it as the retryable [`DriverError::Unavailable`].
    pub fn retryable(&self) -> bool {
        self.retry_after().is_some()
    }

    /// The short reason a worker that ended with this error is down, for
    /// [`SandboxError::WorkerRestarting`]: the exit status without the stderr excerpt
    /// (that is logged), or the first line of any other error.
    pub(crate) fn down_reason(&self) -> String {
        match self {
            SandboxError::WorkerExited { code, signal, .. } => {
                format!("it exited: code={}, signal={}", fmt_opt(code), fmt_opt(signal))
            }
            other => format!(
                "its restart failed: {}",
                other.to_string().lines().next().unwrap_or_default()
            ),
        }
    }

    /// The typed error inside a [`DriverError`] returned by this crate, if any.
    pub fn of(error: &DriverError) -> Option<&SandboxError> {
        match error {
            DriverError::Other {
                source: Some(source), ..
            }
            | DriverError::Unavailable {
                source: Some(source), ..
            } => source.downcast_ref::<SandboxError>(),
            _ => None,
        }
    }
}

/// The runtime-core error a worker's refusal stands for: a worker answers bad input with
/// `-32602` (or `-32002`) and the exact contract text of the error. The reference worker
/// also sends the error's kind and fields in `data`, which map to the typed variant
/// directly; without a usable `data` (SDK workers following the contract) the text is
/// read back into the variant. Either way a refusal keeps its class (and the CLI its exit
/// code) through the worker. `None` for any other code or text.
pub(crate) fn typed_refusal(code: i64, message: &str, data: Option<&ErrorData>) -> Option<DriverError> {
    if code != codes::INVALID_PARAMS && code != codes::WORKER_ERROR {
        return None;
    }
    if let Some(typed) = data.cloned().and_then(ErrorData::into_driver_error) {
        return Some(typed);
    }
    text_refusal(message)
}

/// A refusal read back from its text alone (a worker that sends no `data`).
fn text_refusal(message: &str) -> Option<DriverError> {
    // `{prefix}"{value}"{suffix}` with the value free of the suffix's quote
    let quoted = |prefix: &str, suffix: &str| -> Option<String> {
        let value = message.strip_prefix(prefix)?.strip_suffix(suffix)?;
        Some(value.to_owned())
    };
    if let Some(path) = quoted("Path \"", "\" is outside the lease workspace.") {
        return Some(DriverError::PathOutsideWorkspace { path });
    }
    if let Some(pair) = quoted("Entry \"", "\".") {
        if let Some((entry, target)) = pair.split_once("\" would be written outside the target \"") {
            return Some(DriverError::EntryEscapesTarget {
                entry: entry.to_owned(),
                target: target.to_owned(),
            });
        }
    }
    if let Some(cwd) = quoted(
        "Post-upload command cwd \"",
        "\" must be an absolute path under one of the operation's targets.",
    ) {
        return Some(DriverError::PostUploadCwd { cwd });
    }
    if let Some(rest) = quoted("Post-upload command \"", ".") {
        if let Some((command, outcome)) = rest.rsplit_once("\" failed with ") {
            return Some(DriverError::PostUploadFailed {
                command: command.to_owned(),
                outcome: outcome.to_owned(),
            });
        }
    }
    if let Some(path) = quoted("Sync source \"", "\" does not exist.") {
        return Some(DriverError::SourceMissing { path });
    }
    for expected in ["file", "directory"] {
        if let Some(path) = quoted("Sync source \"", &format!("\" is not a {expected}.")) {
            return Some(DriverError::SourceKind { path, expected });
        }
    }
    if let Some(rest) = quoted("Sync source \"", " directory levels.")
        && let Some((path, limit)) = rest.rsplit_once("\" is nested deeper than ")
        && let Ok(limit) = limit.parse::<usize>()
    {
        return Some(DriverError::TreeTooDeep {
            path: path.to_owned(),
            limit,
        });
    }
    if let Some(rest) = quoted("Sync out of \"", " bytes.")
        && let Some((path, limit)) = rest.rsplit_once("\" exceeds the limit of ")
        && let Ok(limit) = limit.parse::<u64>()
    {
        return Some(DriverError::SyncTooLarge {
            path: path.to_owned(),
            limit,
        });
    }
    if let Some(pattern) = quoted("Exclude pattern \"", "\" is not a valid glob.") {
        return Some(DriverError::InvalidGlob { pattern });
    }
    if let Some(rest) = message.strip_prefix("Cannot run as user \"")
        && let Some((user, reason)) = rest.split_once("\": ")
    {
        return Some(DriverError::UserRefused {
            user: user.to_owned(),
            reason: reason.to_owned(),
        });
    }
    if let Some(id) = quoted("Lease resource \"", "\" does not exist.") {
        return Some(DriverError::ResourceGone { id });
    }
    if message == DriverError::ChannelClosed.to_string() {
        return Some(DriverError::ChannelClosed);
    }
    message
        .strip_prefix("Invalid input: ")
        .map(|m| DriverError::InvalidInput { message: m.to_owned() })
}

impl From<SandboxError> for DriverError {
    fn from(error: SandboxError) -> Self {
        match error {
            SandboxError::InvalidInput { message } => DriverError::InvalidInput { message },
            SandboxError::Rpc {
                code,
                message,
                method,
                data,
            } => match typed_refusal(code, &message, data.as_ref()) {
                Some(typed) => typed,
                None => {
                    let other = SandboxError::Rpc {
                        method,
                        code,
                        message,
                        data,
                    };
                    DriverError::Other {
                        message: other.to_string(),
                        source: Some(Box::new(other)),
                    }
                }
            },
            restarting @ SandboxError::WorkerRestarting { .. } => DriverError::Unavailable {
                message: restarting.to_string(),
                source: Some(Box::new(restarting)),
            },
            other => DriverError::Other {
                message: other.to_string(),
                source: Some(Box::new(other)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_texts() {
        let e = SandboxError::WorkerExited {
            code: None,
            signal: Some("SIGKILL".into()),
            stderr: "boom\n".into(),
        };
        assert_eq!(
            e.to_string(),
            "Worker process exited (code=null, signal=SIGKILL)\n\nWorker stderr:\nboom"
        );
        let e = SandboxError::WorkerExited {
            code: Some(1),
            signal: None,
            stderr: String::new(),
        };
        assert_eq!(e.to_string(), "Worker process exited (code=1, signal=null)");
        assert_eq!(e.code(), Some(-32000));
        let e = SandboxError::Timeout {
            method: "health".into(),
            ms: 250,
        };
        assert_eq!(e.to_string(), "RPC call \"health\" timed out after 250ms");
        let e = SandboxError::WorkerRestarting {
            plugin_id: "p".into(),
            reason: "it exited: code=1, signal=null".into(),
            retry_in_ms: 750,
        };
        assert_eq!(
            e.to_string(),
            "Worker for plugin \"p\" is unavailable (it exited: code=1, signal=null); the host tries it again in 750 ms."
        );
        assert_eq!(e.code(), Some(-32000));
        assert_eq!(e.retry_after(), Some(std::time::Duration::from_millis(750)));
        assert!(e.retryable());
        let d: DriverError = e.clone().into();
        assert_eq!(d.kind(), "unavailable");
        assert!(d.retryable());
        let exited = SandboxError::WorkerExited {
            code: Some(1),
            signal: None,
            stderr: String::new(),
        };
        assert!(!exited.retryable());
        assert!(!DriverError::from(exited).retryable());
        assert_eq!(SandboxError::of(&d), Some(&e));
        let d: DriverError = SandboxError::RouteBusy.into();
        assert_eq!(d.to_string(), "DUPLEX_CHANNEL_ROUTE_BUSY");
        assert_eq!(SandboxError::of(&d), Some(&SandboxError::RouteBusy));
    }

    #[test]
    fn worker_refusals_come_back_typed() {
        let typed = |code: i64, e: DriverError| {
            let text = e.to_string();
            let back: DriverError = SandboxError::Rpc {
                method: "m".into(),
                code,
                message: text.clone(),
                data: None,
            }
            .into();
            assert_eq!(back.to_string(), text);
            back
        };
        let cases = [
            DriverError::PathOutsideWorkspace { path: "/etc/x".into() },
            DriverError::EntryEscapesTarget {
                entry: "a/l".into(),
                target: "/workspace/t".into(),
            },
            DriverError::PostUploadCwd { cwd: "/tmp".into() },
            DriverError::PostUploadFailed {
                command: "make \"x\"".into(),
                outcome: "exit code 2".into(),
            },
            DriverError::SourceMissing { path: "/nope".into() },
            DriverError::SourceKind {
                path: "/f".into(),
                expected: "directory",
            },
            DriverError::InvalidGlob { pattern: "[".into() },
            DriverError::invalid("command must not be empty"),
            DriverError::ResourceGone { id: "sbx-1".into() },
            DriverError::ChannelClosed,
            envrt_driver_files::tree::too_deep("/deep \"tree\""),
        ];
        for case in cases {
            let want = format!("{case:?}");
            assert_eq!(format!("{:?}", typed(-32602, case)), want);
        }
        // other codes and texts stay the worker's own error
        let back: DriverError = SandboxError::Rpc {
            method: "m".into(),
            code: -32601,
            message: "Path \"/x\" is outside the lease workspace.".into(),
            data: None,
        }
        .into();
        assert!(matches!(
            SandboxError::of(&back),
            Some(SandboxError::Rpc { code: -32601, .. })
        ));
        let back: DriverError = SandboxError::Rpc {
            method: "m".into(),
            code: -32002,
            message: "disk on fire".into(),
            data: None,
        }
        .into();
        assert_eq!(back.to_string(), "disk on fire");
        assert!(SandboxError::of(&back).is_some());
    }
}
