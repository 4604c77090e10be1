//! An execute's stdin over the `envrt.dataPlane` socket: when the live worker accepted the
//! data plane and the stdin is over [`STREAM_STDIN_OVER`], the request names a stdin route
//! (extension param `envrtStdinRoute`) instead of carrying the bytes as base64, and the
//! bytes follow as `data` frames under the worker's credit, then `eof`. So stdin is not
//! bounded by the request line limit (`SandboxOptions::max_request_bytes`), no base64 copy
//! of it is made, and the worker holds at most the window at a time. A worker without the
//! data plane (an SDK worker) gets stdin in the request as before, under that limit and its
//! exact refusal.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::host::error::SandboxError;
use crate::host::worker::connection::ExecSink;
use crate::host::worker::supervisor::Supervisor;

/// Stdin larger than this goes over the data plane when the worker has one (smaller stdin
/// rides in the request: one message, no frames).
pub const STREAM_STDIN_OVER: usize = 1024 * 1024;

/// The bytes of one `data` frame of stdin (the worker's credit may split it further).
const PIECE: usize = 256 * 1024;

/// What an execute carries besides its params.
pub(crate) struct ExecCall {
    pub(crate) method: &'static str,
    /// `None`: no deadline but the worker's life.
    pub(crate) timeout: Option<Duration>,
    pub(crate) company_id: Option<String>,
    pub(crate) sink: Option<ExecSink>,
}

impl Supervisor {
    /// Calls an execute verb; `stdin` (raw bytes) goes over the data plane when the live
    /// worker has one and it is large, else `encode` puts it into `params` (`"stdin"`).
    pub(crate) async fn call_execute(
        &self,
        call: ExecCall,
        mut params: Value,
        stdin: Option<Vec<u8>>,
        encode: impl FnOnce(Vec<u8>) -> Result<String, SandboxError>,
    ) -> Result<Value, SandboxError> {
        let wait = match call.timeout {
            Some(timeout) => timeout + self.options().execute_grace,
            None => self.options().rpc_timeout,
        };
        let connection = self.connection(call.method, wait, Instant::now() + wait).await?;
        let link = match &stdin {
            Some(bytes) if bytes.len() > STREAM_STDIN_OVER => connection.plane.stdin_link(),
            _ => None,
        };
        let mut feeding = None;
        match (stdin, link) {
            (Some(bytes), Some((route, link))) => {
                params[envrt_plugin_protocol::dataplane::STDIN_ROUTE_PARAM] = Value::from(route);
                feeding = Some(AbortOnDrop(tokio::spawn(async move {
                    // never notified: the task is aborted when the call ends
                    let ended = Notify::new();
                    let long = Duration::from_secs(365 * 24 * 3600);
                    for piece in bytes.chunks(PIECE) {
                        if link.send(piece, &ended, || Ok(()), long).await.is_err() {
                            // the command stopped reading: its result tells the rest
                            return;
                        }
                    }
                    link.eof();
                    // keep the route registered until the worker credited everything
                    std::future::pending::<()>().await;
                })));
            }
            (Some(bytes), None) => params["stdin"] = Value::from(encode(bytes)?),
            (None, _) => {}
        }
        let answer = match call.timeout {
            // the command's own timeout plus the grace
            Some(_) => {
                let deadline = Instant::now() + wait;
                connection
                    .call(
                        call.method,
                        params,
                        wait,
                        deadline,
                        call.company_id.as_deref(),
                        call.sink,
                    )
                    .await
            }
            // far enough never to fire (tokio's own "far future" is about 30 years)
            None => {
                let never = Instant::now() + Duration::from_secs(20 * 365 * 24 * 3600);
                connection
                    .call(call.method, params, wait, never, call.company_id.as_deref(), call.sink)
                    .await
            }
        };
        drop(feeding);
        answer
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
