//! `environmentRunnerIngressEndpoint {lease, port, path}`: an authenticated WebSocket
//! endpoint on the host's loopback that carries each upgrade request for `path` to
//! `127.0.0.1:{port}` inside the lease (Paperclip's runner ingress).
//!
//! The worker runs on the host, so it opens the endpoint itself: a TCP listener on
//! `127.0.0.1` (a port the system picks; never beyond loopback), and a token of 244 random
//! bits (two v4 UUIDs' random bits, from the system's CSPRNG) that every connection must
//! send in the header [`TOKEN_HEADER`]. The lease's port is reached through the lease's
//! process supervisor (`envrtStartProcessSupervisor`), its `connect` verb, in the
//! supervisor's network namespace: the same way as the host's `expose` (contract section
//! 10): this worker's own supervisor of the lease, else the one listening in the directory
//! the host names (`envrtSocketDir`, the host's `socketDir` of the lease: supervisors
//! outlive workers). A lease without a supervisor is refused.
//!
//! One connection: the request head is read (at most [`MAX_HEAD`] bytes, within
//! [`HEAD_WAIT`]) and parsed by `httparse` (hyper's parser); it must be `GET` of the
//! endpoint's path (any query), carry `Upgrade: websocket` and the token, or it is
//! answered with an exact text and closed, and nothing reaches the lease. Passed, the
//! head goes to the lease **without** the token header (the lease never sees the token),
//! and then bytes both ways until either side closes. The lease's server answers the
//! upgrade itself.
//!
//! Bounds: [`MAX_ENDPOINTS`] per lease, [`MAX_CONNECTIONS`] at once per endpoint (more
//! answered 503 and closed). The same lease, port and path give the same endpoint (same
//! URL, token and generation) while it is open; release, destroy and expiry close every
//! endpoint of the lease, with its open connections.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envrt_plugin_protocol::environment::{RunnerIngressEndpoint, RunnerIngressEndpointParams, SecretHeader};
use envrt_plugin_protocol::methods::SUPERVISOR_SOCKET;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use super::rpc::RpcError;
use super::{Worker, code, parse};

/// `environmentRunnerIngressEndpoint`; without a supervisor's binary, answered as an SDK
/// worker without the hook answers.
pub(super) async fn handle(worker: &Worker, method: &str, params: Value) -> Result<Value, RpcError> {
    if worker.agent.is_none() {
        return Err(RpcError::new(
            code::METHOD_NOT_IMPLEMENTED,
            format!("{method} is not implemented by this plugin"),
        ));
    }
    let p: RunnerIngressEndpointParams = parse(method, params)?;
    let dir = worker
        .leases
        .existing(p.lease.provider_lease_id.as_deref().unwrap_or_default())?;
    // This worker's own supervisor of the lease, else the one the host says listens in
    // the directory it named (a supervisor outlives the worker that started it).
    let socket_dir = worker
        .supervisors
        .socket_dir_of(&dir)
        .or_else(|| hosts_socket_dir(p.envrt_socket_dir.as_deref()));
    worker.ingresses.endpoint(&dir, socket_dir, p).await
}

/// The host's `envrtSocketDir`, when it is an absolute path without `..` to a directory
/// (not a link); the socket in it is opened without following a link when a connection
/// comes ([`envrt_driver_agent::expose::tunnel`]).
fn hosts_socket_dir(named: Option<&str>) -> Option<PathBuf> {
    let path = Path::new(named?);
    let plain = path.is_absolute() && !path.components().any(|c| c == std::path::Component::ParentDir);
    let dir = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
    (plain && dir).then(|| path.to_path_buf())
}

/// The header that carries the endpoint's token (stripped before the lease).
pub(crate) const TOKEN_HEADER: &str = "x-envrt-ingress-token";
/// Endpoints one lease may have open at once.
pub(crate) const MAX_ENDPOINTS: usize = 16;
/// Connections one endpoint carries at once.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// Bytes of a request head.
pub(crate) const MAX_HEAD: usize = 16 * 1024;
/// Headers in a request head.
const MAX_HEADERS: usize = 64;
/// How long a connection has to send its whole request head.
pub(crate) const HEAD_WAIT: Duration = Duration::from_secs(10);
/// Bytes of a path.
const MAX_PATH: usize = 1024;

/// One open endpoint.
struct Endpoint {
    port: u16,
    path: String,
    answer: RunnerIngressEndpoint,
    closer: watch::Sender<bool>,
}

/// The open endpoints, by lease directory.
#[derive(Default)]
pub(crate) struct Ingresses {
    open: Mutex<HashMap<PathBuf, Vec<Endpoint>>>,
    /// Counts endpoints opened by this worker (each one's generation).
    opened: std::sync::atomic::AtomicU64,
}

fn refused(id: &str, why: impl std::fmt::Display) -> RpcError {
    RpcError::invalid_params(format!("Lease {id}: runner ingress refused: {why}"))
}

/// The answer of the open endpoint for `port` and `path`, or the refusal when the lease
/// has no room for another; None: a new one is to be opened.
fn reuse(list: &[Endpoint], id: &str, port: u16, path: &str) -> Option<Result<Value, RpcError>> {
    if let Some(e) = list.iter().find(|e| e.port == port && e.path == path) {
        return Some(Ok(envrt_plugin_protocol::to_value(&e.answer)));
    }
    (list.len() >= MAX_ENDPOINTS).then(|| {
        Err(refused(
            id,
            format!("the lease has {MAX_ENDPOINTS} endpoints open (the limit)"),
        ))
    })
}

impl Ingresses {
    /// Closes every endpoint of the lease at `lease_dir`, with their open connections.
    pub(crate) fn forget(&self, lease_dir: &Path) {
        let gone = self.open.lock().unwrap_or_else(|p| p.into_inner()).remove(lease_dir);
        for endpoint in gone.into_iter().flatten() {
            let _ = endpoint.closer.send(true);
        }
    }

    /// Answers `environmentRunnerIngressEndpoint` for the lease at `lease_dir`, whose
    /// supervisor listens in `socket_dir` (None: no supervisor runs).
    pub(crate) async fn endpoint(
        &self,
        lease_dir: &Path,
        socket_dir: Option<PathBuf>,
        params: RunnerIngressEndpointParams,
    ) -> Result<Value, RpcError> {
        let id = params.lease.provider_lease_id.clone().unwrap_or_default();
        let (port, path) = (params.port, params.path);
        if port == 0 {
            return Err(refused(&id, "the port must be 1 to 65535, not 0"));
        }
        let visible = path.bytes().all(|b| b.is_ascii_graphic());
        if !path.starts_with('/') || path.len() > MAX_PATH || !visible || path.contains('?') || path.contains('#') {
            return Err(refused(
                &id,
                format!(
                    "the path must start with \"/\" and be at most {MAX_PATH} visible ASCII characters without \"?\" or \"#\", not {path:?}"
                ),
            ));
        }
        let Some(socket_dir) = socket_dir else {
            return Err(refused(
                &id,
                "the lease has no process supervisor to reach its port through (start it with envrtStartProcessSupervisor)",
            ));
        };
        {
            let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            let list = open.entry(lease_dir.to_path_buf()).or_default();
            list.retain(|e| !e.closer.is_closed());
            if let Some(answer) = reuse(list, &id, port, &path) {
                return answer;
            }
        }
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| RpcError::worker(format!("Lease {id}: cannot open a runner ingress endpoint: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| RpcError::worker(format!("Lease {id}: cannot open a runner ingress endpoint: {e}")))?;
        let token = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
        let n = self.opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let answer = RunnerIngressEndpoint {
            kind: "authenticated_websocket".into(),
            websocket_url: format!("ws://{addr}{path}"),
            secret_headers: vec![SecretHeader {
                name: TOKEN_HEADER.into(),
                value: token.clone(),
            }],
            generation: format!("{id}:{port}:{n}"),
        };
        let (closer, closed) = watch::channel(false);
        let served = Served {
            port,
            path: path.clone(),
            token,
            socket: socket_dir.join(SUPERVISOR_SOCKET),
            lease_dir: lease_dir.to_path_buf(),
            slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
        };
        // Checked again under the lock: a concurrent call may have opened the same endpoint
        // (its answer is given, this listener dropped) or the last one allowed.
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let list = open.entry(lease_dir.to_path_buf()).or_default();
        if let Some(answer) = reuse(list, &id, port, &path) {
            return answer;
        }
        tokio::spawn(accept(listener, Arc::new(served), closed));
        let value = envrt_plugin_protocol::to_value(&answer);
        list.push(Endpoint {
            port,
            path,
            answer,
            closer,
        });
        Ok(value)
    }
}

/// What every connection of one endpoint needs.
struct Served {
    port: u16,
    path: String,
    token: String,
    socket: PathBuf,
    lease_dir: PathBuf,
    slots: Arc<Semaphore>,
}

async fn accept(listener: TcpListener, served: Arc<Served>, mut closed: watch::Receiver<bool>) {
    loop {
        let conn = tokio::select! {
            biased;
            _ = closed.wait_for(|c| *c) => return,
            conn = listener.accept() => conn,
        };
        let Ok((stream, _)) = conn else { continue };
        // An expired lease (its directory removed by the expiry timer) closes the endpoint.
        if !served.lease_dir.exists() {
            return;
        }
        let served = served.clone();
        let closed = closed.clone();
        tokio::spawn(async move {
            let Ok(_slot) = served.slots.clone().try_acquire_owned() else {
                let text = format!("envrt ingress: too many connections (the limit is {MAX_CONNECTIONS})\n");
                answer(stream, "503 Service Unavailable", &text).await;
                return;
            };
            connection(stream, &served, closed).await;
        });
    }
}

/// Answers `status` with `text` and closes (reading, and dropping, at most 64 KiB more of
/// what the client sent, so that closing with unread bytes does not reset the connection
/// before the client reads the answer).
async fn answer(mut stream: TcpStream, status: &str, text: &str) {
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        text.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(text.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut left = 64 * 1024usize;
        while left > 0 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => left = left.saturating_sub(n),
            }
        }
        Ok::<(), std::io::Error>(())
    };
    let _ = tokio::time::timeout(HEAD_WAIT, write).await;
}

/// Why a request is not carried to the lease: status and the exact text.
pub(crate) fn refusal_text(why: &str) -> String {
    format!("envrt ingress: refused: {why}\n")
}

/// A status line's status and the exact text answered with it.
type Refusal = (&'static str, String);

/// The request head, rewritten without the token header, and the length of the head read
/// (None: not whole yet); or the status and text to answer.
fn judge(buf: &[u8], served: &Served) -> Result<Option<(Vec<u8>, usize)>, Refusal> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => {
            return Err((
                "400 Bad Request",
                refusal_text(&format!("not an HTTP request head ({e})")),
            ));
        }
    };
    let token = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(TOKEN_HEADER))
        .map(|h| h.value);
    // Compared in full whatever the first differing byte (no early exit).
    let token_ok = token.is_some_and(|t| {
        t.len() == served.token.len() && t.iter().zip(served.token.as_bytes()).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
    });
    if !token_ok {
        return Err(("401 Unauthorized", refusal_text("wrong or missing token")));
    }
    let target = req.path.unwrap_or("");
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    if req.method != Some("GET") || path != served.path {
        return Err((
            "404 Not Found",
            refusal_text(&format!("this endpoint serves only GET {}", served.path)),
        ));
    }
    let upgrade = req.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("upgrade") && String::from_utf8_lossy(h.value).eq_ignore_ascii_case("websocket")
    });
    if !upgrade {
        return Err(("400 Bad Request", refusal_text("not a WebSocket upgrade")));
    }
    let mut head = format!("GET {target} HTTP/1.1\r\n").into_bytes();
    for h in req
        .headers
        .iter()
        .filter(|h| !h.name.eq_ignore_ascii_case(TOKEN_HEADER))
    {
        head.extend_from_slice(h.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(h.value);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    Ok(Some((head, len)))
}

async fn connection(mut client: TcpStream, served: &Served, mut closed: watch::Receiver<bool>) {
    let mut buf = Vec::with_capacity(4096);
    let read_head = async {
        let mut chunk = [0u8; 4096];
        loop {
            let n = client.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return Err(None);
            }
            buf.extend_from_slice(&chunk[..n]);
            match judge(&buf, served) {
                Ok(Some(judged)) => return Ok(judged),
                Ok(None) if buf.len() >= MAX_HEAD => {
                    let why = format!("the request head is longer than {MAX_HEAD} bytes");
                    return Err(Some(("431 Request Header Fields Too Large", refusal_text(&why))));
                }
                Ok(None) => continue,
                Err(refusal) => return Err(Some(refusal)),
            }
        }
    };
    let (head, len) = match tokio::time::timeout(HEAD_WAIT, read_head).await {
        Ok(Ok(judged)) => judged,
        Ok(Err(Some((status, text)))) => return answer(client, status, &text).await,
        Ok(Err(None)) | Err(_) => return,
    };
    let rest = buf[len..].to_vec();
    let shown = format!("{}/{SUPERVISOR_SOCKET}", super::supervisor::SOCKET_DIR_INSIDE);
    let lease = match envrt_driver_agent::expose::tunnel(&served.socket, &shown, served.port).await {
        Ok(stream) => stream,
        Err(e) => {
            let text = format!("envrt ingress: cannot reach port {} in the lease: {e}\n", served.port);
            return answer(client, "502 Bad Gateway", &text).await;
        }
    };
    let lease = lease
        .set_nonblocking(true)
        .and_then(|()| tokio::net::UnixStream::from_std(lease));
    let Ok(mut lease) = lease else { return };
    if lease.write_all(&head).await.is_err() || lease.write_all(&rest).await.is_err() {
        return;
    }
    tokio::select! {
        _ = closed.wait_for(|c| *c) => {}
        _ = tokio::io::copy_bidirectional(&mut client, &mut lease) => {}
    }
}
