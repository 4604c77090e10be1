//! The plugin worker wire protocol (`docs/plugin-protocol.md` in the repository): newline-delimited
//! JSON-RPC 2.0 envelopes, method and notification names, error codes, and the shapes of
//! the messages the host inspects. Host and worker both use these types.
//!
//! Envelopes are kept loose (`serde_json::Value` payloads) because a worker written in
//! another language may add fields; the typed structs below are what the host reads out of
//! them, each accepting unknown fields.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// JSON-RPC version string carried by every message.
pub const JSONRPC_VERSION: &str = "2.0";

/// Method names, host → worker.
pub mod methods {
    /// The handshake.
    pub const INITIALIZE: &str = "initialize";
    /// Liveness.
    pub const HEALTH: &str = "health";
    /// Graceful stop.
    pub const SHUTDOWN: &str = "shutdown";
    /// Config validation.
    pub const VALIDATE_CONFIG: &str = "environmentValidateConfig";
    /// Provider probe.
    pub const PROBE: &str = "environmentProbe";
    /// Acquire a lease.
    pub const ACQUIRE_LEASE: &str = "environmentAcquireLease";
    /// Resume a lease.
    pub const RESUME_LEASE: &str = "environmentResumeLease";
    /// Release a lease.
    pub const RELEASE_LEASE: &str = "environmentReleaseLease";
    /// Destroy a lease.
    pub const DESTROY_LEASE: &str = "environmentDestroyLease";
    /// Realize a workspace.
    pub const REALIZE_WORKSPACE: &str = "environmentRealizeWorkspace";
    /// Run a command (text stdin/stdout/stderr).
    pub const EXECUTE: &str = "environmentExecute";
    /// Extension: run a command with base64 stdin/stdout/stderr.
    pub const EXECUTE_BINARY: &str = "environmentExecuteBinary";
    /// Host → environment file transfer.
    pub const SYNC_IN: &str = "environmentSyncIn";
    /// Environment → host file transfer.
    pub const SYNC_OUT: &str = "environmentSyncOut";
    /// Open a duplex channel.
    pub const DUPLEX_OPEN: &str = "duplexChannelOpen";
    /// Write to a duplex channel.
    pub const DUPLEX_WRITE: &str = "duplexChannelWrite";
    /// Stop a duplex channel's command.
    pub const DUPLEX_STOP: &str = "duplexChannelStop";
    /// Close a duplex channel.
    pub const DUPLEX_CLOSE: &str = "duplexChannelClose";
    /// Extension: close a duplex channel's input (half-close).
    pub const DUPLEX_CLOSE_INPUT: &str = "duplexChannelCloseInput";
}

/// Notification names, worker → host.
pub mod notifications {
    /// Output of a running `environmentExecute`.
    pub const EXECUTE_LOG: &str = "execute.log";
    /// Output bytes of a duplex channel.
    pub const DUPLEX_DATA: &str = "duplexChannel.data";
    /// A duplex channel's command ended.
    pub const DUPLEX_EXIT: &str = "duplexChannel.exit";
    /// A worker log line.
    pub const LOG: &str = "log";
}

/// JSON-RPC and plugin error codes.
pub mod codes {
    /// Parse error.
    pub const PARSE_ERROR: i64 = -32700;
    /// Invalid request.
    pub const INVALID_REQUEST: i64 = -32600;
    /// Method not found.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid params.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal error.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The worker is unavailable (exited, not started).
    pub const WORKER_UNAVAILABLE: i64 = -32000;
    /// Capability denied.
    pub const CAPABILITY_DENIED: i64 = -32001;
    /// The worker's handler failed.
    pub const WORKER_ERROR: i64 = -32002;
    /// Timeout.
    pub const TIMEOUT: i64 = -32003;
    /// Known optional method the plugin does not implement.
    pub const METHOD_NOT_IMPLEMENTED: i64 = -32004;
    /// Invocation scope denied.
    pub const INVOCATION_SCOPE_DENIED: i64 = -32005;
    /// Cross-tenant config.
    pub const CROSS_TENANT_CONFIG: i64 = -32006;
    /// Unknown.
    pub const UNKNOWN: i64 = -32099;
}

/// A request id: the host sends integers; a worker may use strings for its own requests.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// A numeric id.
    Number(i64),
    /// A string id.
    String(String),
}

/// The invocation the host attaches to each request (top level, beside `params`). SDK
/// workers echo its `id` as `paperclipInvocationId` on every notification sent while the
/// request runs, which ties `execute.log` chunks to their call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invocation {
    /// Opaque id, unique per request.
    pub id: String,
    /// Tenant scope.
    pub scope: InvocationScope,
}

/// The tenant scope of an [`Invocation`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvocationScope {
    /// The company the request acts for, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub company_id: Option<String>,
}

/// A request (host → worker or worker → host).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// Always `"2.0"`.
    pub jsonrpc: String,
    /// The id echoed by the response.
    pub id: RequestId,
    /// The method.
    pub method: String,
    /// Parameters (an object).
    #[serde(default)]
    pub params: Value,
    /// The invocation (host → worker only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paperclip_invocation: Option<Invocation>,
}

/// A JSON-RPC error object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The code (see [`codes`]).
    pub code: i64,
    /// The message.
    pub message: String,
    /// Extra data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// One incoming line, classified as the SDK classifies it.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// A response to one of our requests (or `id: null` for an unattributable error).
    Response {
        /// The id; `None` for `id: null`.
        id: Option<RequestId>,
        /// Success or error.
        outcome: Result<Value, ErrorObject>,
    },
    /// A request from the peer.
    Request {
        /// Its id.
        id: RequestId,
        /// The method.
        method: String,
        /// The params.
        params: Value,
    },
    /// A notification from the peer.
    Notification {
        /// The method.
        method: String,
        /// The params.
        params: Value,
        /// The invocation id the worker stamped on it, if any.
        invocation_id: Option<String>,
    },
}

/// Why a line is not a protocol message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// Not JSON.
    #[error("invalid JSON: {0}")]
    Json(String),
    /// JSON, but not a JSON-RPC 2.0 message.
    #[error("not a JSON-RPC 2.0 message")]
    NotJsonRpc,
}

impl Incoming {
    /// Parses and classifies one line (without its `\n`).
    pub fn parse(line: &[u8]) -> Result<Incoming, LineError> {
        let value: Value = serde_json::from_slice(line).map_err(|e| LineError::Json(e.to_string()))?;
        let Value::Object(mut obj) = value else {
            return Err(LineError::NotJsonRpc);
        };
        if obj.get("jsonrpc").and_then(Value::as_str) != Some(JSONRPC_VERSION) {
            return Err(LineError::NotJsonRpc);
        }
        let id = match obj.remove("id") {
            None => None,
            Some(Value::Null) => Some(None),
            Some(v) => Some(Some(
                serde_json::from_value::<RequestId>(v).map_err(|_| LineError::NotJsonRpc)?,
            )),
        };
        let method = obj.get("method").and_then(Value::as_str).map(str::to_owned);
        if let Some(id) = id.clone()
            && (obj.contains_key("result") || obj.contains_key("error"))
        {
            let outcome = match obj.remove("error") {
                Some(err) => Err(serde_json::from_value::<ErrorObject>(err).map_err(|_| LineError::NotJsonRpc)?),
                None => Ok(obj.remove("result").unwrap_or(Value::Null)),
            };
            return Ok(Incoming::Response { id, outcome });
        }
        let params = obj.remove("params").unwrap_or(Value::Null);
        match (method, id) {
            (Some(method), Some(Some(id))) => Ok(Incoming::Request { id, method, params }),
            (Some(method), None) => Ok(Incoming::Notification {
                method,
                params,
                invocation_id: obj
                    .get("paperclipInvocationId")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            }),
            _ => Err(LineError::NotJsonRpc),
        }
    }
}

/// Serializes a request line (with its trailing `\n`).
pub fn request_line(id: i64, method: &str, params: Value, invocation: Option<Invocation>) -> Vec<u8> {
    let request = Request {
        jsonrpc: JSONRPC_VERSION.to_owned(),
        id: RequestId::Number(id),
        method: method.to_owned(),
        params,
        paperclip_invocation: invocation,
    };
    let mut line = serde_json::to_vec(&request).unwrap_or_default();
    line.push(b'\n');
    line
}

/// Serializes an error response line (with its trailing `\n`).
pub fn error_response_line(id: &RequestId, code: i64, message: &str) -> Vec<u8> {
    let mut line = serde_json::to_vec(&serde_json::json!({
        "jsonrpc": JSONRPC_VERSION,
        "id": id,
        "error": {"code": code, "message": message},
    }))
    .unwrap_or_default();
    line.push(b'\n');
    line
}

/// Serializes a success response line (with its trailing `\n`).
pub fn response_line(id: &RequestId, result: Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(&serde_json::json!({
        "jsonrpc": JSONRPC_VERSION,
        "id": id,
        "result": result,
    }))
    .unwrap_or_default();
    line.push(b'\n');
    line
}

/// Serializes a notification line (with its trailing `\n`), stamped with the invocation
/// id of the request it belongs to, if any.
pub fn notification_line(method: &str, params: Value, invocation_id: Option<&str>) -> Vec<u8> {
    let mut message = serde_json::json!({
        "jsonrpc": JSONRPC_VERSION,
        "method": method,
        "params": params,
    });
    if let Some(id) = invocation_id {
        message["paperclipInvocationId"] = Value::String(id.to_owned());
    }
    let mut line = serde_json::to_vec(&message).unwrap_or_default();
    line.push(b'\n');
    line
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

/// `duplexChannelOpen` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DuplexOpenResult {
    /// Must echo the host's route id.
    pub host_route_id: String,
    /// The worker's session id.
    pub worker_session_id: String,
}

/// `duplexChannel.data` params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DuplexDataParams {
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
pub struct DuplexExitParams {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_like_the_sdk() {
        let r = Incoming::parse(br#"{"jsonrpc":"2.0","id":3,"result":{"a":1}}"#).unwrap();
        assert_eq!(
            r,
            Incoming::Response {
                id: Some(RequestId::Number(3)),
                outcome: Ok(serde_json::json!({"a":1}))
            }
        );
        let r = Incoming::parse(br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#).unwrap();
        assert!(matches!(
            r,
            Incoming::Response {
                id: None,
                outcome: Err(ErrorObject { code: -32700, .. })
            }
        ));
        let r = Incoming::parse(
            br#"{"jsonrpc":"2.0","method":"execute.log","params":{"stream":"stdout","chunk":"a"},"paperclipInvocationId":"inv-7"}"#,
        )
        .unwrap();
        assert!(
            matches!(r, Incoming::Notification { ref invocation_id, .. } if invocation_id.as_deref() == Some("inv-7"))
        );
        let r = Incoming::parse(br#"{"jsonrpc":"2.0","id":"w1","method":"config.get","params":{}}"#).unwrap();
        assert!(matches!(
            r,
            Incoming::Request {
                id: RequestId::String(_),
                ..
            }
        ));
        assert_eq!(
            Incoming::parse(br#"{"jsonrpc":"1.0","id":1,"result":1}"#),
            Err(LineError::NotJsonRpc)
        );
        assert_eq!(
            Incoming::parse(br#"{"jsonrpc":"2.0","id":null,"method":"x"}"#),
            Err(LineError::NotJsonRpc)
        );
        assert!(matches!(Incoming::parse(b"not json"), Err(LineError::Json(_))));
    }

    #[test]
    fn worker_side_lines_round_trip_through_the_classifier() {
        let line = response_line(&RequestId::Number(4), serde_json::json!({"status": "ok"}));
        assert_eq!(
            Incoming::parse(line.strip_suffix(b"\n").unwrap()).unwrap(),
            Incoming::Response {
                id: Some(RequestId::Number(4)),
                outcome: Ok(serde_json::json!({"status": "ok"}))
            }
        );
        let line = error_response_line(&RequestId::Number(5), codes::WORKER_ERROR, "boom");
        assert!(matches!(
            Incoming::parse(line.strip_suffix(b"\n").unwrap()).unwrap(),
            Incoming::Response { outcome: Err(ErrorObject { code: -32002, ref message, .. }), .. } if message == "boom"
        ));
        let line = notification_line(
            notifications::EXECUTE_LOG,
            serde_json::json!({"stream": "stdout", "chunk": "a"}),
            Some("inv-1"),
        );
        assert_eq!(
            Incoming::parse(line.strip_suffix(b"\n").unwrap()).unwrap(),
            Incoming::Notification {
                method: "execute.log".into(),
                params: serde_json::json!({"stream": "stdout", "chunk": "a"}),
                invocation_id: Some("inv-1".into())
            }
        );
    }

    #[test]
    fn base64_is_strict() {
        assert_eq!(decode_strict_base64("aGVsbG8A/wo=").unwrap(), b"hello\0\xff\n");
        for bad in ["", "aGk", "aGk=\n", " aGk=", "aGl=", "a*k=", "===="] {
            assert_eq!(decode_strict_base64(bad), None, "{bad:?}");
        }
        assert_eq!(encode_base64(b"hi"), "aGk=");
    }

    #[test]
    fn request_lines_carry_the_invocation() {
        let line = request_line(
            7,
            "health",
            serde_json::json!({}),
            Some(Invocation {
                id: "inv-1".into(),
                scope: InvocationScope {
                    company_id: Some("co".into()),
                },
            }),
        );
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"health\",\"params\":{},\"paperclipInvocation\":{\"id\":\"inv-1\",\"scope\":{\"companyId\":\"co\"}}}\n"
        );
    }
}
