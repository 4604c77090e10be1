//! The supervisor's answers as the driver API's types: process infos, statuses, output
//! events, and its refusals as the contract's typed errors.

use async_trait::async_trait;
use envrt_agent::client::{Client, ClientError, Event, Output};
use envrt_agent::proto;
use envrt_driver_api::process::{
    OutputChunk, OutputEvent, ProcessError, ProcessId, ProcessInfo, ProcessStatus, ProcessStream, StreamInfo,
};
use envrt_driver_api::{DriverError, ProcessOutput, Timestamp};

/// Clock ticks per second of `/proc/PID/stat` start times (USER_HZ, 100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

/// This machine's boot time, seconds since the epoch, from `/proc/stat` (0 when unread).
pub(crate) fn local_boot_time() -> u64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|stat| {
            stat.lines()
                .find_map(|line| line.strip_prefix("btime ")?.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn stream_of(stream: proto::Stream) -> ProcessStream {
    match stream {
        proto::Stream::Stdout => ProcessStream::Stdout,
        proto::Stream::Stderr => ProcessStream::Stderr,
        proto::Stream::Tty => ProcessStream::Tty,
    }
}

pub(crate) fn status_of(status: proto::Status) -> ProcessStatus {
    match status {
        proto::Status::Running => ProcessStatus::Running,
        proto::Status::Exited { code } => ProcessStatus::Exited { code },
        proto::Status::Signalled { signal } => ProcessStatus::Signalled { signal },
    }
}

/// The facade's view of a supervisor's process; `boot` is the boot time (seconds since the
/// epoch) of the machine the supervisor runs on.
pub(crate) fn info_of(lease: &str, boot: u64, info: proto::ProcessInfo) -> ProcessInfo {
    let millis = boot
        .saturating_mul(1000)
        .saturating_add(info.start_time.saturating_mul(1000) / TICKS_PER_SECOND);
    ProcessInfo {
        id: ProcessId::new(lease, info.id),
        pid: info.pid,
        started_at: Timestamp(millis),
        argv: info.argv,
        tty: info.tty,
        status: status_of(info.status),
        streams: info
            .streams
            .into_iter()
            .map(|s| StreamInfo {
                stream: stream_of(s.stream),
                written: s.written,
                dropped: s.dropped,
                keep: s.keep,
            })
            .collect(),
    }
}

/// The agent's numbers in an offset-refusal text, `offset O of process N's S is no longer
/// held: the first offset still held is F (...)`.
fn dropped_refusal(lease: &str, text: &str) -> Option<ProcessError> {
    let rest = text.strip_prefix("offset ")?;
    let (offset, rest) = rest.split_once(" of process ")?;
    let (number, rest) = rest.split_once("'s ")?;
    let (stream, rest) = rest.split_once(" is no longer held: the first offset still held is ")?;
    let (first, _) = rest.split_once(' ')?;
    Some(ProcessError::OffsetDropped {
        id: ProcessId::new(lease, number.parse().ok()?).to_string(),
        stream: stream.parse().ok()?,
        offset: offset.parse().ok()?,
        first: first.parse().ok()?,
    })
}

/// The agent's numbers in its eviction text, `process N ended and was evicted: the agent
/// holds at most B processes and evicts the oldest ended first`.
pub(crate) fn evicted_refusal(lease: &str, text: &str) -> Option<ProcessError> {
    let rest = text.strip_prefix("process ")?;
    let (number, rest) = rest.split_once(" ended and was evicted: the agent holds at most ")?;
    let bound = rest.strip_suffix(" processes and evicts the oldest ended first")?;
    Some(ProcessError::Evicted {
        id: ProcessId::new(lease, number.parse().ok()?).to_string(),
        bound: bound.parse().ok()?,
    })
}

/// A supervisor's failure as the driver reports it: its refusals typed where the contract
/// has a text for them (`number` is the process asked about; `None` for a spawn), a broken
/// connection as an unavailable backend.
pub fn lift(lease: &str, number: Option<u64>, error: ClientError) -> DriverError {
    match error {
        ClientError::Refused(text) => {
            let id = number.map(|n| ProcessId::new(lease, n).to_string()).unwrap_or_default();
            if let Some(refusal) = dropped_refusal(lease, &text).or_else(|| evicted_refusal(lease, &text)) {
                return refusal.into();
            }
            if let Some(signal) = text.strip_prefix("unknown signal \"").and_then(|s| s.strip_suffix('"')) {
                return ProcessError::UnknownSignal {
                    signal: signal.to_owned(),
                }
                .into();
            }
            if text.ends_with(" was not started with piped stdin") {
                return ProcessError::NotPiped { id }.into();
            }
            if number.is_none() {
                return ProcessError::Spawn { reason: text }.into();
            }
            DriverError::other(format!("the process supervisor of lease {lease} refused: {text}"))
        }
        ClientError::Broken(text) => DriverError::Unavailable {
            message: format!("The process supervisor of lease {lease} is not reachable: {text}"),
            source: None,
        },
    }
}

/// A supervisor's output stream, holding its connection open.
pub(crate) struct AgentOutput {
    pub(crate) lease: String,
    pub(crate) number: u64,
    pub(crate) boot: u64,
    pub(crate) _client: Client,
    pub(crate) output: Output,
    pub(crate) ended: bool,
}

#[async_trait]
impl ProcessOutput for AgentOutput {
    async fn next(&mut self) -> Result<Option<OutputEvent>, DriverError> {
        if self.ended {
            return Ok(None);
        }
        match self.output.next().await {
            Some(Ok(Event::Chunk(chunk))) => Ok(Some(OutputEvent::Chunk(OutputChunk {
                stream: stream_of(chunk.stream),
                offset: chunk.offset,
                bytes: chunk.bytes,
            }))),
            Some(Ok(Event::Exit(info))) => {
                self.ended = true;
                Ok(Some(OutputEvent::Exit(info_of(&self.lease, self.boot, info))))
            }
            Some(Err(error)) => {
                self.ended = true;
                Err(lift(&self.lease, Some(self.number), error))
            }
            None => {
                self.ended = true;
                Err(DriverError::Unavailable {
                    message: format!(
                        "The process supervisor of lease {} ended the output of process {} before its exit.",
                        self.lease, self.number
                    ),
                    source: None,
                })
            }
        }
    }
}
