//! Duplex channels: a command started in the lease's sandbox with piped stdin, and its
//! stdout and stderr on one pipe (in the order it wrote them, as a terminal shows them:
//! contract section 7). Its bytes go out as `duplexChannel.data` frames (base64), then one
//! `duplexChannel.exit` frame. Channels are keyed by the exact pair
//! (hostRouteId, workerSessionId); after a close nothing more is sent for the pair.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use envrt_driver_api::DriverError;
use envrt_plugin_protocol::notifications;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, mpsc, oneshot};

use super::dataplane::{Output, Plane};
use super::exec::decode_strict;
use super::init::Reported;
use super::rpc::{Outbound, RpcError};
use super::sandbox::{Sandbox, WORKSPACE};

/// Bytes read from the command's stdout per data frame at most.
const FRAME_BYTES: usize = 64 * 1024;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OpenParams {
    pub(crate) host_route_id: String,
    pub(crate) provider_lease_id: String,
    command: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PairParams {
    host_route_id: String,
    worker_session_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WriteParams {
    host_route_id: String,
    worker_session_id: String,
    data: Value,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CloseParams {
    host_route_id: String,
    worker_session_id: Option<String>,
}

enum Input {
    Data(Vec<u8>, oneshot::Sender<Result<(), RpcError>>),
    CloseInput(oneshot::Sender<Result<(), RpcError>>),
}

struct Channel {
    input: mpsc::UnboundedSender<Input>,
    kill: Arc<Notify>,
    closed: Arc<AtomicBool>,
}

type Pair = (String, String);

/// Every open channel of the worker.
#[derive(Default)]
pub(crate) struct Channels {
    open: Mutex<HashMap<Pair, Channel>>,
    /// The binary data plane, once `initialize` accepted it.
    pub(crate) plane: std::sync::OnceLock<Arc<Plane>>,
}

/// A queued write or half-close whose reply is pending.
pub(crate) type Pending = oneshot::Receiver<Result<(), RpcError>>;

fn no_pair(route: &str, session: &str) -> RpcError {
    RpcError::worker(format!("No live duplex channel for pair ({route}, {session})"))
}

impl Channels {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Pair, Channel>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many channels are open.
    pub(crate) fn count(&self) -> usize {
        self.lock().len()
    }

    /// Starts the command and its pumps; answers `{hostRouteId, workerSessionId}`.
    pub(crate) fn open(
        self: &Arc<Self>,
        sandbox: Arc<Sandbox>,
        lease_dir: PathBuf,
        params: OpenParams,
        out: Outbound,
        invocation: Option<String>,
    ) -> Result<Value, RpcError> {
        if params.host_route_id.is_empty() {
            return Err(RpcError::invalid_params("hostRouteId must be a non-empty string"));
        }
        if params.command.is_empty() || params.command[0].is_empty() {
            return Err(RpcError::invalid_params("command must be a non-empty argv list"));
        }
        super::exec::check_argv(&params.command, &[])?;
        let starting = |e| RpcError::from(DriverError::io("Starting bwrap", e));
        // One pipe for stdout and stderr: the command's fds 1 and 2 share it, so what it
        // writes to either comes out in the order it wrote it. The write ends live only in
        // the child once the spawn returns, so the end of output is seen.
        let (output_read, output_write) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| starting(std::io::Error::from(e)))?;
        let stderr_write = output_write.try_clone().map_err(starting)?;
        let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(output_read).map_err(starting)?;
        let (mut child, tracked) = sandbox
            .spawn(
                &lease_dir,
                WORKSPACE,
                &[],
                &params.command,
                [Stdio::piped(), Stdio::from(output_write), Stdio::from(stderr_write)],
            )
            .map_err(starting)?;
        let session = format!("dws-{}", uuid::Uuid::new_v4());
        let route = params.host_route_id.clone();
        let (input_tx, mut input_rx) = mpsc::unbounded_channel::<Input>();
        let kill = Arc::new(Notify::new());
        let closed = Arc::new(AtomicBool::new(false));
        let mut stdin = child.stdin.take();
        let stdout = Some(stdout);
        // Writer: applies writes and the half-close in arrival order.
        tokio::spawn(async move {
            while let Some(input) = input_rx.recv().await {
                match input {
                    Input::Data(bytes, reply) => {
                        let result = match stdin.as_mut() {
                            Some(pipe) => match pipe.write_all(&bytes).await {
                                Ok(()) => pipe.flush().await.map_err(|_| closed_error()),
                                Err(_) => Err(closed_error()),
                            },
                            None => Err(closed_error()),
                        };
                        let _ = reply.send(result);
                    }
                    Input::CloseInput(reply) => {
                        stdin = None;
                        let _ = reply.send(Ok(()));
                    }
                }
            }
        });
        // Reader and waiter: data frames, then exactly one exit frame.
        let frames = FrameSender {
            out,
            route: route.clone(),
            session: session.clone(),
            closed: closed.clone(),
            invocation,
            plane: self
                .plane
                .get()
                .and_then(|p| p.register(&route, &session, closed.clone())),
        };
        let kill_wait = kill.clone();
        tokio::spawn(async move {
            let reader = tokio::spawn({
                let frames = frames.clone();
                async move {
                    let Some(mut pipe) = stdout else { return };
                    if let Some(plane) = &frames.plane {
                        return plane.pump(pipe).await;
                    }
                    let mut buf = vec![0u8; FRAME_BYTES];
                    while let Ok(n) = pipe.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        frames.data(&buf[..n]).await;
                    }
                }
            });
            let (status, killed) = tokio::select! {
                status = child.wait() => (status.ok(), false),
                () = kill_wait.notified() => (sandbox.terminate(&mut child).await.0.ok(), true),
            };
            // Every data frame goes out before the exit frame (bounded: the namespace is gone;
            // on the data plane the reader also waits for credit, which a close ends).
            if frames.plane.is_some() {
                let _ = reader.await;
            } else {
                let _ = tokio::time::timeout(std::time::Duration::from_secs(2), reader).await;
            }
            let exit_code = match (killed || tracked.killed(), tracked.reported()) {
                (true, _) | (false, Some(Reported::Signaled(_))) => None,
                (false, Some(Reported::Exited(code))) => Some(code),
                (false, None) => status.and_then(|s| s.code()),
            };
            frames.exit(exit_code).await;
        });
        self.lock().insert(
            (route.clone(), session.clone()),
            Channel {
                input: input_tx,
                kill,
                closed,
            },
        );
        Ok(json!({"hostRouteId": route, "workerSessionId": session}))
    }

    fn with_pair<T>(&self, route: &str, session: &str, f: impl FnOnce(&Channel) -> T) -> Result<T, RpcError> {
        let open = self.lock();
        let channel = open
            .get(&(route.to_owned(), session.to_owned()))
            .ok_or_else(|| no_pair(route, session))?;
        Ok(f(channel))
    }

    /// Queues a write (strict base64) in order; the reply waits until it reached the pipe.
    pub(crate) fn write(&self, params: WriteParams) -> Result<Pending, RpcError> {
        let bytes = match &params.data {
            Value::String(s) if !s.is_empty() => decode_strict(s),
            _ => None,
        }
        .ok_or_else(|| RpcError::invalid_params("data must be a non-empty, well-formed base64 string"))?;
        let (tx, rx) = oneshot::channel();
        self.with_pair(&params.host_route_id, &params.worker_session_id, |c| {
            c.input.send(Input::Data(bytes, tx))
        })?
        .map_err(|_| closed_error())?;
        Ok(rx)
    }

    /// Queues a write of raw bytes (from the data plane) in order.
    pub(crate) fn write_bytes(&self, route: &str, session: &str, bytes: Vec<u8>) -> Result<Pending, RpcError> {
        let (tx, rx) = oneshot::channel();
        self.with_pair(route, session, |c| c.input.send(Input::Data(bytes, tx)))?
            .map_err(|_| closed_error())?;
        Ok(rx)
    }

    /// Queues the half-close of (`route`, `session`) after every earlier write.
    pub(crate) fn close_input_pair(&self, route: &str, session: &str) -> Result<Pending, RpcError> {
        let (tx, rx) = oneshot::channel();
        self.with_pair(route, session, |c| c.input.send(Input::CloseInput(tx)))?
            .map_err(|_| closed_error())?;
        Ok(rx)
    }

    /// Queues the half-close after every earlier write.
    pub(crate) fn close_input(&self, params: PairParams) -> Result<Pending, RpcError> {
        let (tx, rx) = oneshot::channel();
        self.with_pair(&params.host_route_id, &params.worker_session_id, |c| {
            c.input.send(Input::CloseInput(tx))
        })?
        .map_err(|_| closed_error())?;
        Ok(rx)
    }

    /// Stops the command (SIGTERM, SIGKILL after the grace); its exit frame follows.
    pub(crate) fn stop(&self, params: PairParams) -> Result<Value, RpcError> {
        self.with_pair(&params.host_route_id, &params.worker_session_id, |c| {
            c.kill.notify_one()
        })?;
        Ok(Value::Null)
    }

    /// Closes the pair (or every session of the route when no session is given): kills the
    /// command, sends nothing more. Idempotent; the ack echoes what was given.
    pub(crate) fn close(&self, params: CloseParams) -> Value {
        let mut open = self.lock();
        let keys: Vec<Pair> = open
            .keys()
            .filter(|(r, s)| *r == params.host_route_id && params.worker_session_id.as_ref().is_none_or(|w| w == s))
            .cloned()
            .collect();
        for key in keys {
            if let Some(channel) = open.remove(&key) {
                channel.closed.store(true, Ordering::SeqCst);
                channel.kill.notify_one();
                if let Some(plane) = self.plane.get() {
                    plane.forget(&key.0);
                }
            }
        }
        match params.worker_session_id {
            Some(session) => json!({"hostRouteId": params.host_route_id, "workerSessionId": session}),
            None => json!({"hostRouteId": params.host_route_id}),
        }
    }
}

fn closed_error() -> RpcError {
    RpcError::from(DriverError::ChannelClosed)
}

#[derive(Clone)]
struct FrameSender {
    out: Outbound,
    route: String,
    session: String,
    closed: Arc<AtomicBool>,
    invocation: Option<String>,
    /// The route's output on the data plane, when it is on it.
    plane: Option<Arc<Output>>,
}

impl FrameSender {
    async fn data(&self, bytes: &[u8]) {
        if self.closed.load(Ordering::SeqCst) || bytes.is_empty() {
            return;
        }
        let params =
            json!({"hostRouteId": self.route, "workerSessionId": self.session, "chunk": STANDARD.encode(bytes)});
        self.out
            .notify(notifications::DUPLEX_DATA, params, self.invocation.as_deref())
            .await;
    }

    async fn exit(&self, exit_code: Option<i32>) {
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        if let Some(plane) = &self.plane {
            return plane.exit(exit_code);
        }
        let params = json!({
            "hostRouteId": self.route,
            "workerSessionId": self.session,
            "exitCode": exit_code,
            "transportClosed": false,
        });
        self.out
            .notify(notifications::DUPLEX_EXIT, params, self.invocation.as_deref())
            .await;
    }
}
