//! JSON-RPC 2.0 framing for the worker side: bounded line reading and the single stdout
//! writer. Classification, error codes and line shapes come from `envrt-plugin-protocol`.

use envrt_plugin_protocol::codes as code;
use envrt_plugin_protocol::line::dropped_request_id;
use envrt_plugin_protocol::{ErrorObject, RequestId, error_response_line, notification_line, response_line};
use envrt_runtime_core::DriverError;
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

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
            | DriverError::SyncTooLarge { .. }
            | DriverError::InvalidInput { .. }
            | DriverError::UserRefused { .. } => code::INVALID_PARAMS,
            _ => code::WORKER_ERROR,
        };
        RpcError {
            code,
            message: error.to_string(),
        }
    }
}

/// One line read from the input.
#[derive(Debug, PartialEq)]
pub(crate) enum Line {
    /// A complete line without its `\n`.
    Text(String),
    /// A line longer than the limit (dropped), or one that is not UTF-8: the error, and
    /// the request id when the line's head names it (see `dropped_request_id`).
    Rejected(String, Option<RequestId>),
    /// End of input.
    Eof,
}

/// How much of a dropped line is kept to find its id.
const HEAD_BYTES: usize = 256;

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
            dropped_request_id(&head),
        ));
    }
    match String::from_utf8(buf) {
        Ok(text) => Ok(Line::Text(text)),
        Err(e) => {
            let id = dropped_request_id(&e.into_bytes());
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
    tx: mpsc::Sender<Vec<u8>>,
}

impl Outbound {
    /// Starts the writer task; it ends when every sender is gone and the queue is flushed.
    pub(crate) fn start() -> (Outbound, tokio::task::JoinHandle<()>) {
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(256);
        let task = tokio::spawn(async move {
            let mut stdout = tokio::io::stdout();
            while let Some(line) = rx.recv().await {
                if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
                    // The host stopped reading: nothing more can be said.
                    break;
                }
            }
        });
        (Outbound { tx }, task)
    }

    async fn send(&self, line: Vec<u8>) {
        // A closed queue means the worker is exiting; the message has nowhere to go.
        let _ = self.tx.send(line).await;
    }

    /// Answers a request; `id: None` answers with `id: null` (a line that names no request).
    pub(crate) async fn respond(&self, id: Option<&RequestId>, outcome: Result<Value, RpcError>) {
        let line = match (outcome, id) {
            (Ok(result), Some(id)) => response_line(id, result),
            (Ok(_), None) => return,
            (Err(e), id) => error_response_line(id, &ErrorObject::new(e.code, e.message)),
        };
        self.send(line).await;
    }

    /// Sends a notification, tagged with the invocation id it was sent under (as the SDK
    /// tags every message sent while a host request is being handled).
    pub(crate) async fn notify(&self, method: &str, params: Value, invocation: Option<&str>) {
        self.send(notification_line(method, &params, invocation)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_dropped_request_keeps_its_id_when_the_head_names_it() {
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"x\",\"params\":\"{}\"}}\n",
            "y".repeat(500)
        );
        let mut reader = tokio::io::BufReader::with_capacity(16, line.as_bytes());
        assert_eq!(
            read_line(&mut reader, 100).await.unwrap(),
            Line::Rejected(
                "Invalid request: line longer than 100 bytes".into(),
                Some(RequestId::Number(42))
            )
        );
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
