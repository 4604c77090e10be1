//! JSON-RPC 2.0 envelopes and the line builders. Every message is one JSON object on one
//! `\n`-terminated line.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::JSONRPC_VERSION;

/// A request id. The host numbers its requests with integers; a worker may use strings
/// for its own. Any other JSON value a peer sends is kept as it came, so an answer echoes
/// it exactly (it is not a valid JSON-RPC id; the host never matches it to a call).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// A numeric id.
    Number(i64),
    /// A string id.
    String(String),
    /// Anything else, echoed as received.
    #[serde(with = "verbatim")]
    Other(String),
}

/// `Other` ids hold their JSON text, so the id stays `Eq + Hash`.
mod verbatim {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    pub(super) fn serialize<S: Serializer>(text: &str, serializer: S) -> Result<S::Ok, S::Error> {
        let value: Value = serde_json::from_str(text).map_err(serde::ser::Error::custom)?;
        value.serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
        let value = Value::deserialize(deserializer)?;
        if value.is_null() {
            return Err(serde::de::Error::custom("a request id is never null"));
        }
        Ok(value.to_string())
    }
}

impl RequestId {
    /// Whether the id is a JSON-RPC id (a number or a string).
    pub fn is_valid(&self) -> bool {
        !matches!(self, RequestId::Other(_))
    }
}

impl std::fmt::Display for RequestId {
    /// The id's JSON text (`7`, `"a"`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{}", Value::String(s.clone())),
            RequestId::Other(text) => f.write_str(text),
        }
    }
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
    /// A W3C `traceparent` the host minted for this request. SDK workers treat it as
    /// opaque: its presence turns their `ctx.tracer` spans on (sent as `span.record`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// A fresh W3C `traceparent` (version 00, sampled): random 128-bit trace id and 64-bit
/// span id, lower-case hex, neither all zeros.
pub fn mint_traceparent(random: [u8; 24]) -> String {
    let mut trace: [u8; 16] = random[..16].try_into().unwrap_or([1; 16]);
    let mut span: [u8; 8] = random[16..].try_into().unwrap_or([1; 8]);
    if trace.iter().all(|b| *b == 0) {
        trace[15] = 1;
    }
    if span.iter().all(|b| *b == 0) {
        span[7] = 1;
    }
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    format!("00-{}-{}-01", hex(&trace), hex(&span))
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
    /// The code (see [`codes`](crate::codes)).
    pub code: i64,
    /// The message.
    pub message: String,
    /// Extra data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error without data.
    pub fn new(code: i64, message: impl Into<String>) -> ErrorObject {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
        }
    }
}

#[derive(Serialize)]
struct Response<'a> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorObject>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Notification<'a> {
    jsonrpc: &'static str,
    method: &'a str,
    params: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    paperclip_invocation_id: Option<&'a str>,
}

fn line(message: &impl Serialize) -> Vec<u8> {
    // These shapes (strings, numbers, JSON values) always serialize.
    let mut line = serde_json::to_vec(message).unwrap_or_default();
    line.push(b'\n');
    line
}

/// Serializes a request line (with its trailing `\n`).
pub fn request_line(id: i64, method: &str, params: Value, invocation: Option<Invocation>) -> Vec<u8> {
    line(&Request {
        jsonrpc: JSONRPC_VERSION.to_owned(),
        id: RequestId::Number(id),
        method: method.to_owned(),
        params,
        paperclip_invocation: invocation,
    })
}

/// Serializes a success response line (with its trailing `\n`). `id: None` answers with
/// `id: null`.
pub fn response_line(id: &RequestId, result: Value) -> Vec<u8> {
    line(&Response {
        jsonrpc: JSONRPC_VERSION,
        id,
        result: Some(&result),
        error: None,
    })
}

/// Serializes an error response line (with its trailing `\n`); `id: None` is `id: null`
/// (an error that cannot be tied to a request).
pub fn error_response_line(id: Option<&RequestId>, error: &ErrorObject) -> Vec<u8> {
    #[derive(Serialize)]
    struct NullIdError<'a> {
        jsonrpc: &'static str,
        id: Option<&'a RequestId>,
        error: &'a ErrorObject,
    }
    line(&NullIdError {
        jsonrpc: JSONRPC_VERSION,
        id,
        error,
    })
}

/// Serializes a notification line (with its trailing `\n`), stamped with the invocation
/// id of the request it belongs to, if any.
pub fn notification_line(method: &str, params: &Value, invocation_id: Option<&str>) -> Vec<u8> {
    line(&Notification {
        jsonrpc: JSONRPC_VERSION,
        method,
        params,
        paperclip_invocation_id: invocation_id,
    })
}

/// Serializes typed params or a typed result as the JSON value a line carries.
pub fn to_value<T: Serialize>(value: &T) -> Value {
    // Every protocol type is a tree of strings, numbers, maps and lists.
    serde_json::to_value(value).unwrap_or(Value::Null)
}
