//! Execute input and result (contract section 5), and the capped output buffer every
//! driver uses.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::JsonMap;
use crate::secret::EnvValue;

mod validate;
pub use validate::{ExecuteRules, NameRules, Wording, is_portable_name, is_shell_name};

/// Default cap on each captured stream: 16 MiB.
pub const DEFAULT_OUTPUT_LIMIT: usize = 16 * 1024 * 1024;

/// Which output stream a chunk came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// Which part of a stream's output a capped capture keeps when the stream passes the cap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputKeep {
    /// The first bytes (what came first is kept, the rest dropped): the default.
    #[default]
    Head,
    /// The last bytes (the beginning is dropped): what an agent reading an error at the
    /// end of a long log wants.
    Tail,
}

/// Receives output chunks while a command runs. Called from the driver's task: keep it
/// quick. The sink sees every byte, including bytes past the capture cap.
pub trait OutputSink: Send + Sync {
    /// One chunk of output, in order per stream.
    fn on_chunk(&self, stream: OutputStream, chunk: &[u8]);
}

impl<F> OutputSink for F
where
    F: Fn(OutputStream, &[u8]) + Send + Sync,
{
    fn on_chunk(&self, stream: OutputStream, chunk: &[u8]) {
        self(stream, chunk)
    }
}

/// A command to run on a lease.
#[derive(Clone, Default)]
pub struct ExecuteRequest {
    /// The program (no shell unless the caller runs one).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Working directory, environment-side; the lease's workspace when `None`.
    pub cwd: Option<String>,
    /// Environment variables; the host's are not inherited beyond a driver's allow-list.
    pub env: BTreeMap<String, EnvValue>,
    /// Bytes written to stdin, followed by EOF. `None` gives an empty stdin.
    pub stdin: Option<Vec<u8>>,
    /// Kill the whole process tree after this long.
    pub timeout: Option<Duration>,
    /// Cap per captured stream; [`DEFAULT_OUTPUT_LIMIT`] when `None`.
    pub max_output_bytes: Option<usize>,
    /// Which part of a stream past the cap is kept; the head by default.
    pub keep: OutputKeep,
    /// Receives chunks as they arrive.
    pub sink: Option<Arc<dyn OutputSink>>,
    /// Who the command runs as, environment-side (`NAME`, `UID`, `NAME:GROUP` or
    /// `UID:GID`); the driver's default user when `None`. A driver that cannot honour it
    /// MUST refuse with [`DriverError::UserRefused`](crate::DriverError::UserRefused)
    /// rather than run the command as someone else.
    pub user: Option<String>,
}

impl ExecuteRequest {
    /// A request for `command` with `args`.
    pub fn new<I, S>(command: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ExecuteRequest {
            command: command.into(),
            args: args.into_iter().map(Into::into).collect(),
            ..Default::default()
        }
    }

    /// The effective per-stream cap.
    pub fn output_limit(&self) -> usize {
        self.max_output_bytes.unwrap_or(DEFAULT_OUTPUT_LIMIT)
    }

    /// An empty capture buffer for one stream of this request: its cap and what it keeps.
    pub fn output_buffer(&self) -> CappedBuffer {
        CappedBuffer::keeping(self.output_limit(), self.keep)
    }
}

impl fmt::Debug for ExecuteRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecuteRequest")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("env", &self.env)
            .field("stdin_len", &self.stdin.as_ref().map(Vec::len))
            .field("timeout", &self.timeout)
            .field("max_output_bytes", &self.max_output_bytes)
            .field("keep", &self.keep)
            .field("sink", &self.sink.is_some())
            .field("user", &self.user)
            .finish()
    }
}

/// What a command did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecuteResult {
    /// The exit code; `None` when a signal ended the command.
    pub exit_code: Option<i32>,
    /// The signal name (`SIGKILL`, ...) when a signal ended the command.
    pub signal: Option<String>,
    /// Whether the timeout fired.
    pub timed_out: bool,
    /// Captured stdout, at most the cap.
    pub stdout: Vec<u8>,
    /// Captured stderr, at most the cap.
    pub stderr: Vec<u8>,
    /// Whether stdout passed the cap.
    pub stdout_truncated: bool,
    /// Whether stderr passed the cap.
    pub stderr_truncated: bool,
    /// Wall time.
    pub duration: Duration,
    /// Driver-specific facts.
    pub metadata: JsonMap,
}

/// How a command ended, as a driver saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ending {
    /// The exit code; `None` when a signal ended the command.
    pub exit_code: Option<i32>,
    /// The signal name when a signal ended it.
    pub signal: Option<String>,
    /// Whether the timeout fired.
    pub timed_out: bool,
}

impl ExecuteResult {
    /// The result of a command that ended as `ending`, whose output went into the two
    /// capped buffers: the one way every driver assembles a result, so the truncation
    /// flags always say what the buffers dropped.
    pub fn from_capped(
        ending: Ending,
        stdout: CappedBuffer,
        stderr: CappedBuffer,
        duration: Duration,
        metadata: JsonMap,
    ) -> Self {
        let (stdout, stdout_truncated) = stdout.into_parts();
        let (stderr, stderr_truncated) = stderr.into_parts();
        ExecuteResult {
            exit_code: ending.exit_code,
            signal: ending.signal,
            timed_out: ending.timed_out,
            stdout,
            stderr,
            stdout_truncated,
            stderr_truncated,
            duration,
            metadata,
        }
    }

    /// `exit_code == Some(0)` and no timeout.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }
}

/// A byte buffer that keeps at most `cap` bytes — the first ones, or with
/// [`OutputKeep::Tail`] the last ones — and remembers whether more came.
#[derive(Clone, Debug, Default)]
pub struct CappedBuffer {
    data: Vec<u8>,
    cap: usize,
    keep: OutputKeep,
    truncated: bool,
}

impl CappedBuffer {
    /// An empty buffer holding at most the first `cap` bytes.
    pub fn new(cap: usize) -> Self {
        CappedBuffer::keeping(cap, OutputKeep::Head)
    }

    /// An empty buffer holding at most `cap` bytes, the head or the tail.
    pub fn keeping(cap: usize, keep: OutputKeep) -> Self {
        CappedBuffer {
            data: Vec::new(),
            cap,
            keep,
            truncated: false,
        }
    }

    /// Appends the chunk: the head keeps what fits; the tail keeps the newest bytes (it
    /// holds up to twice the cap between trims, so a long stream costs linear time). Sets
    /// the truncation flag when anything is dropped.
    pub fn push(&mut self, chunk: &[u8]) {
        match self.keep {
            OutputKeep::Head => {
                let room = self.cap.saturating_sub(self.data.len());
                if chunk.len() > room {
                    self.truncated = true;
                }
                self.data.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            OutputKeep::Tail => {
                if chunk.len() >= self.cap {
                    self.truncated |= !self.data.is_empty() || chunk.len() > self.cap;
                    self.data.clear();
                    self.data.extend_from_slice(&chunk[chunk.len() - self.cap..]);
                    return;
                }
                self.data.extend_from_slice(chunk);
                if self.data.len() > self.cap.saturating_mul(2) {
                    self.trim();
                }
            }
        }
    }

    /// Drops all but the last `cap` bytes (tail mode).
    fn trim(&mut self) {
        if self.data.len() > self.cap {
            let excess = self.data.len() - self.cap;
            self.data.drain(..excess);
            self.truncated = true;
        }
    }

    /// Whether anything was dropped.
    pub fn truncated(&self) -> bool {
        self.truncated || self.data.len() > self.cap
    }

    /// The kept bytes and the truncation flag.
    pub fn into_parts(mut self) -> (Vec<u8>, bool) {
        self.trim();
        (self.data, self.truncated)
    }
}

/// The name of a signal number (`SIGKILL` for 9), or `SIG{n}` for an unnamed one.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        17 => "SIGCHLD",
        18 => "SIGCONT",
        19 => "SIGSTOP",
        20 => "SIGTSTP",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => return format!("SIG{signal}"),
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {

    #[test]
    fn results_from_capped_buffers_carry_the_truncation() {
        let mut out = CappedBuffer::new(3);
        out.push(b"abcdef");
        let mut err = CappedBuffer::new(3);
        err.push(b"xy");
        let ending = Ending {
            exit_code: Some(4),
            signal: None,
            timed_out: false,
        };
        let r = ExecuteResult::from_capped(ending, out, err, Duration::from_millis(7), JsonMap::new());
        assert_eq!((r.stdout.as_slice(), r.stdout_truncated), (&b"abc"[..], true));
        assert_eq!((r.stderr.as_slice(), r.stderr_truncated), (&b"xy"[..], false));
        assert_eq!((r.exit_code, r.duration), (Some(4), Duration::from_millis(7)));
    }
    use super::*;

    #[test]
    fn capped_buffer_keeps_the_prefix_and_flags_truncation() {
        let mut b = CappedBuffer::new(5);
        b.push(b"abc");
        assert!(!b.truncated());
        b.push(b"def");
        b.push(b"");
        assert_eq!(b.clone().into_parts(), (b"abcde".to_vec(), true));
        let mut exact = CappedBuffer::new(3);
        exact.push(b"abc");
        assert_eq!(exact.into_parts(), (b"abc".to_vec(), false));
        let mut zero = CappedBuffer::new(0);
        zero.push(b"x");
        assert_eq!(zero.into_parts(), (Vec::new(), true));
    }

    #[test]
    fn capped_buffer_in_tail_mode_keeps_the_last_bytes() {
        let tail = |chunks: &[&[u8]], cap: usize| {
            let mut b = CappedBuffer::keeping(cap, OutputKeep::Tail);
            for chunk in chunks {
                b.push(chunk);
            }
            let flagged = b.truncated();
            let parts = b.into_parts();
            assert_eq!(flagged, parts.1, "truncated() agrees with into_parts");
            parts
        };
        assert_eq!(tail(&[b"abc", b"def"], 5), (b"bcdef".to_vec(), true));
        assert_eq!(tail(&[b"abc"], 5), (b"abc".to_vec(), false));
        assert_eq!(tail(&[b"abc", b"de"], 5), (b"abcde".to_vec(), false));
        assert_eq!(tail(&[b"ab", b"0123456789"], 3), (b"789".to_vec(), true));
        assert_eq!(tail(&[b"abc"], 3), (b"abc".to_vec(), false));
        assert_eq!(tail(&[b"x"], 0), (Vec::new(), true));
        // Many small chunks: the trims keep the newest bytes in order.
        let many: Vec<Vec<u8>> = (0..1000u32).map(|i| format!("{i},").into_bytes()).collect();
        let refs: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
        let (kept, cut) = tail(&refs, 8);
        assert_eq!((kept.as_slice(), cut), (&b"998,999,"[..], true));
        let request = ExecuteRequest {
            max_output_bytes: Some(2),
            keep: OutputKeep::Tail,
            ..ExecuteRequest::new("true", [""; 0])
        };
        let mut b = request.output_buffer();
        b.push(b"xyz");
        assert_eq!(b.into_parts(), (b"yz".to_vec(), true));
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(40), "SIG40");
    }
}
