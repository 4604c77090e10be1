//! Typed errors of the sandbox host. Each `Display` is the project's exact text; the
//! driver hands them to callers inside [`DriverError::Other`] with the typed error as its
//! source, so callers match with [`SandboxError::of`].

use envrt_runtime_core::DriverError;

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
    /// The worker answered with a JSON-RPC error; the text is the worker's message.
    #[error("{message}")]
    Rpc {
        /// The method called.
        method: String,
        /// The error code.
        code: i64,
        /// The worker's message.
        message: String,
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
    /// The worker's open reply was an error, malformed, or did not echo the route id.
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
            SandboxError::WorkerExited { .. } | SandboxError::WorkerUnavailable { .. } => {
                Some(codes::WORKER_UNAVAILABLE)
            }
            SandboxError::Timeout { .. } => Some(codes::TIMEOUT),
            SandboxError::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The typed error inside a [`DriverError`] returned by this crate, if any.
    pub fn of(error: &DriverError) -> Option<&SandboxError> {
        match error {
            DriverError::Other {
                source: Some(source), ..
            } => source.downcast_ref::<SandboxError>(),
            _ => None,
        }
    }
}

impl From<SandboxError> for DriverError {
    fn from(error: SandboxError) -> Self {
        match error {
            SandboxError::InvalidInput { message } => DriverError::InvalidInput { message },
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
        let d: DriverError = SandboxError::RouteBusy.into();
        assert_eq!(d.to_string(), "DUPLEX_CHANNEL_ROUTE_BUSY");
        assert_eq!(SandboxError::of(&d), Some(&SandboxError::RouteBusy));
    }
}
