//! The one error body every refusal and failure answers with, `{"kind": ..., "message":
//! ...}`: the runtime's stable kind and exact contract text for a runtime error, the
//! service's own kinds for what happens before the runtime (authentication, authorisation,
//! limits, a malformed request).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use envrt::RuntimeError;
use serde::Serialize;

/// The exact message of every 401.
pub const UNAUTHENTICATED: &str = "A valid bearer token is required.";

/// The exact message that ends a process's output stream when the service stops.
pub const STOPPING: &str = "The service is stopping: read on from the next offsets once it is back.";

/// The error body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ErrorBody {
    /// The stable machine-readable class.
    pub kind: String,
    /// The exact human-readable text.
    pub message: String,
}

/// An error answered to a client: its status and body.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body.
    pub body: ErrorBody,
}

impl ApiError {
    /// An error of `status` with `kind` and `message`.
    pub fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                kind: kind.to_owned(),
                message: message.into(),
            },
        }
    }

    /// 401 `unauthenticated`: no token, or one that is malformed, unknown or revoked.
    pub fn unauthenticated() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthenticated", UNAUTHENTICATED)
    }

    /// 403 `forbidden`: the token does not allow the operation.
    pub fn forbidden(message: String) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 400 `invalid_request`: the request itself is malformed.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// 503 `service_stopping`: the service stopped while a process's output was being read
    /// (the last line of that stream).
    pub fn stopping() -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "service_stopping", STOPPING)
    }

    /// 500 `internal`: the service itself failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

/// The status a runtime error answers with, by its kind.
pub fn status_of(kind: &str) -> StatusCode {
    match kind {
        "lease_not_found" | "environment_not_found" | "template_not_found" | "process_not_found" => {
            StatusCode::NOT_FOUND
        }
        "invalid_input"
        | "path_outside_workspace"
        | "entry_escapes_target"
        | "invalid_glob"
        | "invalid_release_status"
        | "source_missing"
        | "source_kind"
        | "tree_too_deep"
        | "post_upload_cwd"
        | "user_refused"
        | "process_no_stream"
        | "process_offset_past_end"
        | "process_unknown_signal"
        | "process_spawn_refused" => StatusCode::BAD_REQUEST,
        "sync_too_large" => StatusCode::PAYLOAD_TOO_LARGE,
        "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
        "lease_not_active"
        | "lease_gone"
        | "lease_lost"
        | "lease_expired"
        | "lease_paused"
        | "lease_idle_ended"
        | "lease_not_ready"
        | "environment_not_active"
        | "duplex_not_granted"
        | "tenant_mismatch"
        | "provider_unsupported"
        | "resource_gone"
        | "driver_not_registered"
        | "process_exited"
        | "process_no_tty"
        | "process_stdin_not_piped"
        | "process_offset_dropped"
        | "process_idempotency_conflict"
        | "network_refused" => StatusCode::CONFLICT,
        kind if kind.ends_with("_unsupported") => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<RuntimeError> for ApiError {
    fn from(error: RuntimeError) -> Self {
        let kind = error.kind();
        ApiError::new(status_of(kind), kind, error.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_error_keeps_its_kind_and_exact_text() {
        let error = ApiError::from(RuntimeError::LeaseNotFound { id: "x".into() });
        assert_eq!(error.status, StatusCode::NOT_FOUND);
        assert_eq!(error.body.kind, "lease_not_found");
        assert_eq!(error.body.message, "Lease \"x\" was not found.");
        assert_eq!(status_of("duplex_unsupported"), StatusCode::CONFLICT);
        assert_eq!(status_of("store"), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(status_of("process_sessions_unsupported"), StatusCode::CONFLICT);
        assert_eq!(status_of("process_not_found"), StatusCode::NOT_FOUND);
        assert_eq!(status_of("process_offset_dropped"), StatusCode::CONFLICT);
        assert_eq!(status_of("process_offset_past_end"), StatusCode::BAD_REQUEST);
        assert_eq!(status_of("network_refused"), StatusCode::CONFLICT);
        assert_eq!(status_of("lease_paused"), StatusCode::CONFLICT);
        assert_eq!(status_of("lease_idle_ended"), StatusCode::CONFLICT);
        assert_eq!(status_of("lease_not_ready"), StatusCode::CONFLICT);
    }
}
