//! The wire between a host and its agent: length-prefixed frames, each bounded, carrying
//! JSON requests and responses or binary output chunks.
//!
//! A frame is a 4-byte big-endian length `n` (1 ≤ n ≤ [`MAX_FRAME`]) and `n` bytes of
//! body. The body's first byte says what it is:
//! - `J`: one JSON message, a [`Request`] from the client or a [`Response`] from the agent;
//! - `D`: an output chunk from the agent ([`Chunk`]): the request id (u64), the stream
//!   (u8: 0 stdout, 1 stderr, 2 tty), the absolute offset of its first byte (u64), then the
//!   bytes; all integers big-endian.
//!
//! The first request on a connection is `hello` with [`VERSION`]; anything else, or another
//! version, is refused and the connection closed. Every request carries a client-chosen id
//! that its response (and, for `output`, every chunk and the final `exit`) repeats.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The protocol version this crate speaks.
pub const VERSION: u32 = 1;
/// The most process ids one agent gives (from its first id on): a host starting the next
/// supervisor of a lease numbers it this far on, so two supervisors' ids never collide,
/// and ended processes, executes among them, never use up a lease's supervisor.
pub const IDS_PER_GENERATION: u64 = 1 << 32;
/// The most processes one agent holds at once by default (running, or ended and kept).
pub const DEFAULT_MAX_PROCESSES: u64 = 4096;
/// The largest frame body either side sends or accepts.
pub const MAX_FRAME: usize = 1024 * 1024;
/// The largest output chunk the agent puts in one frame.
pub const MAX_CHUNK: usize = 64 * 1024;
/// The default per-stream replay size (`keep`).
pub const DEFAULT_KEEP: u64 = 8 * 1024 * 1024;
/// The largest per-stream replay size one process may ask for.
pub const MAX_KEEP: u64 = 1024 * 1024 * 1024;
/// The most argv entries a spawn may carry.
pub const MAX_ARGS: usize = 4096;
/// The longest idempotency key.
pub const MAX_KEY: usize = 256;

const KIND_JSON: u8 = b'J';
const KIND_DATA: u8 = b'D';
const CHUNK_HEADER: usize = 1 + 8 + 1 + 8;

/// One output stream of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    /// The process's standard output (a process without a terminal).
    Stdout,
    /// The process's standard error (a process without a terminal).
    Stderr,
    /// The terminal's output (a process with a terminal: stdout and stderr together).
    Tty,
}

impl Stream {
    /// The stream's name on the wire and in texts.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
            Stream::Tty => "tty",
        }
    }

    fn code(self) -> u8 {
        match self {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
            Stream::Tty => 2,
        }
    }

    fn from_code(code: u8) -> Option<Stream> {
        match code {
            0 => Some(Stream::Stdout),
            1 => Some(Stream::Stderr),
            2 => Some(Stream::Tty),
            _ => None,
        }
    }
}

/// What the process reads as stdin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StdinMode {
    /// `/dev/null`.
    #[default]
    Null,
    /// A pipe the host writes with `write_stdin` and closes with `close_stdin`.
    Piped,
}

/// A terminal size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtySize {
    /// Rows (at least 1).
    pub rows: u16,
    /// Columns (at least 1).
    pub cols: u16,
}

/// What to start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpawnRequest {
    /// The program and its arguments (`argv[0]` is looked up in `PATH`).
    pub argv: Vec<String>,
    /// The working directory; the agent's own when absent.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Variables set on top of the agent's environment (or of nothing, with `clear_env`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Start from an empty environment.
    #[serde(default)]
    pub clear_env: bool,
    /// Stdin: null or piped (a process with a terminal reads the terminal).
    #[serde(default)]
    pub stdin: StdinMode,
    /// A pseudo-terminal of this size instead of pipes.
    #[serde(default)]
    pub tty: Option<TtySize>,
    /// Bytes held per stream for replay; [`DEFAULT_KEEP`] when absent.
    #[serde(default)]
    pub keep: Option<u64>,
    /// Kill the process group this many milliseconds after the start.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// The same key with the same request returns the same process.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Hold the output for one reader instead of dropping it (a host's buffered execute):
    /// a stream stops being read while `keep` bytes of it are unread, so the process blocks
    /// on a full pipe, as with a plain pipe, and nothing is lost; the process leaves the
    /// table once its final state has been delivered to a reader (pipes only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hold: bool,
    /// Who the process runs as (`UID`, `UID:GID`, `NAME` or `NAME:GROUP`, names as the
    /// agent's own `/etc/passwd` and `/etc/group` know them); the agent's own user when
    /// absent. Another user than the agent's needs an agent that may switch (root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The lease's bound on replay bytes reserved, when it is tighter than the agent's
    /// own (`--max-buffer-bytes`): checked with this spawn, after the oldest ended
    /// processes' buffers were freed to make room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_bound: Option<u64>,
}

/// Per-stream start offsets for `output`; a stream left out starts at its oldest byte held.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Offsets {
    /// Where to start stdout.
    #[serde(default)]
    pub stdout: Option<u64>,
    /// Where to start stderr.
    #[serde(default)]
    pub stderr: Option<u64>,
    /// Where to start the terminal's output.
    #[serde(default)]
    pub tty: Option<u64>,
}

impl Offsets {
    /// The offset asked for `stream`.
    pub fn get(&self, stream: Stream) -> Option<u64> {
        match stream {
            Stream::Stdout => self.stdout,
            Stream::Stderr => self.stderr,
            Stream::Tty => self.tty,
        }
    }
}

/// An operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// The first request: the version the client speaks.
    Hello {
        /// [`VERSION`].
        version: u32,
    },
    /// Start a process.
    Spawn(SpawnRequest),
    /// Every process held.
    List,
    /// One process.
    Info {
        /// The process id.
        process: u64,
    },
    /// Stream chunks from the offsets, live until the exit.
    Output {
        /// The process id.
        process: u64,
        /// Where each stream starts.
        #[serde(default)]
        from: Offsets,
    },
    /// Write bytes (base64) to stdin or the terminal.
    WriteStdin {
        /// The process id.
        process: u64,
        /// The bytes, standard base64.
        data: String,
    },
    /// End of input: close the pipe, or send the terminal's EOF character.
    CloseStdin {
        /// The process id.
        process: u64,
    },
    /// Send a signal (name like `TERM`/`SIGTERM`, or number) to the process group.
    Signal {
        /// The process id.
        process: u64,
        /// The signal.
        signal: String,
    },
    /// Resize the terminal (SIGWINCH reaches the foreground group).
    Resize {
        /// The process id.
        process: u64,
        /// Rows.
        rows: u16,
        /// Columns.
        cols: u16,
    },
    /// Wait for the exit, at most `timeout_ms` (forever when absent); answers the status.
    Wait {
        /// The process id.
        process: u64,
        /// The bound.
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
    /// The agent's own state.
    Agent,
    /// Connect to `127.0.0.1:{port}` in the lease; once answered
    /// [`Connected`](Reply::Connected), the connection carries that TCP stream's bytes both
    /// ways, unframed, until either side closes. Only as the first request after `hello`,
    /// with nothing else in flight; at most [`MAX_TUNNELS`] at once per agent.
    Connect {
        /// The port on the lease's loopback.
        port: u16,
    },
}

/// The most `connect` tunnels one agent carries at once.
pub const MAX_TUNNELS: usize = 256;

/// A request frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// Chosen by the client, unique among its requests in flight.
    pub id: u64,
    /// What to do.
    pub op: Op,
}

/// A process's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Status {
    /// Still running (or exited with its output not yet drained).
    Running,
    /// Exited with this code.
    Exited {
        /// The exit code.
        code: i32,
    },
    /// Killed by this signal.
    Signalled {
        /// The signal number.
        signal: i32,
    },
}

/// One stream's accounting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamInfo {
    /// Which stream.
    pub stream: Stream,
    /// Bytes written since the start (the offset one past the newest byte).
    pub written: u64,
    /// Bytes dropped from the replay buffer (the oldest offset still held).
    pub dropped: u64,
    /// The replay size.
    pub keep: u64,
}

/// A process as the agent reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessInfo {
    /// Unique in this agent.
    pub id: u64,
    /// The pid (also the process group id).
    pub pid: i32,
    /// The start time from `/proc/PID/stat` (clock ticks since boot): with the pid, the
    /// process's identity.
    pub start_time: u64,
    /// The argv it was started with.
    pub argv: Vec<String>,
    /// Whether it has a terminal.
    pub tty: bool,
    /// Its status.
    pub status: Status,
    /// Its streams.
    pub streams: Vec<StreamInfo>,
    /// Its stdout and stderr pipes as `/proc/PID/fd` names them (`pipe:[N]`), so that a host
    /// can find every process that still holds them (a `setsid` escapee); empty with a
    /// terminal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pipes: Vec<String>,
}

/// The agent's own state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentInfo {
    /// [`VERSION`].
    pub version: u32,
    /// The agent's pid.
    pub pid: i32,
    /// Whether it reaps orphans (PID 1 or a subreaper).
    pub reaps_orphans: bool,
    /// Processes held.
    pub processes: u64,
    /// The bound on processes held.
    pub max_processes: u64,
    /// Replay bytes reserved by the processes held.
    pub buffer_reserved: u64,
    /// The bound on replay bytes reserved.
    pub buffer_bound: u64,
    /// Orphans (processes it did not spawn) reaped so far.
    pub orphans_reaped: u64,
    /// The pids of the latest orphans reaped (at most 64).
    pub recent_orphans: Vec<i32>,
}

/// What a request answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Reply {
    /// Answer to `hello`.
    Hello {
        /// [`VERSION`].
        version: u32,
    },
    /// One process (spawn, info, signal).
    Process(ProcessInfo),
    /// Every process (list).
    Processes(Vec<ProcessInfo>),
    /// Done (write_stdin, close_stdin, resize).
    Done,
    /// The status (wait).
    Status(Status),
    /// The end of an output stream: the process's final state.
    Exit(ProcessInfo),
    /// The agent's state.
    Agent(AgentInfo),
    /// Answer to `connect`: the raw stream follows.
    Connected,
}

/// A response frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Response {
    /// The request's id (0 for a refusal of a frame that had none).
    pub id: u64,
    /// The answer, or the refusal's text.
    pub result: Result<Reply, String>,
}

/// An output chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The `output` request's id.
    pub id: u64,
    /// Which stream.
    pub stream: Stream,
    /// The absolute offset of the first byte.
    pub offset: u64,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// A frame body, decoded.
#[derive(Debug)]
pub enum Frame {
    /// A JSON message (still to be parsed as a request or a response).
    Json(Vec<u8>),
    /// An output chunk.
    Data(Chunk),
}

/// Reads one frame; `Ok(None)` at a clean end of stream between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Option<Frame>, String> {
    let mut len = [0u8; 4];
    // Only an end before a frame's first byte is clean; one inside the length is a cut.
    match reader.read_exact(&mut len[..1]).await {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(format!("reading a frame: {error}")),
    }
    reader
        .read_exact(&mut len[1..])
        .await
        .map_err(|error| format!("reading a frame: {error}"))?;
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(format!(
            "frame of {len} bytes is outside the bound of 1 to {MAX_FRAME} bytes"
        ));
    }
    let mut body = vec![0u8; len];
    reader
        .read_exact(&mut body)
        .await
        .map_err(|error| format!("reading a frame: {error}"))?;
    decode(body).map(Some)
}

fn decode(mut body: Vec<u8>) -> Result<Frame, String> {
    match body[0] {
        KIND_JSON => {
            body.remove(0);
            Ok(Frame::Json(body))
        }
        KIND_DATA if body.len() >= CHUNK_HEADER => {
            let id = u64::from_be_bytes(body[1..9].try_into().expect("8 bytes"));
            let stream = Stream::from_code(body[9]).ok_or_else(|| format!("unknown stream code {}", body[9]))?;
            let offset = u64::from_be_bytes(body[10..18].try_into().expect("8 bytes"));
            let bytes = body.split_off(CHUNK_HEADER);
            Ok(Frame::Data(Chunk {
                id,
                stream,
                offset,
                bytes,
            }))
        }
        KIND_DATA => Err(format!("data frame of {} bytes is shorter than its header", body.len())),
        kind => Err(format!("unknown frame kind {kind}")),
    }
}

/// Encodes a JSON message as a frame.
pub fn json_frame<T: Serialize>(message: &T) -> Vec<u8> {
    let json = serde_json::to_vec(message).expect("protocol messages serialize");
    let mut frame = Vec::with_capacity(5 + json.len());
    frame.extend_from_slice(&(json.len() as u32 + 1).to_be_bytes());
    frame.push(KIND_JSON);
    frame.extend_from_slice(&json);
    frame
}

/// Encodes an output chunk as a frame.
pub fn chunk_frame(id: u64, stream: Stream, offset: u64, bytes: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(4 + CHUNK_HEADER + bytes.len());
    frame.extend_from_slice(&((CHUNK_HEADER + bytes.len()) as u32).to_be_bytes());
    frame.push(KIND_DATA);
    frame.extend_from_slice(&id.to_be_bytes());
    frame.push(stream.code());
    frame.extend_from_slice(&offset.to_be_bytes());
    frame.extend_from_slice(bytes);
    frame
}

/// Writes an encoded frame, refusing one over the bound.
pub async fn write_frame<W: AsyncWrite + Unpin>(writer: &mut W, frame: &[u8]) -> Result<(), String> {
    if frame.len() - 4 > MAX_FRAME {
        return Err(format!(
            "frame of {} bytes is outside the bound of 1 to {MAX_FRAME} bytes",
            frame.len() - 4
        ));
    }
    writer
        .write_all(frame)
        .await
        .map_err(|error| format!("writing a frame: {error}"))
}
