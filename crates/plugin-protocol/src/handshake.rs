//! The life-cycle verbs (`initialize`, `health`, `shutdown`) and the notifications that
//! are not duplex frames.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use envrt_driver_api::JsonMap;

use crate::envelope::RequestId;

/// `initialize` params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// The plugin manifest, as the host read it.
    #[serde(default)]
    pub manifest: Value,
    /// Bootstrap configuration.
    #[serde(default)]
    pub config: JsonMap,
    /// The host instance.
    #[serde(default)]
    pub instance_info: InstanceInfo,
    /// Host API version (envrt sends 1).
    #[serde(default)]
    pub api_version: u32,
    /// The plugin database namespace; envrt has none and sends `null`.
    #[serde(default)]
    pub database_namespace: Option<String>,
    /// Extension: the host's offer of the binary duplex data plane
    /// ([`OFFER_PARAM`](crate::dataplane::OFFER_PARAM)); absent when it passed no socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envrt_data_plane: Option<crate::dataplane::Offer>,
}

/// The host instance named in [`InitializeParams`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceInfo {
    /// The host instance id.
    pub instance_id: String,
    /// The host version.
    pub host_version: String,
}

/// The `initialize` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// Must be true.
    pub ok: bool,
    /// The verbs this worker serves.
    #[serde(default)]
    pub supported_methods: Vec<String>,
}

/// The `health` result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HealthResult {
    /// `"ok"` when healthy.
    pub status: String,
    /// Anything the worker wants to report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// Params of the life-cycle verbs that take none (`health`, `shutdown`): `{}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoParams {}

/// `execute.log` params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecuteLogParams {
    /// `stdout` or `stderr`.
    pub stream: String,
    /// The text (or base64 when `encoding` is `"base64"`).
    pub chunk: String,
    /// Extension: `"base64"` when `chunk` is base64 (workers answering
    /// `environmentExecuteBinary` may use it); absent = text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
}

/// `log` params (the fields envrt reads).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogParams {
    /// The log line.
    #[serde(default)]
    pub message: String,
}

/// `envrt.cancel` params: the request the host gave up on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelParams {
    /// The request's id.
    pub id: RequestId,
}
