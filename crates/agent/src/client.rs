//! A small async client of the agent, for the drivers. It treats the agent as hostile: frames
//! are bounded, every response must answer a request in flight, and every chunk must carry
//! the next offset of its stream.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use crate::proto::{
    AgentInfo, Chunk, Frame, MAX_FRAME, Offsets, Op, ProcessInfo, Reply, Request, Response, SpawnRequest, Status,
    Stream, VERSION, json_frame, read_frame, write_frame,
};

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// The agent refused the request with this text.
    Refused(String),
    /// The connection failed or the agent broke the protocol.
    Broken(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Refused(text) => f.write_str(text),
            ClientError::Broken(text) => write!(f, "the agent connection is broken: {text}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// What an output stream yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Bytes of a stream at their absolute offset.
    Chunk(Chunk),
    /// The process ended and every byte was delivered.
    Exit(ProcessInfo),
}

/// The most stdin bytes in one request (base64 makes them 4/3 as many, well under a frame).
const STDIN_PIECE: usize = 512 * 1024;

enum Waiter {
    Once(oneshot::Sender<Result<Reply, ClientError>>),
    Stream(mpsc::Sender<Result<Event, ClientError>>, HashMap<Stream, u64>),
}

type Waiters = Arc<Mutex<HashMap<u64, Waiter>>>;

/// A connection to an agent.
pub struct Client {
    tx: mpsc::Sender<Vec<u8>>,
    waiters: Waiters,
    next_id: AtomicU64,
}

/// An `output` stream.
pub struct Output {
    rx: mpsc::Receiver<Result<Event, ClientError>>,
}

impl Output {
    /// The next chunk, the exit, or the refusal; `None` after the end.
    pub async fn next(&mut self) -> Option<Result<Event, ClientError>> {
        self.rx.recv().await
    }
}

fn lock(waiters: &Waiters) -> std::sync::MutexGuard<'_, HashMap<u64, Waiter>> {
    waiters.lock().unwrap_or_else(|p| p.into_inner())
}

async fn fail_all(waiters: &Waiters, why: String) {
    let drained: Vec<Waiter> = lock(waiters).drain().map(|(_, w)| w).collect();
    for waiter in drained {
        match waiter {
            Waiter::Once(tx) => {
                let _ = tx.send(Err(ClientError::Broken(why.clone())));
            }
            Waiter::Stream(tx, _) => {
                let _ = tx.send(Err(ClientError::Broken(why.clone()))).await;
            }
        }
    }
}

async fn dispatch(frame: Frame, waiters: &Waiters) -> Result<(), String> {
    match frame {
        Frame::Json(body) => {
            let response: Response =
                serde_json::from_slice(&body).map_err(|error| format!("malformed response: {error}"))?;
            let waiter = lock(waiters)
                .remove(&response.id)
                .ok_or_else(|| format!("a response to request {}, which is not in flight", response.id))?;
            match (waiter, response.result) {
                (Waiter::Once(tx), result) => {
                    let _ = tx.send(result.map_err(ClientError::Refused));
                }
                (Waiter::Stream(tx, _), Ok(Reply::Exit(info))) => {
                    let _ = tx.send(Ok(Event::Exit(info))).await;
                }
                (Waiter::Stream(tx, _), Err(text)) => {
                    let _ = tx.send(Err(ClientError::Refused(text))).await;
                }
                (Waiter::Stream(..), Ok(other)) => return Err(format!("an output stream ended with {other:?}")),
            }
        }
        Frame::Data(chunk) => {
            let tx = {
                let mut waiters = lock(waiters);
                let Some(Waiter::Stream(tx, cursors)) = waiters.get_mut(&chunk.id) else {
                    return Err(format!("a chunk for request {}, which is no output stream", chunk.id));
                };
                let expected = cursors.entry(chunk.stream).or_insert(chunk.offset);
                if *expected != chunk.offset {
                    return Err(format!(
                        "a {} chunk at offset {} where {} was next",
                        chunk.stream.name(),
                        chunk.offset,
                        expected
                    ));
                }
                *expected += chunk.bytes.len() as u64;
                tx.clone()
            };
            let _ = tx.send(Ok(Event::Chunk(chunk))).await;
        }
    }
    Ok(())
}

impl Client {
    /// Connects to the agent's socket and says hello.
    pub async fn connect(path: &Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|error| ClientError::Broken(format!("connecting to {}: {error}", path.display())))?;
        let (mut reader, mut writer) = stream.into_split();
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
        tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                if write_frame(&mut writer, &frame).await.is_err() {
                    break;
                }
            }
        });
        let waiters: Waiters = Arc::default();
        let read_waiters = Arc::clone(&waiters);
        tokio::spawn(async move {
            let why = loop {
                match read_frame(&mut reader).await {
                    Ok(Some(frame)) => {
                        if let Err(why) = dispatch(frame, &read_waiters).await {
                            break why;
                        }
                    }
                    Ok(None) => break "the agent closed the connection".to_owned(),
                    Err(why) => break why,
                }
            };
            fail_all(&read_waiters, why).await;
        });
        let client = Client {
            tx,
            waiters,
            next_id: AtomicU64::new(1),
        };
        match client.request(Op::Hello { version: VERSION }).await? {
            Reply::Hello { version: VERSION } => Ok(client),
            other => Err(ClientError::Broken(format!("hello answered with {other:?}"))),
        }
    }

    /// Sends one request and waits for its answer.
    pub async fn request(&self, op: Op) -> Result<Reply, ClientError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.waiters).insert(id, Waiter::Once(tx));
        self.send(id, op).await?;
        rx.await
            .unwrap_or_else(|_| Err(ClientError::Broken("the connection closed".to_owned())))
    }

    async fn send(&self, id: u64, op: Op) -> Result<(), ClientError> {
        let frame = json_frame(&Request { id, op });
        if frame.len() - 4 > MAX_FRAME {
            lock(&self.waiters).remove(&id);
            return Err(ClientError::Refused(format!(
                "frame of {} bytes is outside the bound of 1 to {MAX_FRAME} bytes",
                frame.len() - 4
            )));
        }
        self.tx
            .send(frame)
            .await
            .map_err(|_| ClientError::Broken("the connection closed".to_owned()))
    }

    fn unexpected<T>(reply: Reply) -> Result<T, ClientError> {
        Err(ClientError::Broken(format!("unexpected reply {reply:?}")))
    }

    /// Starts a process.
    pub async fn spawn(&self, request: SpawnRequest) -> Result<ProcessInfo, ClientError> {
        match self.request(Op::Spawn(request)).await? {
            Reply::Process(info) => Ok(info),
            other => Client::unexpected(other),
        }
    }

    /// One process.
    pub async fn info(&self, process: u64) -> Result<ProcessInfo, ClientError> {
        match self.request(Op::Info { process }).await? {
            Reply::Process(info) => Ok(info),
            other => Client::unexpected(other),
        }
    }

    /// Every process.
    pub async fn list(&self) -> Result<Vec<ProcessInfo>, ClientError> {
        match self.request(Op::List).await? {
            Reply::Processes(list) => Ok(list),
            other => Client::unexpected(other),
        }
    }

    /// The agent's own state.
    pub async fn agent(&self) -> Result<AgentInfo, ClientError> {
        match self.request(Op::Agent).await? {
            Reply::Agent(info) => Ok(info),
            other => Client::unexpected(other),
        }
    }

    async fn done(&self, op: Op) -> Result<(), ClientError> {
        match self.request(op).await? {
            Reply::Done => Ok(()),
            other => Client::unexpected(other),
        }
    }

    /// Writes to stdin (or the terminal), in pieces that fit a frame.
    pub async fn write_stdin(&self, process: u64, bytes: &[u8]) -> Result<(), ClientError> {
        for piece in bytes.chunks(STDIN_PIECE) {
            let data = base64::engine::general_purpose::STANDARD.encode(piece);
            self.done(Op::WriteStdin { process, data }).await?;
        }
        if bytes.is_empty() {
            self.done(Op::WriteStdin {
                process,
                data: String::new(),
            })
            .await?;
        }
        Ok(())
    }

    /// Ends stdin.
    pub async fn close_stdin(&self, process: u64) -> Result<(), ClientError> {
        self.done(Op::CloseStdin { process }).await
    }

    /// Resizes the terminal.
    pub async fn resize(&self, process: u64, rows: u16, cols: u16) -> Result<(), ClientError> {
        self.done(Op::Resize { process, rows, cols }).await
    }

    /// Signals the process group.
    pub async fn signal(&self, process: u64, signal: &str) -> Result<ProcessInfo, ClientError> {
        let op = Op::Signal {
            process,
            signal: signal.to_owned(),
        };
        match self.request(op).await? {
            Reply::Process(info) => Ok(info),
            other => Client::unexpected(other),
        }
    }

    /// Waits for the exit (at most `timeout`); answers the status, `Running` on timeout.
    pub async fn wait(&self, process: u64, timeout: Option<Duration>) -> Result<Status, ClientError> {
        let timeout_ms = timeout.map(|t| t.as_millis() as u64);
        match self.request(Op::Wait { process, timeout_ms }).await? {
            Reply::Status(status) => Ok(status),
            other => Client::unexpected(other),
        }
    }

    /// Streams the output from `from`, live until the exit.
    pub async fn output(&self, process: u64, from: Offsets) -> Result<Output, ClientError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(64);
        lock(&self.waiters).insert(id, Waiter::Stream(tx, HashMap::new()));
        self.send(id, Op::Output { process, from }).await?;
        Ok(Output { rx })
    }
}

/// Opens a tunnel to `127.0.0.1:{port}` in the lease through the agent at `path` (the
/// `connect` verb): a fresh connection, `hello`, `connect`, then the raw stream, which
/// carries the lease port's bytes both ways.
pub async fn tunnel(path: &Path, port: u16) -> Result<UnixStream, ClientError> {
    let mut stream = UnixStream::connect(path)
        .await
        .map_err(|error| ClientError::Broken(format!("connecting to {}: {error}", path.display())))?;
    for (id, op) in [(1, Op::Hello { version: VERSION }), (2, Op::Connect { port })] {
        write_frame(&mut stream, &json_frame(&Request { id, op }))
            .await
            .map_err(|error| ClientError::Broken(format!("writing to the agent: {error}")))?;
        let body = match read_frame(&mut stream).await {
            Ok(Some(crate::proto::Frame::Json(body))) => body,
            Ok(_) => return Err(ClientError::Broken("the agent closed the connection".to_owned())),
            Err(why) => return Err(ClientError::Broken(why)),
        };
        let response: crate::proto::Response =
            serde_json::from_slice(&body).map_err(|error| ClientError::Broken(format!("a bad answer: {error}")))?;
        match response.result {
            Err(refusal) => return Err(ClientError::Refused(refusal)),
            Ok(Reply::Hello { .. } | Reply::Connected) if response.id == id => {}
            Ok(other) => return Err(ClientError::Broken(format!("unexpected reply {other:?}"))),
        }
    }
    Ok(stream)
}
