//! Stable, machine-readable names for every error: what a program that talks to envrt
//! through JSON (the CLI's `--json`, the Python package) matches on instead of the text;
//! and which errors are worth retrying.

use super::{DriverError, RuntimeError};

impl RuntimeError {
    /// A stable `snake_case` name of the error's class, e.g. `duplex_unsupported` or, for a
    /// driver's error, the driver error's own kind (`path_outside_workspace`, ...).
    /// Names are never reused for another meaning.
    pub fn kind(&self) -> &'static str {
        match self {
            RuntimeError::DriverNotRegistered { .. } => "driver_not_registered",
            RuntimeError::EnvironmentNotActive { .. } => "environment_not_active",
            RuntimeError::Unsupported { operation, .. } => operation.kind(),
            RuntimeError::DuplexNotGranted { .. } => "duplex_not_granted",
            RuntimeError::LeaseNotFound { .. } => "lease_not_found",
            RuntimeError::EnvironmentNotFound { .. } => "environment_not_found",
            RuntimeError::TenantMismatch { .. } => "tenant_mismatch",
            RuntimeError::LeaseNotActive { .. } => "lease_not_active",
            RuntimeError::LeaseGone { .. } => "lease_gone",
            RuntimeError::LeaseLost { .. } => "lease_lost",
            RuntimeError::InvalidReleaseStatus { .. } => "invalid_release_status",
            RuntimeError::LeaseExpired { .. } => "lease_expired",
            RuntimeError::LeasePaused { .. } => "lease_paused",
            RuntimeError::NotReady { .. } => "lease_not_ready",
            RuntimeError::LeaseIdleEnded { .. } => "lease_idle_ended",
            RuntimeError::TemplateNotFound { .. } => "template_not_found",
            RuntimeError::Process(error) => error.kind(),
            RuntimeError::Network(_) => "network_refused",
            RuntimeError::Driver(error) => error.kind(),
            RuntimeError::Store(_) => "store",
        }
    }
}

impl DriverError {
    /// A stable `snake_case` name of the error's class.
    pub fn kind(&self) -> &'static str {
        match self {
            DriverError::PathOutsideWorkspace { .. } => "path_outside_workspace",
            DriverError::UserRefused { .. } => "user_refused",
            DriverError::EntryEscapesTarget { .. } => "entry_escapes_target",
            DriverError::PostUploadCwd { .. } => "post_upload_cwd",
            DriverError::PostUploadFailed { .. } => "post_upload_failed",
            DriverError::SourceMissing { .. } => "source_missing",
            DriverError::SourceKind { .. } => "source_kind",
            DriverError::TreeTooDeep { .. } => "tree_too_deep",
            DriverError::SyncTooLarge { .. } => "sync_too_large",
            DriverError::InvalidGlob { .. } => "invalid_glob",
            DriverError::InvalidInput { .. } => "invalid_input",
            DriverError::ResourceGone { .. } => "resource_gone",
            DriverError::HostFileSystem { .. } => "host_file_system",
            DriverError::LeaseFileSystem { .. } => "lease_file_system",
            DriverError::ProviderUnsupported { .. } => "provider_unsupported",
            DriverError::ChannelClosed => "channel_closed",
            DriverError::Process(error) => error.kind(),
            DriverError::Unavailable { .. } => "unavailable",
            DriverError::Io { .. } => "io",
            DriverError::Other { .. } => "other",
        }
    }
}

impl RuntimeError {
    /// Whether the same call may succeed later without any change to it: the backend
    /// could not be reached now. True only for a driver's [`DriverError::retryable`]
    /// error; every refusal, missing lease or store failure is not.
    pub fn retryable(&self) -> bool {
        match self {
            RuntimeError::Driver(error) => error.retryable(),
            _ => false,
        }
    }
}

impl DriverError {
    /// Whether the same call may succeed later without any change to it. True for
    /// [`DriverError::Unavailable`] only: the Docker engine is not reachable (connecting,
    /// or the connection broke), the SSH host cannot be connected to, the sandbox's
    /// worker is down and restarting (`...; the host tries it again in N ms.`), or the
    /// reference worker binary was not found. Bad input, a refused user, a gone
    /// resource, a closed channel, I/O and other failures are not retryable.
    pub fn retryable(&self) -> bool {
        matches!(self, DriverError::Unavailable { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_snake_case_and_follow_the_variant() {
        let cases: Vec<(RuntimeError, &str)> = vec![
            (RuntimeError::DuplexNotGranted { cause: None }, "duplex_not_granted"),
            (
                RuntimeError::Unsupported {
                    key: "local".into(),
                    operation: crate::UnsupportedOperation::Duplex,
                },
                "duplex_unsupported",
            ),
            (RuntimeError::LeaseNotFound { id: "x".into() }, "lease_not_found"),
            (
                RuntimeError::LeaseLost {
                    id: "x".into(),
                    resource: "r".into(),
                },
                "lease_lost",
            ),
            (DriverError::invalid("bad").into(), "invalid_input"),
            (
                DriverError::PathOutsideWorkspace { path: "../x".into() }.into(),
                "path_outside_workspace",
            ),
            (DriverError::other("boom").into(), "other"),
            (
                RuntimeError::TemplateNotFound {
                    id: "t".into(),
                    environment_id: "e".into(),
                },
                "template_not_found",
            ),
            (
                DriverError::ProviderUnsupported {
                    provider: "p".into(),
                    operation: "template capture",
                }
                .into(),
                "provider_unsupported",
            ),
            (RuntimeError::Store(crate::StoreError::new("disk")), "store"),
        ];
        for (error, kind) in cases {
            assert_eq!(error.kind(), kind, "{error}");
            assert!(kind.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
        }
    }

    #[test]
    fn only_an_unavailable_backend_is_retryable() {
        let unavailable = DriverError::Unavailable {
            message: "Docker engine at unix:///nope is not reachable (connecting).".into(),
            source: None,
        };
        assert!(unavailable.retryable());
        assert!(RuntimeError::from(unavailable).retryable());
        let not: Vec<RuntimeError> = vec![
            DriverError::other("boom").into(),
            DriverError::invalid("bad").into(),
            DriverError::ChannelClosed.into(),
            DriverError::ResourceGone { id: "x".into() }.into(),
            RuntimeError::LeaseNotFound { id: "x".into() },
            RuntimeError::DuplexNotGranted { cause: None },
            RuntimeError::Store(crate::StoreError::new("disk")),
        ];
        for error in not {
            assert!(!error.retryable(), "{error}");
        }
    }
}
