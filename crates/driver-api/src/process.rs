//! Persistent process sessions (contract section 9): what a caller asks for when it
//! spawns a process that outlives it ([`SpawnRequest`]), what the facade reports about it
//! ([`ProcessInfo`]), the ordered output stream ([`OutputEvent`]) and every refusal of the
//! process verbs ([`ProcessError`]), each an exact text.
//!
//! A process id ([`ProcessId`]) is `{lease id}/{n}`: the lease that holds the process and
//! the number its supervisor gave it, so any program on the same lease store finds the
//! process from its id alone, and the id is unique in the store (lease ids are).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::Timestamp;
use crate::secret::EnvValue;

/// The default per-stream replay size (`keep`): 8 MiB.
pub const DEFAULT_KEEP: u64 = 8 * 1024 * 1024;
/// The default per-lease bound on replay bytes reserved (`replay_bound`): 1 GiB.
pub const DEFAULT_REPLAY_BOUND: u64 = 1024 * 1024 * 1024;
/// The largest `keep` a spawn or an environment may ask for: 1 GiB.
pub const MAX_KEEP: u64 = 1024 * 1024 * 1024;

/// An environment's settings for its leases' processes (`[environment.processes]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessSettings {
    /// The `keep` of a spawn that names none; [`DEFAULT_KEEP`] when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<u64>,
    /// The most replay bytes a lease's processes reserve together (a running process
    /// `keep` per stream, an ended one the bytes it holds); [`DEFAULT_REPLAY_BOUND`] when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_bound: Option<u64>,
}

/// A size as `envrt.toml` and the CLI write it: bytes, or a number with `K`, `M` or `G`
/// (binary multiples, either case); `None` for anything else, 0 included.
pub fn parse_size(raw: &str) -> Option<u64> {
    let (digits, unit) = match raw.char_indices().last() {
        Some((at, c)) if c.is_ascii_alphabetic() => (&raw[..at], c.to_ascii_uppercase()),
        _ => (raw, 'B'),
    };
    let shift = match unit {
        'B' => 0,
        'K' => 10,
        'M' => 20,
        'G' => 30,
        _ => return None,
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(1u64 << shift).filter(|n| *n > 0)
}

/// A process's id: its lease and its number there, written `{lease id}/{n}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessId {
    /// The lease that holds the process.
    pub lease_id: String,
    /// The process's number in its lease's supervisor.
    pub number: u64,
}

impl ProcessId {
    /// The id of process `number` of `lease_id`.
    pub fn new(lease_id: impl Into<String>, number: u64) -> ProcessId {
        ProcessId {
            lease_id: lease_id.into(),
            number,
        }
    }
}

impl fmt::Display for ProcessId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.lease_id, self.number)
    }
}

impl FromStr for ProcessId {
    type Err = ProcessError;

    /// Parses `{lease id}/{n}`; anything else is [`ProcessError::Unknown`].
    fn from_str(text: &str) -> Result<ProcessId, ProcessError> {
        let unknown = || ProcessError::Unknown { id: text.to_owned() };
        let (lease, number) = text.rsplit_once('/').ok_or_else(unknown)?;
        if lease.is_empty() || number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
            return Err(unknown());
        }
        Ok(ProcessId::new(lease, number.parse().map_err(|_| unknown())?))
    }
}

impl Serialize for ProcessId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ProcessId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A terminal size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TtySize {
    /// Rows (at least 1).
    pub rows: u16,
    /// Columns (at least 1).
    pub cols: u16,
}

/// What the process reads as stdin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StdinMode {
    /// `/dev/null`.
    #[default]
    Null,
    /// A pipe fed with `write_stdin` and closed with `close_stdin`.
    Piped,
}

/// What to spawn (contract section 9, "spawn").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpawnRequest {
    /// The program and its arguments; `argv[0]` is looked up in the environment's `PATH`.
    pub argv: Vec<String>,
    /// The working directory, confined like an execute's; the lease's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Who the process runs as (`NAME`, `UID`, `NAME:GROUP` or `UID:GID`), as an
    /// execute's `user`; the lease's own user when absent. A driver that cannot honour it
    /// refuses with `Cannot run as user "{user}": {reason}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Variables set on top of the environment's (secret values are never shown).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, EnvValue>,
    /// Null or piped stdin (a process with a terminal reads its terminal).
    #[serde(default)]
    pub stdin: StdinMode,
    /// A pseudo-terminal of this size instead of pipes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<TtySize>,
    /// Bytes held per stream for replay; [`DEFAULT_KEEP`] when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<u64>,
    /// Kill the whole process group this long after the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// The same key with the same request returns the same process; with another request
    /// it is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

impl SpawnRequest {
    /// A request for `argv` with every other field at its default.
    pub fn new<I, S>(argv: I) -> SpawnRequest
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        SpawnRequest {
            argv: argv.into_iter().map(Into::into).collect(),
            ..Default::default()
        }
    }
}

/// One output stream of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessStream {
    /// Standard output (a process without a terminal).
    Stdout,
    /// Standard error (a process without a terminal).
    Stderr,
    /// The terminal's one stream (a process with a terminal).
    Tty,
}

impl ProcessStream {
    /// `stdout`, `stderr` or `tty`.
    pub fn name(self) -> &'static str {
        match self {
            ProcessStream::Stdout => "stdout",
            ProcessStream::Stderr => "stderr",
            ProcessStream::Tty => "tty",
        }
    }
}

impl fmt::Display for ProcessStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ProcessStream {
    type Err = String;

    fn from_str(text: &str) -> Result<ProcessStream, String> {
        match text {
            "stdout" => Ok(ProcessStream::Stdout),
            "stderr" => Ok(ProcessStream::Stderr),
            "tty" => Ok(ProcessStream::Tty),
            other => Err(format!("unknown stream \"{other}\": expected stdout, stderr or tty")),
        }
    }
}

/// A process's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum ProcessStatus {
    /// Running (or exited with its output still held open by something it left).
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
    /// Its supervisor no longer knows it (the supervisor was replaced).
    Lost,
}

impl ProcessStatus {
    /// Whether the process is still running.
    pub fn is_running(self) -> bool {
        self == ProcessStatus::Running
    }

    /// The shell's view of the end: the code, `128 + n` for signal `n`; `None` while
    /// running or lost.
    pub fn exit_code(self) -> Option<i32> {
        match self {
            ProcessStatus::Exited { code } => Some(code),
            ProcessStatus::Signalled { signal } => Some(128 + signal),
            ProcessStatus::Running | ProcessStatus::Lost => None,
        }
    }
}

impl fmt::Display for ProcessStatus {
    /// `running`, `exited(N)`, `signalled(N)` or `lost`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcessStatus::Running => f.write_str("running"),
            ProcessStatus::Exited { code } => write!(f, "exited({code})"),
            ProcessStatus::Signalled { signal } => write!(f, "signalled({signal})"),
            ProcessStatus::Lost => f.write_str("lost"),
        }
    }
}

/// One stream's accounting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamInfo {
    /// Which stream.
    pub stream: ProcessStream,
    /// Bytes written since the start: the offset one past the newest byte.
    pub written: u64,
    /// Bytes dropped from the replay buffer: the oldest offset still held.
    pub dropped: u64,
    /// The replay size.
    pub keep: u64,
}

/// A process as the facade reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInfo {
    /// `{lease id}/{n}`, unique in the store.
    pub id: ProcessId,
    /// The pid as the lease sees it (also its process group id).
    pub pid: i32,
    /// When it started.
    pub started_at: Timestamp,
    /// The argv it was started with.
    pub argv: Vec<String>,
    /// Whether it has a terminal.
    pub tty: bool,
    /// Its status.
    pub status: ProcessStatus,
    /// Its streams (stdout and stderr, or tty).
    pub streams: Vec<StreamInfo>,
}

impl ProcessInfo {
    /// The accounting of `stream`, when the process has it.
    pub fn stream(&self, stream: ProcessStream) -> Option<&StreamInfo> {
        self.streams.iter().find(|s| s.stream == stream)
    }
}

/// Per-stream start offsets for `output`; a stream left out starts at its oldest byte held.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offsets {
    /// Where stdout starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<u64>,
    /// Where stderr starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<u64>,
    /// Where the terminal's stream starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<u64>,
}

impl Offsets {
    /// Every stream from offset 0.
    pub fn zero() -> Offsets {
        Offsets {
            stdout: Some(0),
            stderr: Some(0),
            tty: Some(0),
        }
    }

    /// The offset asked for `stream`.
    pub fn get(&self, stream: ProcessStream) -> Option<u64> {
        match stream {
            ProcessStream::Stdout => self.stdout,
            ProcessStream::Stderr => self.stderr,
            ProcessStream::Tty => self.tty,
        }
    }

    /// The offsets with `stream` set to `offset`.
    pub fn with(mut self, stream: ProcessStream, offset: u64) -> Offsets {
        match stream {
            ProcessStream::Stdout => self.stdout = Some(offset),
            ProcessStream::Stderr => self.stderr = Some(offset),
            ProcessStream::Tty => self.tty = Some(offset),
        }
        self
    }
}

/// Bytes of one stream at their absolute offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputChunk {
    /// Which stream.
    pub stream: ProcessStream,
    /// The offset of the first byte.
    pub offset: u64,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// What an output stream yields: chunks in order, then the exit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputEvent {
    /// Bytes.
    Chunk(OutputChunk),
    /// The process ended and every byte was delivered: its final state.
    Exit(ProcessInfo),
}

/// A refusal of a process verb: every text exact (contract section 9).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessError {
    /// No such process in the store (or an id not of the form `{lease}/{n}`).
    #[error("Process \"{id}\" was not found.")]
    Unknown {
        /// The id as given.
        id: String,
    },
    /// The verb needs a running process.
    #[error("Process \"{id}\" has exited: cannot {verb}.")]
    Exited {
        /// The process id.
        id: String,
        /// `write to its stdin`, `close its stdin`, `signal it`, `resize its terminal`.
        verb: &'static str,
    },
    /// `resize` on a process without a terminal.
    #[error("Process \"{id}\" has no terminal to resize.")]
    NoTty {
        /// The process id.
        id: String,
    },
    /// `write_stdin` / `close_stdin` on a process whose stdin is not a pipe.
    #[error("Process \"{id}\" was not started with piped stdin.")]
    NotPiped {
        /// The process id.
        id: String,
    },
    /// An offset for a stream the process does not have.
    #[error("Process \"{id}\" has no {stream} stream.")]
    NoStream {
        /// The process id.
        id: String,
        /// The stream asked for.
        stream: ProcessStream,
    },
    /// An offset before the oldest byte still held.
    #[error(
        "Offset {offset} of process \"{id}\"'s {stream} is no longer held: the first offset still held is {first} ({first} bytes dropped)."
    )]
    OffsetDropped {
        /// The process id.
        id: String,
        /// The stream.
        stream: ProcessStream,
        /// The offset asked for.
        offset: u64,
        /// The first offset still held (= bytes dropped).
        first: u64,
    },
    /// An offset past the newest byte.
    #[error("Offset {offset} of process \"{id}\"'s {stream} is past its end: {written} bytes written so far.")]
    OffsetPastEnd {
        /// The process id.
        id: String,
        /// The stream.
        stream: ProcessStream,
        /// The offset asked for.
        offset: u64,
        /// Bytes written.
        written: u64,
    },
    /// A signal that is neither a known name nor a number of one.
    #[error("Unknown signal \"{signal}\".")]
    UnknownSignal {
        /// The signal as given.
        signal: String,
    },
    /// The idempotency key names a process spawned with another request.
    #[error("Idempotency key \"{key}\" was already used for process \"{id}\" with a different request.")]
    IdempotencyConflict {
        /// The key.
        key: String,
        /// The process it names.
        id: String,
    },
    /// The process ended and its lease's supervisor evicted its record to make room (it
    /// holds at most `bound` processes and evicts the one that ended first).
    #[error(
        "Process \"{id}\" ended and was evicted: a lease holds at most {bound} processes and evicts the one that ended first, so its exit status is no longer held."
    )]
    Evicted {
        /// The process id.
        id: String,
        /// The most processes the lease's supervisor holds.
        bound: u64,
    },
    /// The request cannot be spawned (empty argv, a bad `keep`, a terminal of 0 rows...).
    #[error("Cannot spawn the process: {reason}")]
    Spawn {
        /// Why, as the supervisor said it.
        reason: String,
    },
}

impl ProcessError {
    /// A stable `snake_case` name of the refusal.
    pub fn kind(&self) -> &'static str {
        match self {
            ProcessError::Unknown { .. } => "process_not_found",
            ProcessError::Exited { .. } => "process_exited",
            ProcessError::NoTty { .. } => "process_no_tty",
            ProcessError::NotPiped { .. } => "process_stdin_not_piped",
            ProcessError::NoStream { .. } => "process_no_stream",
            ProcessError::OffsetDropped { .. } => "process_offset_dropped",
            ProcessError::OffsetPastEnd { .. } => "process_offset_past_end",
            ProcessError::UnknownSignal { .. } => "process_unknown_signal",
            ProcessError::IdempotencyConflict { .. } => "process_idempotency_conflict",
            ProcessError::Evicted { .. } => "process_evicted",
            ProcessError::Spawn { .. } => "process_spawn_refused",
        }
    }

    /// Checks `from` against what `info` still holds: every offset given must name a
    /// stream the process has, not before its oldest byte held, not past its end.
    pub fn check_offsets(info: &ProcessInfo, from: &Offsets) -> Result<(), ProcessError> {
        let id = info.id.to_string();
        for stream in [ProcessStream::Stdout, ProcessStream::Stderr, ProcessStream::Tty] {
            let Some(offset) = from.get(stream) else { continue };
            let Some(held) = info.stream(stream) else {
                // `Offsets::zero()` names every stream: only an offset past 0 is wrong.
                if offset == 0 {
                    continue;
                }
                return Err(ProcessError::NoStream { id, stream });
            };
            if offset < held.dropped {
                return Err(ProcessError::OffsetDropped {
                    id,
                    stream,
                    offset,
                    first: held.dropped,
                });
            }
            if offset > held.written {
                return Err(ProcessError::OffsetPastEnd {
                    id,
                    stream,
                    offset,
                    written: held.written,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "process/tests.rs"]
mod tests;
