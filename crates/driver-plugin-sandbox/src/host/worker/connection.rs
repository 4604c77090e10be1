//! One live worker: the request/response table, the stdin writer, the stdout reader that
//! dispatches responses and notifications, and what happens when the process ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envrt_driver_api::OutputStream;
use envrt_driver_api::execute::signal_name;
use nix::sys::signal::Signal;
use serde_json::Value;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::{mpsc, oneshot};

use crate::host::duplex::dataplane::PlaneSlot;
use crate::host::error::SandboxError;
use crate::host::worker::process::{Spawned, StderrTail, WorkerExit, WorkerProcess};
use crate::host::worker_calls::WorkerCalls;
use crate::protocol::handshake::CancelParams;
use crate::protocol::{
    self, ErrorData, ErrorObject, Incoming, Invocation, InvocationScope, LineRead, LineReader, RequestId, codes,
    notifications, to_value,
};

/// Receives `execute.log` chunks of one call.
pub(crate) type ExecSink = Arc<dyn Fn(OutputStream, Vec<u8>) + Send + Sync>;

/// What the connection reports upward: duplex frames and the end of the worker.
pub(crate) trait ConnectionEvents: Send + Sync {
    /// A `duplexChannel.data` or `duplexChannel.exit` frame. Returns false when the frame
    /// names a pair the host never issued: the worker is then retired.
    fn on_duplex_frame(&self, generation: u64, method: &str, params: Value) -> bool;
    /// The worker ended; every pending call has been failed with `error`.
    fn on_exit(&self, generation: u64, error: SandboxError);
    /// Who answers the worker's own requests (`None`: every one is "method not found").
    fn worker_calls(&self) -> Option<Arc<WorkerCalls>> {
        None
    }
}

struct Pending {
    method: String,
    reply: oneshot::Sender<Result<Value, SandboxError>>,
}

#[derive(Default)]
struct State {
    pending: HashMap<i64, Pending>,
    sinks: HashMap<String, ExecSink>,
    /// The `traceparent` of each call in flight, by its invocation id: the host's own
    /// record, from which a worker's `span.record` gets its parent (never from the worker).
    traces: HashMap<String, String>,
    exited: Option<SandboxError>,
}

/// A live worker connection.
pub(crate) struct Connection {
    generation: u64,
    plugin_id: String,
    process: Arc<WorkerProcess>,
    writer: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>>,
    next_id: AtomicI64,
    state: Mutex<State>,
    exited: tokio::sync::watch::Sender<bool>,
    max_request_bytes: usize,
    /// The binary data plane (`envrt.dataPlane`), when offered.
    pub(crate) plane: PlaneSlot,
}

/// Removes a pending call (and its sink) when the call future ends or is dropped.
struct PendingGuard<'a> {
    connection: &'a Connection,
    id: i64,
    invocation: String,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        let unanswered = {
            let mut state = self.connection.lock();
            state.sinks.remove(&self.invocation);
            state.traces.remove(&self.invocation);
            state.pending.remove(&self.id).is_some() && state.exited.is_none()
        };
        if unanswered {
            // the host gave up: let the worker stop whatever the call started
            // (`envrt.cancel`: a worker that does not know it ignores it)
            let params = CancelParams {
                id: RequestId::Number(self.id),
            };
            self.connection.send_line(protocol::notification_line(
                notifications::CANCEL,
                &to_value(&params),
                None,
            ));
        }
    }
}

impl Connection {
    /// Wires up a spawned worker: starts the writer, reader and stderr tasks.
    pub(crate) fn start(
        spawned: Spawned,
        generation: u64,
        plugin_id: String,
        (max_line_bytes, max_request_bytes): (usize, usize),
        events: Arc<dyn ConnectionEvents>,
    ) -> Arc<Connection> {
        let Spawned {
            process,
            mut stdin,
            stdout,
            stderr,
            exit,
            plane,
        } = spawned;
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
            // dropping stdin closes it: the worker sees EOF
        });
        let tail = StderrTail::default();
        tail.collect(plugin_id.clone(), stderr);
        let connection = Arc::new(Connection {
            generation,
            plugin_id,
            process,
            writer: Mutex::new(Some(tx)),
            next_id: AtomicI64::new(1),
            state: Mutex::new(State::default()),
            exited: tokio::sync::watch::Sender::new(false),
            max_request_bytes,
            plane: PlaneSlot::new(plane),
        });
        let reader = LineReader::new(stdout, max_line_bytes);
        tokio::spawn(read_loop(connection.clone(), reader, exit, tail, events));
        connection
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This worker's generation (one per start).
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// The worker's pid.
    pub(crate) fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Whether the worker has ended.
    pub(crate) fn has_exited(&self) -> bool {
        self.lock().exited.is_some()
    }

    /// Waits up to `timeout` for the worker to end; true when it did.
    pub(crate) async fn wait_exit(&self, timeout: Duration) -> bool {
        let mut rx = self.exited.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|exited| *exited))
            .await
            .is_ok()
    }

    /// Kills the worker (SIGKILL). Its end is then reported like any exit.
    pub(crate) fn kill(&self) {
        self.process.signal(Signal::SIGKILL);
    }

    /// Sends a signal to the worker.
    pub(crate) fn signal(&self, signal: Signal) {
        self.process.signal(signal);
    }

    /// Closes the worker's stdin once queued lines are written.
    pub(crate) fn close_stdin(&self) {
        self.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Number of calls awaiting an answer.
    pub(crate) fn pending_calls(&self) -> usize {
        self.lock().pending.len()
    }

    /// Calls `method` and waits until `deadline` for the answer (`timeout` is the nominal
    /// timeout reported in the error). The request carries a fresh
    /// `paperclipInvocation`; `sink` receives the `execute.log` chunks tagged with it.
    pub(crate) async fn call(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        deadline: tokio::time::Instant,
        company_id: Option<&str>,
        sink: Option<ExecSink>,
    ) -> Result<Value, SandboxError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut random = [0u8; 24];
        random[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        random[16..].copy_from_slice(&uuid::Uuid::new_v4().as_bytes()[..8]);
        let invocation = Invocation {
            id: uuid::Uuid::new_v4().to_string(),
            scope: InvocationScope {
                company_id: company_id.map(str::to_owned),
            },
            traceparent: Some(protocol::mint_traceparent(random)),
        };
        tracing::debug!(
            target: "envrt::plugin",
            method,
            invocation = %invocation.id,
            traceparent = invocation.traceparent.as_deref().unwrap_or_default(),
            "plugin request"
        );
        let line = protocol::request_line(id, method, params, Some(invocation.clone()));
        let size = line.len().saturating_sub(1);
        if size > self.max_request_bytes {
            return Err(SandboxError::InvalidInput {
                message: format!(
                    "the \"{method}\" request is {size} bytes once encoded, over the limit of {} bytes per request (stdin, arguments and environment count towards it)",
                    self.max_request_bytes
                ),
            });
        }
        let (reply, answer) = oneshot::channel();
        {
            let mut state = self.lock();
            if let Some(error) = &state.exited {
                return Err(error.clone());
            }
            state.pending.insert(
                id,
                Pending {
                    method: method.to_owned(),
                    reply,
                },
            );
            if let Some(sink) = sink {
                state.sinks.insert(invocation.id.clone(), sink);
            }
            if let Some(traceparent) = &invocation.traceparent {
                state.traces.insert(invocation.id.clone(), traceparent.clone());
            }
        }
        let _guard = PendingGuard {
            connection: self,
            id,
            invocation: invocation.id.clone(),
        };
        let sent = self
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|w| w.send(line).is_ok());
        if !sent {
            tracing::debug!(plugin = %self.plugin_id, method, "worker stdin is closed; waiting for the exit");
        }
        match tokio::time::timeout_at(deadline, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self
                .lock()
                .exited
                .clone()
                .unwrap_or_else(|| SandboxError::WorkerUnavailable {
                    plugin_id: self.plugin_id.clone(),
                    reason: "the call was dropped".into(),
                })),
            Err(_) => Err(SandboxError::Timeout {
                method: method.to_owned(),
                ms: timeout.as_millis() as u64,
            }),
        }
    }

    fn send_line(&self, line: Vec<u8>) {
        if let Some(w) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            let _ = w.send(line);
        }
    }

    fn dispatch(&self, line: &[u8], events: &dyn ConnectionEvents) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let message = match Incoming::parse(line) {
            Ok(message) => message,
            Err(error) => {
                let head: String = String::from_utf8_lossy(line).chars().take(200).collect();
                tracing::warn!(plugin = %self.plugin_id, %error, "ignoring a worker stdout line that is not a protocol message: {head}");
                return;
            }
        };
        match message {
            Incoming::Response {
                id: Some(RequestId::Number(id)),
                outcome,
            } => {
                let pending = self.lock().pending.remove(&id);
                match pending {
                    Some(Pending { method, reply }) => {
                        let result = outcome.map_err(|e| SandboxError::Rpc {
                            method,
                            code: e.code,
                            data: ErrorData::from_object(&e),
                            message: e.message,
                        });
                        let _ = reply.send(result);
                    }
                    None => tracing::debug!(plugin = %self.plugin_id, id, "response for no pending call ignored"),
                }
            }
            Incoming::Response { id, outcome } => {
                tracing::warn!(plugin = %self.plugin_id, ?id, ?outcome, "ignoring an unattributable response");
            }
            Incoming::Request {
                id,
                method,
                params,
                invocation_id,
            } if let Some(calls) = events.worker_calls() => {
                let writer = self.writer.lock().unwrap_or_else(|e| e.into_inner()).clone();
                // Looked up now, while the line is read: the call it was made in is still
                // in flight (its answer comes after it on the same stdout).
                let parent = invocation_id.and_then(|id| self.lock().traces.get(&id).cloned());
                calls.spawn_answer(id, method, params, parent, writer);
            }
            Incoming::Request { id, method, .. } => {
                self.send_line(protocol::error_response_line(
                    Some(&id),
                    &ErrorObject::new(
                        codes::METHOD_NOT_FOUND,
                        format!("Host does not handle method \"{method}\""),
                    ),
                ));
            }
            Incoming::Notification {
                method,
                params,
                invocation_id,
            } => match method.as_str() {
                notifications::EXECUTE_LOG => self.execute_log(params, invocation_id),
                notifications::DUPLEX_DATA | notifications::DUPLEX_EXIT => {
                    if !events.on_duplex_frame(self.generation, &method, params) {
                        tracing::warn!(plugin = %self.plugin_id, pid = self.pid(), "worker sent a duplex frame for a pair the host never issued; retiring it");
                        self.kill();
                    }
                }
                notifications::LOG if let Some(calls) = events.worker_calls() => calls.log_notification(&params),
                notifications::LOG => {
                    let message = params.get("message").and_then(Value::as_str).unwrap_or_default();
                    tracing::info!(plugin = %self.plugin_id, "worker log: {message}");
                }
                other => tracing::debug!(plugin = %self.plugin_id, method = other, "notification ignored"),
            },
        }
    }

    fn execute_log(&self, params: Value, invocation_id: Option<String>) {
        let Some(invocation_id) = invocation_id else {
            tracing::debug!(plugin = %self.plugin_id, "execute.log without an invocation id dropped");
            return;
        };
        let Some(sink) = self.lock().sinks.get(&invocation_id).cloned() else {
            tracing::debug!(plugin = %self.plugin_id, "execute.log for no live execute dropped");
            return;
        };
        let Ok(log) = serde_json::from_value::<protocol::ExecuteLogParams>(params) else {
            return;
        };
        let stream = match log.stream.as_str() {
            "stdout" => OutputStream::Stdout,
            "stderr" => OutputStream::Stderr,
            _ => return,
        };
        let bytes = match log.encoding.as_deref() {
            None | Some("utf8") | Some("utf-8") => log.chunk.into_bytes(),
            Some("base64") => match protocol::decode_strict_base64(&log.chunk) {
                Some(bytes) => bytes,
                None => return,
            },
            Some(_) => return,
        };
        if !bytes.is_empty() {
            sink(stream, bytes);
        }
    }

    /// Ends the connection: records the exit error and fails every pending call with it.
    fn finish(&self, error: SandboxError) {
        let pending = {
            let mut state = self.lock();
            state.exited = Some(error.clone());
            state.sinks.clear();
            std::mem::take(&mut state.pending)
        };
        self.close_stdin();
        for (_, call) in pending {
            let _ = call.reply.send(Err(error.clone()));
        }
        self.exited.send_replace(true);
    }
}

/// How long to keep reading stdout after the process exited (a grandchild may hold it).
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);
/// How long a worker that closed stdout may take to exit before it is killed.
const EXIT_AFTER_EOF: Duration = Duration::from_secs(2);

async fn read_loop(
    connection: Arc<Connection>,
    mut reader: LineReader<tokio::process::ChildStdout>,
    mut exit: oneshot::Receiver<WorkerExit>,
    tail: StderrTail,
    events: Arc<dyn ConnectionEvents>,
) {
    let mut status: Option<WorkerExit> = None;
    let mut drain_deadline = None;
    loop {
        let next = match drain_deadline {
            None => tokio::select! {
                read = reader.next_line() => read,
                exited = &mut exit => {
                    status = Some(exited.unwrap_or(WorkerExit { code: None, signal: None }));
                    drain_deadline = Some(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
                    continue;
                }
            },
            Some(deadline) => match tokio::time::timeout_at(deadline, reader.next_line()).await {
                Ok(read) => read,
                Err(_) => break,
            },
        };
        match next {
            Ok(LineRead::Line) => connection.dispatch(reader.line(), events.as_ref()),
            Ok(LineRead::Oversized(len)) => {
                tracing::warn!(plugin = %connection.plugin_id, len, "dropped a worker stdout line over the size limit");
            }
            Ok(LineRead::Eof) | Err(_) => break,
        }
    }
    let status = match status {
        Some(status) => status,
        None => match tokio::time::timeout(EXIT_AFTER_EOF, &mut exit).await {
            Ok(status) => status.unwrap_or(WorkerExit {
                code: None,
                signal: None,
            }),
            Err(_) => {
                tracing::warn!(plugin = %connection.plugin_id, "worker closed stdout but kept running; killing it");
                connection.kill();
                exit.await.unwrap_or(WorkerExit {
                    code: None,
                    signal: None,
                })
            }
        },
    };
    // let the last stderr words arrive
    for _ in 0..20 {
        if tail.ended() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let error = SandboxError::WorkerExited {
        code: status.code,
        signal: status.signal.map(signal_name),
        stderr: tail.excerpt(),
    };
    tracing::warn!(plugin = %connection.plugin_id, pid = connection.pid(), "{error}");
    connection.finish(error.clone());
    events.on_exit(connection.generation, error);
}
