//! The SDK's login pseudo-terminal verbs and notifications. envrt's host never sends
//! them and the reference worker answers them `-32004`; the shapes are here so the
//! vocabulary is complete.

use serde::{Deserialize, Serialize};

/// `loginPtyOpen` params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenParams {
    /// The host's route id.
    pub host_route_id: String,
    /// The driver key.
    pub driver_key: String,
    /// The company.
    pub company_id: String,
    /// The environment.
    pub environment_id: String,
    /// The lease the terminal runs in.
    pub provider_lease_id: String,
    /// Which login: `claude`, `codex` or `grok`.
    pub login_command_key: String,
    /// The home directory of the login session.
    pub session_home: String,
}

/// `loginPtyOpen` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenResult {
    /// The worker's session id.
    pub worker_session_id: String,
}

/// `loginPtyInput` params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputParams {
    /// The worker session id.
    pub worker_session_id: String,
    /// The input bytes.
    pub data: String,
}

/// `loginPtyStop` params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StopParams {
    /// The worker session id.
    pub worker_session_id: String,
}

/// `loginPtyClose` params: the route id is the key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloseParams {
    /// The host route id.
    pub host_route_id: String,
    /// The worker session id, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_session_id: Option<String>,
}

/// `loginPtyClose` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloseResult {
    /// The host route id, echoed.
    pub host_route_id: String,
}

/// `loginPty.output` params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputParams {
    /// The host route id.
    pub host_route_id: String,
    /// The worker session id.
    pub worker_session_id: String,
    /// The terminal output.
    pub chunk: String,
}

/// `loginPty.exit` params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitParams {
    /// The host route id.
    pub host_route_id: String,
    /// The worker session id.
    pub worker_session_id: String,
    /// The exit code; `null` when there is none.
    pub exit_code: Option<i32>,
}
