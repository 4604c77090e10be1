//! JSON-RPC 2.0 framing for the worker side: what the protocol's bounded line reader's
//! lines mean here, and the single stdout writer. Classification, the line reader, error
//! codes, structured refusals and line shapes come from `envrt-plugin-protocol`.

use envrt_driver_api::DriverError;
use envrt_plugin_protocol::codes as code;
use envrt_plugin_protocol::error_data;
use envrt_plugin_protocol::line::dropped_request_id;
use envrt_plugin_protocol::{
    ErrorObject, LineRead, LineReader, RequestId, error_response_line, notification_line, response_line,
};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::sync::mpsc;

/// An error answered to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: String,
    /// The structured refusal (`{kind, fields}`), for an error that has one.
    pub(crate) data: Option<Value>,
}

impl RpcError {
    /// An error with a code and a text and no structured part.
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub(crate) fn invalid_params(message: impl Into<String>) -> Self {
        RpcError::new(code::INVALID_PARAMS, message)
    }

    pub(crate) fn worker(message: impl Into<String>) -> Self {
        RpcError::new(code::WORKER_ERROR, message)
    }
}

impl From<DriverError> for RpcError {
    /// The protocol's answer to a driver error ([`error_data::refusal`]): its code, its
    /// runtime-core `Display` text (so the host can show it unchanged) and its structured
    /// kind and fields.
    fn from(error: DriverError) -> Self {
        let ErrorObject { code, message, data } = error_data::refusal(&error);
        RpcError { code, message, data }
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

/// Reads one line of at most `max` bytes (the reader's bound) with the protocol's
/// [`LineReader`]; a longer line is consumed and dropped, and a last line without `\n`
/// still counts.
pub(crate) async fn read_line<R: AsyncRead + Unpin>(reader: &mut LineReader<R>, max: usize) -> std::io::Result<Line> {
    match reader.next_line().await? {
        LineRead::Eof => Ok(Line::Eof),
        LineRead::Oversized(_) => Ok(Line::Rejected(
            format!("Invalid request: line longer than {max} bytes"),
            dropped_request_id(reader.head()),
        )),
        LineRead::Line => match std::str::from_utf8(reader.line()) {
            Ok(text) => Ok(Line::Text(text.to_owned())),
            Err(_) => Ok(Line::Rejected(
                "Parse error: Invalid JSON: line is not UTF-8".into(),
                dropped_request_id(reader.line()),
            )),
        },
    }
}

/// The worker's reader of `input`: lines of at most `max` bytes, the last one kept even
/// without its `\n`.
pub(crate) fn line_reader<R: AsyncRead + Unpin>(input: R, max: usize) -> LineReader<R> {
    LineReader::new(input, max).keep_unterminated()
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
            (Err(e), id) => error_response_line(
                id,
                &ErrorObject {
                    code: e.code,
                    message: e.message,
                    data: e.data,
                },
            ),
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
        let mut reader = LineReader::with_capacity(16, line.as_bytes(), 100).keep_unterminated();
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
        let mut reader = LineReader::with_capacity(16, input.as_bytes(), 50).keep_unterminated();
        assert_eq!(
            read_line(&mut reader, 50).await.unwrap(),
            Line::Rejected("Invalid request: line longer than 50 bytes".into(), None)
        );
        assert_eq!(read_line(&mut reader, 50).await.unwrap(), Line::Text("short".into()));
        assert_eq!(read_line(&mut reader, 50).await.unwrap(), Line::Text("last".into()));
        assert_eq!(read_line(&mut reader, 50).await.unwrap(), Line::Eof);
    }
}
