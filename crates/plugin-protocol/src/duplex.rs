//! Duplex channels: the SDK's `duplexChannel*` verbs and frames, envrt's half-close
//! extension, and the strict base64 the frames carry.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `duplexChannelOpen` params.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenParams {
    /// The host's route id; the worker registers the channel by it.
    pub host_route_id: String,
    /// The driver key.
    #[serde(default)]
    pub driver_key: String,
    /// The company.
    #[serde(default)]
    pub company_id: String,
    /// The environment.
    #[serde(default)]
    pub environment_id: String,
    /// The lease the command runs in.
    pub provider_lease_id: String,
    /// The argument vector; element 0 is the program.
    pub command: Vec<String>,
}

/// `duplexChannelOpen` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenResult {
    /// Must echo the host's route id.
    pub host_route_id: String,
    /// The worker's session id.
    pub worker_session_id: String,
}

/// The exact route pair: `duplexChannelStop` and the `duplexChannelCloseInput` extension.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PairParams {
    /// The host route id.
    pub host_route_id: String,
    /// The worker session id.
    pub worker_session_id: String,
}

/// `duplexChannelWrite` params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteParams {
    /// The host route id.
    pub host_route_id: String,
    /// The worker session id.
    pub worker_session_id: String,
    /// base64 bytes (kept as sent, so a worker can refuse a malformed value itself).
    pub data: Value,
}

/// `duplexChannelClose` params and result: the route id is the key, the session id is
/// present once the route is bound.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloseParams {
    /// The host route id.
    pub host_route_id: String,
    /// The worker session id, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_session_id: Option<String>,
}

/// The `duplexChannelClose` acknowledgement (same shape as its params).
pub type CloseResult = CloseParams;

/// `duplexChannel.data` params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataParams {
    /// The host route id.
    pub host_route_id: String,
    /// The worker session id.
    pub worker_session_id: String,
    /// base64 bytes.
    pub chunk: String,
}

/// `duplexChannel.exit` params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitParams {
    /// The host route id.
    pub host_route_id: String,
    /// The worker session id.
    pub worker_session_id: String,
    /// The command's exit code; `null` when it was killed.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The provider's transport closed without an exit (absent = false).
    #[serde(default)]
    pub transport_closed: bool,
}

/// Strict base64: the standard alphabet, canonical padding, no whitespace, not empty.
/// Returns `None` for anything else.
pub fn decode_strict_base64(text: &str) -> Option<Vec<u8>> {
    if text.is_empty() {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(text).ok()?;
    if bytes.is_empty() { None } else { Some(bytes) }
}

/// Canonical padded base64 of `bytes`.
pub fn encode_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
