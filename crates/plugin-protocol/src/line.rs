//! The one line parser, and the two classifications built on it: [`Incoming`] is what a
//! host reads from a worker, [`HostMessage`] what a worker reads from a host (with the
//! SDK worker's exact parse-error texts).

use serde_json::{Map, Value};

use crate::envelope::{ErrorObject, RequestId};
use crate::{JSONRPC_VERSION, codes, notifications};

/// Why a line is not a protocol message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// Not JSON; `head` is the line's first 200 characters.
    #[error("invalid JSON: {head}")]
    Json {
        /// The start of the line (trimmed).
        head: String,
    },
    /// JSON, but not an object.
    #[error("not a JSON-RPC 2.0 message: expected an object")]
    NotObject,
    /// An object without `"jsonrpc": "2.0"`; `got` is what it had (`undefined` when none).
    #[error("not a JSON-RPC 2.0 message: jsonrpc is {got:?}")]
    Version {
        /// The `jsonrpc` member as text.
        got: String,
    },
    /// A JSON-RPC 2.0 object that is neither a request, a response nor a notification.
    #[error("not a JSON-RPC 2.0 message")]
    NotJsonRpc,
}

impl LineError {
    /// The error an SDK worker answers (with `id: null`) for this line: code -32700 and
    /// the SDK's text.
    pub fn sdk_error(&self) -> ErrorObject {
        let message = match self {
            LineError::Json { head } => format!("Parse error: Invalid JSON: {head}"),
            LineError::NotObject => "Parse error: Invalid JSON-RPC message: expected an object".to_owned(),
            LineError::Version { got } => {
                format!("Parse error: Invalid or missing jsonrpc version (expected \"2.0\", got \"{got}\")")
            }
            LineError::NotJsonRpc => "Parse error: Invalid JSON-RPC message".to_owned(),
        };
        ErrorObject::new(codes::PARSE_ERROR, message)
    }
}

/// A parsed line: a JSON-RPC 2.0 object, its members taken apart.
#[derive(Debug)]
struct Envelope {
    /// `None`: no `id` member; `Some(None)`: `id: null`.
    id: Option<Option<RequestId>>,
    method: Option<String>,
    params: Value,
    result: Option<Value>,
    error: Option<Value>,
    rest: Map<String, Value>,
}

/// Parses one line (without its `\n`; surrounding whitespace is ignored).
fn parse(line: &[u8]) -> Result<Envelope, LineError> {
    let value: Value = serde_json::from_slice(line).map_err(|_| {
        let text = String::from_utf8_lossy(line);
        LineError::Json {
            head: text.trim().chars().take(200).collect(),
        }
    })?;
    let Value::Object(mut obj) = value else {
        return Err(LineError::NotObject);
    };
    match obj.get("jsonrpc") {
        Some(Value::String(v)) if v == JSONRPC_VERSION => {}
        other => {
            let got = match other {
                None => "undefined".to_owned(),
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
            };
            return Err(LineError::Version { got });
        }
    }
    let id = match obj.remove("id") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(v) => Some(Some(
            serde_json::from_value::<RequestId>(v).map_err(|_| LineError::NotJsonRpc)?,
        )),
    };
    let method = match obj.remove("method") {
        Some(Value::String(m)) => Some(m),
        _ => None,
    };
    Ok(Envelope {
        id,
        method,
        params: obj.remove("params").unwrap_or(Value::Null),
        result: obj.remove("result"),
        error: obj.remove("error"),
        rest: obj,
    })
}

/// One line a host reads from its worker.
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
        /// The invocation id the worker stamped on it (`paperclipInvocationId`: the host
        /// request it was made while answering), if any. The worker's word: a host looks
        /// it up in its own record of invocations, never trusts it further.
        invocation_id: Option<String>,
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

impl Incoming {
    /// Parses and classifies one line (without its `\n`) as the SDK's host does: a
    /// message with an id and a `result` or `error` is a response, one with a method and
    /// an id a request, one with a method and no id a notification; anything else
    /// ([`LineError`]) is not a message.
    pub fn parse(line: &[u8]) -> Result<Incoming, LineError> {
        let envelope = parse(line)?;
        if let Some(id) = envelope.id.clone()
            && (envelope.result.is_some() || envelope.error.is_some())
        {
            if id.as_ref().is_some_and(|id| !id.is_valid()) {
                return Err(LineError::NotJsonRpc);
            }
            let outcome = match envelope.error {
                Some(err) => Err(serde_json::from_value::<ErrorObject>(err).map_err(|_| LineError::NotJsonRpc)?),
                None => Ok(envelope.result.unwrap_or(Value::Null)),
            };
            return Ok(Incoming::Response { id, outcome });
        }
        match (envelope.method, envelope.id) {
            (Some(method), Some(Some(id))) if id.is_valid() => Ok(Incoming::Request {
                id,
                method,
                params: envelope.params,
                invocation_id: envelope
                    .rest
                    .get("paperclipInvocationId")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            }),
            (Some(method), None) => Ok(Incoming::Notification {
                method,
                params: envelope.params,
                invocation_id: envelope
                    .rest
                    .get("paperclipInvocationId")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            }),
            _ => Err(LineError::NotJsonRpc),
        }
    }
}

/// One line a worker reads from its host.
#[derive(Clone, Debug, PartialEq)]
pub enum HostMessage {
    /// A request to answer.
    Request {
        /// Its id, echoed by the answer.
        id: RequestId,
        /// The method.
        method: String,
        /// The params (`null` when absent).
        params: Value,
        /// `paperclipInvocation.id`, stamped on the notifications sent while it runs.
        invocation: Option<String>,
    },
    /// The extension notification `envrt.cancel {id}`: the host gave up on request `id`.
    Cancel(RequestId),
    /// A notification, a response, or a request with a null id: nothing to do.
    Ignored,
    /// Not a JSON-RPC 2.0 message: answered with this error and `id: null`.
    Invalid(ErrorObject),
}

impl HostMessage {
    /// Classifies one line exactly as the SDK's worker does.
    pub fn classify(line: &str) -> HostMessage {
        let envelope = match parse(line.trim().as_bytes()) {
            Ok(envelope) => envelope,
            Err(e) => return HostMessage::Invalid(e.sdk_error()),
        };
        let Some(method) = envelope.method else {
            return HostMessage::Ignored;
        };
        match envelope.id {
            None | Some(None) => match (method.as_str(), envelope.params.get("id")) {
                (notifications::CANCEL, Some(id)) if !id.is_null() => serde_json::from_value(id.clone())
                    .map(HostMessage::Cancel)
                    .unwrap_or(HostMessage::Ignored),
                _ => HostMessage::Ignored,
            },
            Some(Some(id)) => HostMessage::Request {
                id,
                method,
                params: envelope.params,
                invocation: envelope
                    .rest
                    .get("paperclipInvocation")
                    .and_then(|v| v.get("id"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            },
        }
    }
}

/// The id of a request whose line was dropped (too long, or not UTF-8), when its head
/// starts the way the envrt host writes requests (`{"jsonrpc":"2.0","id":<number or
/// string>,`): the error is then answered to that request, so the host's call fails at
/// once instead of waiting. Any other shape gives `None` (answered with `id: null`, as
/// the SDK does).
pub fn dropped_request_id(head: &[u8]) -> Option<RequestId> {
    let rest = head.strip_prefix(br#"{"jsonrpc":"2.0","id":"#)?;
    let end = rest.iter().position(|b| *b == b',')?;
    let id: Value = serde_json::from_slice(&rest[..end]).ok()?;
    if !(id.is_number() || id.is_string()) {
        return None;
    }
    serde_json::from_value(id).ok()
}
