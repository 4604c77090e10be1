//! JSON-RPC 2.0 framing for the worker side: bounded line reading, message classification
//! with the SDK's exact parse-error texts, the single stdout writer, and error codes.

use envrt_runtime_core::DriverError;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// JSON-RPC / plugin error codes used by the worker.
pub(crate) mod code {
    pub(crate) const PARSE_ERROR: i64 = -32700;
    pub(crate) const INVALID_REQUEST: i64 = -32600;
    pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
    pub(crate) const INVALID_PARAMS: i64 = -32602;
    pub(crate) const WORKER_ERROR: i64 = -32002;
    pub(crate) const METHOD_NOT_IMPLEMENTED: i64 = -32004;
}

/// An error answered to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: String,
}

impl RpcError {
    pub(crate) fn invalid_params(message: impl Into<String>) -> Self {
        RpcError {
            code: code::INVALID_PARAMS,
            message: message.into(),
        }
    }

    pub(crate) fn worker(message: impl Into<String>) -> Self {
        RpcError {
            code: code::WORKER_ERROR,
            message: message.into(),
        }
    }
}

impl From<DriverError> for RpcError {
    /// Bad input (paths, globs, cwds, escapes) is `-32602`; everything else `-32002`. The
    /// message is the runtime-core `Display` text, so the host can show it unchanged.
    fn from(error: DriverError) -> Self {
        let code = match &error {
            DriverError::PathOutsideWorkspace { .. }
            | DriverError::EntryEscapesTarget { .. }
            | DriverError::PostUploadCwd { .. }
            | DriverError::InvalidGlob { .. }
            | DriverError::TreeTooDeep { .. }
            | DriverError::InvalidInput { .. } => code::INVALID_PARAMS,
            _ => code::WORKER_ERROR,
        };
        RpcError {
            code,
            message: error.to_string(),
        }
    }
}

/// The cancel notification's method (an envrt extension).
pub(crate) const CANCEL: &str = "envrt.cancel";

/// What one input line is.
#[derive(Debug, PartialEq)]
pub(crate) enum Incoming {
    /// A request to answer.
    Request {
        id: Value,
        method: String,
        params: Value,
        invocation: Option<String>,
    },
    /// A notification, a response, or a request with a null id: nothing to do.
    Ignored,
    /// The envrt extension notification `envrt.cancel {id}`: the host gave up on the
    /// request with this id.
    Cancel(Value),
    /// A line that cannot be a JSON-RPC 2.0 message: answered with an `id: null` error.
    Invalid(RpcError),
}

/// Classifies one line exactly as the SDK's worker host does.
pub(crate) fn classify(line: &str) -> Incoming {
    let trimmed = line.trim();
    let value: Value = match serde_json::from_str(trimmed) {
        Ok(v) => v,
        Err(_) => {
            let head: String = trimmed.chars().take(200).collect();
            return Incoming::Invalid(RpcError {
                code: code::PARSE_ERROR,
                message: format!("Parse error: Invalid JSON: {head}"),
            });
        }
    };
    let Value::Object(mut map) = value else {
        return Incoming::Invalid(RpcError {
            code: code::PARSE_ERROR,
            message: "Parse error: Invalid JSON-RPC message: expected an object".into(),
        });
    };
    match map.get("jsonrpc") {
        Some(Value::String(v)) if v == "2.0" => {}
        other => {
            let got = match other {
                None => "undefined".to_owned(),
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
            };
            return Incoming::Invalid(RpcError {
                code: code::PARSE_ERROR,
                message: format!("Parse error: Invalid or missing jsonrpc version (expected \"2.0\", got \"{got}\")"),
            });
        }
    }
    let method = match map.remove("method") {
        Some(Value::String(m)) => m,
        _ => return Incoming::Ignored,
    };
    let id = match map.remove("id") {
        None | Some(Value::Null) => {
            return match (method.as_str(), map.get("params").and_then(|p| p.get("id"))) {
                (CANCEL, Some(id)) if !id.is_null() => Incoming::Cancel(id.clone()),
                _ => Incoming::Ignored,
            };
        }
        Some(id) => id,
    };
    let invocation = map
        .get("paperclipInvocation")
        .and_then(|v| v.get("id"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let params = map.remove("params").unwrap_or(Value::Null);
    Incoming::Request {
        id,
        method,
        params,
        invocation,
    }
}

/// One line read from the input.
#[derive(Debug, PartialEq)]
pub(crate) enum Line {
    /// A complete line without its `\n`.
    Text(String),
    /// A line longer than the limit (dropped), or one that is not UTF-8: the error, and
    /// the request id when the line's head names it (see [`head_id`]).
    Rejected(String, Option<Value>),
    /// End of input.
    Eof,
}

/// How much of a dropped line is kept to find its id.
const HEAD_BYTES: usize = 256;

/// The id of a dropped request, when its line starts the way the envrt host writes
/// requests (`{"jsonrpc":"2.0","id":<number or string>,`): the error is then answered
/// to that request, so the host's call fails at once instead of waiting. Any other
/// shape gives `None` (answered with `id: null`, as the SDK does).
pub(crate) fn head_id(head: &[u8]) -> Option<Value> {
    let rest = head.strip_prefix(br#"{"jsonrpc":"2.0","id":"#)?;
    let end = rest.iter().position(|b| *b == b',')?;
    let id: Value = serde_json::from_slice(&rest[..end]).ok()?;
    (id.is_number() || id.is_string()).then_some(id)
}

/// Reads one line of at most `max` bytes; a longer line is consumed and dropped.
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R, max: usize) -> std::io::Result<Line> {
    let mut buf = Vec::new();
    let mut overflow = false;
    let mut head = Vec::new();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            if buf.is_empty() && !overflow {
                return Ok(Line::Eof);
            }
            break;
        }
        let (chunk, found) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if !overflow {
            if buf.len() + chunk.len() > max {
                overflow = true;
                buf.extend_from_slice(&chunk[..chunk.len().min(HEAD_BYTES)]);
                head = buf[..buf.len().min(HEAD_BYTES)].to_vec();
                buf = Vec::new();
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        let consumed = found.unwrap_or(available.len());
        reader.consume(consumed);
        if found.is_some() {
            break;
        }
    }
    if overflow {
        return Ok(Line::Rejected(
            format!("Invalid request: line longer than {max} bytes"),
            head_id(&head),
        ));
    }
    match String::from_utf8(buf) {
        Ok(text) => Ok(Line::Text(text)),
        Err(e) => {
            let id = head_id(&e.into_bytes());
            Ok(Line::Rejected(
                "Parse error: Invalid JSON: line is not UTF-8".into(),
                id,
            ))
        }
    }
}

/// The single writer of the worker's stdout; clones share one ordered queue.
#[derive(Clone, Debug)]
pub(crate) struct Outbound {
    tx: mpsc::Sender<String>,
}

impl Outbound {
    /// Starts the writer task; it ends when every sender is gone and the queue is flushed.
    pub(crate) fn start() -> (Outbound, tokio::task::JoinHandle<()>) {
        let (tx, mut rx) = mpsc::channel::<String>(256);
        let task = tokio::spawn(async move {
            let mut stdout = tokio::io::stdout();
            while let Some(mut line) = rx.recv().await {
                line.push('\n');
                if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                    // The host stopped reading: nothing more can be said.
                    break;
                }
            }
        });
        (Outbound { tx }, task)
    }

    async fn send(&self, value: Value) {
        // A closed queue means the worker is exiting; the message has nowhere to go.
        let _ = self.tx.send(value.to_string()).await;
    }

    /// Answers a request.
    pub(crate) async fn respond(&self, id: Value, outcome: Result<Value, RpcError>) {
        let message = match outcome {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.code, "message": e.message}}),
        };
        self.send(message).await;
    }

    /// Sends a notification, tagged with the invocation id it was sent under (as the SDK
    /// tags every message sent while a host request is being handled).
    pub(crate) async fn notify(&self, method: &str, params: Value, invocation: Option<&str>) {
        let mut message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        if let Some(id) = invocation {
            message["paperclipInvocationId"] = Value::String(id.to_owned());
        }
        self.send(message).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_matches_the_sdk() {
        assert_eq!(
            classify("this is not json"),
            Incoming::Invalid(RpcError {
                code: -32700,
                message: "Parse error: Invalid JSON: this is not json".into()
            })
        );
        assert_eq!(
            classify(r#"{"jsonrpc":"1.0","id":99,"method":"health","params":{}}"#),
            Incoming::Invalid(RpcError {
                code: -32700,
                message: "Parse error: Invalid or missing jsonrpc version (expected \"2.0\", got \"1.0\")".into()
            })
        );
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","id":null,"method":"health"}"#),
            Incoming::Ignored
        );
        assert_eq!(classify(r#"{"jsonrpc":"2.0","method":"onEvent"}"#), Incoming::Ignored);
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","method":"envrt.cancel","params":{"id":7}}"#),
            Incoming::Cancel(json!(7))
        );
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","method":"envrt.cancel","params":{}}"#),
            Incoming::Ignored
        );
        assert_eq!(classify(r#"{"jsonrpc":"2.0","id":3,"result":null}"#), Incoming::Ignored);
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","id":"a","method":"health","paperclipInvocation":{"id":"inv-1","scope":{}}}"#),
            Incoming::Request {
                id: json!("a"),
                method: "health".into(),
                params: Value::Null,
                invocation: Some("inv-1".into())
            }
        );
    }

    #[tokio::test]
    async fn a_dropped_request_keeps_its_id_when_the_head_names_it() {
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"x\",\"params\":\"{}\"}}\n",
            "y".repeat(500)
        );
        let mut reader = tokio::io::BufReader::with_capacity(16, line.as_bytes());
        assert_eq!(
            read_line(&mut reader, 100).await.unwrap(),
            Line::Rejected("Invalid request: line longer than 100 bytes".into(), Some(json!(42)))
        );
        assert_eq!(head_id(br#"{"jsonrpc":"2.0","id":"a-1","method""#), Some(json!("a-1")));
        assert_eq!(head_id(br#"{"id":7,"jsonrpc":"2.0""#), None);
        assert_eq!(head_id(br#"{"jsonrpc":"2.0","id":{"x":1},"#), None);
    }

    #[tokio::test]
    async fn long_lines_are_dropped_and_reading_goes_on() {
        let input = format!("{}\nshort\nlast", "x".repeat(100));
        let mut reader = tokio::io::BufReader::with_capacity(16, input.as_bytes());
        assert_eq!(
            read_line(&mut reader, 50).await.unwrap(),
            Line::Rejected("Invalid request: line longer than 50 bytes".into(), None)
        );
        assert_eq!(read_line(&mut reader, 50).await.unwrap(), Line::Text("short".into()));
        assert_eq!(read_line(&mut reader, 50).await.unwrap(), Line::Text("last".into()));
        assert_eq!(read_line(&mut reader, 50).await.unwrap(), Line::Eof);
    }
}
