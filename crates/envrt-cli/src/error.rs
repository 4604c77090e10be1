//! The tool's errors and how they map to exit codes (2 refusal or usage, 1 failure).

use std::fmt;

use envrt::{DriverError, RuntimeError};

/// Everything that ends the tool early.
#[derive(Debug)]
pub(crate) enum CliError {
    /// The runtime refused or failed; printed as its exact `Display`.
    Runtime(RuntimeError),
    /// A bad argument or configuration.
    Usage(String),
    /// Any other failure.
    Failure(String),
    /// An error body of the service the tool acts through (`--server`): its HTTP status,
    /// kind and exact text.
    Service { status: u16, kind: String, message: String },
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Runtime(e) => write!(f, "{e}"),
            CliError::Usage(m) | CliError::Failure(m) => f.write_str(m),
            CliError::Service { message, .. } => f.write_str(message),
        }
    }
}

impl From<RuntimeError> for CliError {
    fn from(e: RuntimeError) -> Self {
        CliError::Runtime(e)
    }
}

impl From<envrt::StoreError> for CliError {
    fn from(e: envrt::StoreError) -> Self {
        CliError::Runtime(RuntimeError::Store(e))
    }
}

impl From<envrt::config::ConfigError> for CliError {
    fn from(e: envrt::config::ConfigError) -> Self {
        use envrt::config::ConfigError;
        match e {
            ConfigError::Invalid(m) => CliError::Usage(m),
            ConfigError::Failure(m) => CliError::Failure(m),
            ConfigError::Runtime(e) => CliError::Runtime(e),
            other => CliError::Failure(other.to_string()),
        }
    }
}

/// A bad duration argument is a usage error, in the tool's words.
impl From<envrt::config::DurationError> for CliError {
    fn from(e: envrt::config::DurationError) -> Self {
        CliError::Usage(format!("envrt: {e}"))
    }
}

impl CliError {
    /// A stable machine-readable class: `usage`, `failure`, or the runtime error's own
    /// [`kind`](RuntimeError::kind).
    pub(crate) fn kind(&self) -> &str {
        match self {
            CliError::Usage(_) => "usage",
            CliError::Failure(_) => "failure",
            CliError::Runtime(e) => e.kind(),
            CliError::Service { kind, .. } => kind,
        }
    }

    /// The error as the JSON document `--json` prints: `{"error": {kind, message, exitCode}}`.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {"kind": self.kind(), "message": self.to_string(), "exitCode": self.exit_code()}
        })
    }

    /// A line printed after the error's own text, when there is one: after an unknown
    /// driver key (the contract's exact text, kept as it is), the keys envrt knows.
    pub(crate) fn hint(&self) -> Option<String> {
        match self {
            CliError::Runtime(RuntimeError::DriverNotRegistered { .. }) => Some(format!(
                "envrt: known drivers: {} (a [[plugin]] in envrt.toml adds its own)",
                envrt::known_drivers().join(", ")
            )),
            _ => None,
        }
    }

    /// 2 for refusals and usage errors, 1 for failures.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Failure(_) => 1,
            CliError::Runtime(e) => runtime_exit_code(e),
            // A refusal of the service is the caller's to fix; anything else is a failure.
            CliError::Service { status, .. } => {
                if (400..500).contains(status) {
                    2
                } else {
                    1
                }
            }
        }
    }
}

/// Refusals (the contract's exact errors, unknown ids, input a driver will not accept)
/// are 2; a driver or store that failed is 1.
pub(crate) fn runtime_exit_code(error: &RuntimeError) -> u8 {
    match error {
        RuntimeError::Store(_) => 1,
        RuntimeError::Driver(d) => match d {
            DriverError::PathOutsideWorkspace { .. }
            | DriverError::EntryEscapesTarget { .. }
            | DriverError::PostUploadCwd { .. }
            | DriverError::SourceMissing { .. }
            | DriverError::SourceKind { .. }
            | DriverError::InvalidGlob { .. }
            | DriverError::TreeTooDeep { .. }
            | DriverError::SyncTooLarge { .. }
            | DriverError::InvalidInput { .. }
            | DriverError::ProviderUnsupported { .. }
            | DriverError::UserRefused { .. } => 2,
            _ => 1,
        },
        _ => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envrt::UnsupportedOperation;

    #[test]
    fn refusals_and_usage_are_2_failures_are_1() {
        let refusal = CliError::Runtime(RuntimeError::Unsupported {
            key: "local".into(),
            operation: UnsupportedOperation::Duplex,
        });
        assert_eq!(refusal.exit_code(), 2);
        assert_eq!(
            refusal.to_string(),
            "Environment driver \"local\" does not support duplex channels."
        );
        let bad_input = CliError::Runtime(RuntimeError::Driver(DriverError::invalid("x")));
        assert_eq!(bad_input.exit_code(), 2);
        let driver = CliError::Runtime(RuntimeError::Driver(DriverError::other("engine on fire")));
        assert_eq!(driver.exit_code(), 1);
        let store = CliError::Runtime(RuntimeError::Store(envrt::StoreError::new("disk full")));
        assert_eq!(store.exit_code(), 1);
        assert_eq!(store.to_string(), "Lease store error: disk full");
        assert_eq!(CliError::Usage("u".into()).exit_code(), 2);
        assert_eq!(CliError::Failure("f".into()).exit_code(), 1);
    }

    #[test]
    fn a_bad_duration_is_a_usage_error_in_the_tools_words() {
        let err = CliError::from(envrt::config::parse_duration("--timeout", "soon").unwrap_err());
        assert_eq!(
            err.to_string(),
            "envrt: --timeout expects a positive duration such as 90, 1.5, 500ms, 1s, 2m or 1h30m, got \"soon\""
        );
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn json_errors_carry_kind_message_and_exit_code() {
        let refusal = CliError::Runtime(RuntimeError::Unsupported {
            key: "local".into(),
            operation: UnsupportedOperation::Duplex,
        });
        assert_eq!(
            refusal.to_json(),
            serde_json::json!({"error": {
                "kind": "duplex_unsupported",
                "message": "Environment driver \"local\" does not support duplex channels.",
                "exitCode": 2
            }})
        );
        assert_eq!(CliError::Usage("u".into()).kind(), "usage");
        assert_eq!(CliError::Failure("f".into()).to_json()["error"]["exitCode"], 1);
    }
}
