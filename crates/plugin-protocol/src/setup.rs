//! Interactive setup and templates: `environmentStartInteractiveSetup`,
//! `environmentGetInteractiveSetup`, `environmentCancelInteractiveSetup`,
//! `environmentCaptureTemplate`, `environmentDeleteTemplate`.

use serde::{Deserialize, Serialize};

use crate::environment::{DriverBase, JsonMap};

/// `environmentStartInteractiveSetup` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartInteractiveSetupParams {
    /// The common fields.
    #[serde(flatten)]
    pub base: DriverBase,
    /// The host's session id.
    pub session_id: String,
    /// A template to start from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_template_ref: Option<String>,
    /// Its kind (`snapshot`, `image`, `provider_template`, `unknown`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_template_kind: Option<String>,
    /// How long the connection stays valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_expires_in_minutes: Option<u64>,
    /// When the session ends (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// `environmentGetInteractiveSetup` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetInteractiveSetupParams {
    /// The common fields.
    #[serde(flatten)]
    pub base: DriverBase,
    /// The session's lease.
    #[serde(default)]
    pub provider_lease_id: Option<String>,
    /// The session's metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_metadata: Option<JsonMap>,
    /// Include the (secret) connection payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_connection_payload: Option<bool>,
    /// How long the connection stays valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_expires_in_minutes: Option<u64>,
}

/// What the user connects with, without secrets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionSummary {
    /// `ssh` or a provider's own type.
    #[serde(rename = "type")]
    pub kind: String,
    /// The user name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Whether the host is redacted.
    pub host_redacted: bool,
    /// Whether the port is redacted.
    pub port_redacted: bool,
    /// Whether the command is redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_redacted: Option<bool>,
    /// When the connection expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonMap>,
}

/// What the user connects with, secrets included.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionPayload {
    /// `ssh` or a provider's own type.
    #[serde(rename = "type")]
    pub kind: String,
    /// The command to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// A token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// When it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonMap>,
}

/// Result of start and get: the setup session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InteractiveSetupSession {
    /// The session's lease.
    pub provider_lease_id: Option<String>,
    /// `starting`, `waiting_for_user`, `capturing`, `promoted`, `cancelled`, `timed_out`,
    /// `failed` or `missing`.
    pub status: String,
    /// The connection, without secrets.
    pub connection_summary: Option<ConnectionSummary>,
    /// The connection, with secrets (when asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_payload: Option<ConnectionPayload>,
    /// When the session ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonMap>,
}

/// `environmentCaptureTemplate` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CaptureTemplateParams {
    /// The common fields.
    #[serde(flatten)]
    pub base: DriverBase,
    /// The lease to capture.
    #[serde(default)]
    pub provider_lease_id: Option<String>,
    /// The setup session's metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_metadata: Option<JsonMap>,
    /// The template the lease started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_template_ref: Option<String>,
    /// The template this capture replaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_template_ref: Option<String>,
    /// A label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_label: Option<String>,
    /// How long the capture may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// `environmentCaptureTemplate` result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CaptureTemplateResult {
    /// The provider's reference to the template.
    pub template_ref: String,
    /// Its kind.
    pub template_kind: String,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonMap>,
}

/// `environmentCancelInteractiveSetup` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelInteractiveSetupParams {
    /// The common fields.
    #[serde(flatten)]
    pub base: DriverBase,
    /// The session's lease.
    #[serde(default)]
    pub provider_lease_id: Option<String>,
    /// The session's metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_metadata: Option<JsonMap>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `environmentCancelInteractiveSetup` result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CancelInteractiveSetupResult {
    /// `cancelled`, `timed_out`, `failed` or `missing`.
    pub status: String,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonMap>,
}

/// `environmentDeleteTemplate` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteTemplateParams {
    /// The common fields.
    #[serde(flatten)]
    pub base: DriverBase,
    /// The template.
    pub template_ref: String,
    /// Its kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_kind: Option<String>,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonMap>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `environmentDeleteTemplate` result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeleteTemplateResult {
    /// Whether a template was deleted.
    pub deleted: bool,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonMap>,
}
