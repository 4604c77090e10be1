//! Persistent process sessions on the local driver: one supervisor (`envrt-agent`) per
//! lease, started on the lease's first `spawn` (see [`agent`]), holds the lease's
//! processes, their replay buffers and exit statuses; every verb is one request to it
//! over its unix socket. A process lives until it exits or the lease ends: release,
//! destroy, expiry and `gc` kill the lease's containment (the agent and everything it
//! started, `setsid` escapees included) and remove the agent's directory.
//!
//! Everything the agent says is untrusted: the client bounds frames and checks every
//! chunk's offset; this module maps its refusals onto the contract's typed ones and
//! rebuilds each process's id from the lease it asked.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use envrt_agent::client::{Client, ClientError, Event, Output};
use envrt_agent::proto;
use envrt_driver_api::capability::{CapabilityKey, SupportSet};
use envrt_driver_api::process::{
    Offsets, OutputChunk, OutputEvent, ProcessError, ProcessId, ProcessInfo, ProcessStatus, ProcessStream,
    SpawnRequest, StdinMode, StreamInfo,
};
use envrt_driver_api::{DriverError, LeaseContext, ProcessOutput, ProcessSessions, Timestamp};

use crate::LocalDriver;

pub(crate) mod agent;

/// `set` with `persistentProcessSessions` when the supervisor's binary is found: the
/// capability is granted only where a spawn can work.
pub(crate) fn with_sessions(mut set: SupportSet) -> SupportSet {
    if agent::locate().is_ok() {
        set.insert(CapabilityKey::PersistentProcessSessions);
    }
    set
}

/// Clock ticks per second of `/proc/PID/stat` start times (USER_HZ, 100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

/// The boot time, seconds since the epoch, from `/proc/stat`.
fn boot_time() -> u64 {
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

fn status_of(status: proto::Status) -> ProcessStatus {
    match status {
        proto::Status::Running => ProcessStatus::Running,
        proto::Status::Exited { code } => ProcessStatus::Exited { code },
        proto::Status::Signalled { signal } => ProcessStatus::Signalled { signal },
    }
}

/// The facade's view of an agent's process.
fn info_of(lease: &str, info: proto::ProcessInfo) -> ProcessInfo {
    let millis = boot_time() * 1000 + info.start_time * 1000 / TICKS_PER_SECOND;
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

/// An agent's failure as the driver reports it: its refusals typed where the contract has
/// a text for them, a broken connection as an unavailable backend.
fn lift(lease: &str, number: Option<u64>, error: ClientError) -> DriverError {
    match error {
        ClientError::Refused(text) => {
            let id = number.map(|n| ProcessId::new(lease, n).to_string()).unwrap_or_default();
            if let Some(refusal) = dropped_refusal(lease, &text) {
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

impl LocalDriver {
    /// The socket of the lease's agent.
    fn agent_socket(&self, lease: &str) -> Result<PathBuf, DriverError> {
        agent::socket(self.root(), lease)
    }

    /// A connection to the lease's running agent.
    async fn agent(&self, context: &LeaseContext) -> Result<Client, DriverError> {
        let socket = self.agent_socket(&context.lease.id)?;
        Client::connect(&socket)
            .await
            .map_err(|e| lift(&context.lease.id, Some(0), e))
    }

    /// A connection to the lease's agent, started first when none runs.
    async fn agent_or_start(&self, context: &LeaseContext) -> Result<Client, DriverError> {
        let lease = context.lease.id.as_str();
        let socket = self.agent_socket(lease)?;
        if let Ok(client) = Client::connect(&socket).await {
            return Ok(client);
        }
        let workspace = self.workspace_of(lease)?;
        if !workspace.is_dir() {
            return Err(DriverError::ResourceGone {
                id: crate::workspace::lease_dir_name(lease)?,
            });
        }
        let _lock = lock(self.root(), lease).await?;
        if let Ok(client) = Client::connect(&socket).await {
            return Ok(client);
        }
        agent::start(&agent::Start {
            root: self.root(),
            lease,
            workspace: &workspace,
            env: self.agent_env(&workspace),
            containment: self.containment_mode(),
        })
        .await?;
        Client::connect(&socket).await.map_err(|e| lift(lease, Some(0), e))
    }

    /// The agent's environment, which every process inherits under its own variables.
    fn agent_env(&self, workspace: &Path) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = self
            .config()
            .env_allowlist
            .iter()
            .filter_map(|name| std::env::var(name).ok().map(|value| (name.clone(), value)))
            .collect();
        if !env.iter().any(|(name, _)| name == "PATH") {
            env.push(("PATH".into(), crate::execute::DEFAULT_PATH.into()));
        }
        env.push(("HOME".into(), workspace.to_string_lossy().into_owned()));
        env
    }
}

/// The lease's start lock (`flock` on a file in the agent's directory), so that two
/// programs spawning at once start one agent.
async fn lock(root: &Path, lease: &str) -> Result<std::fs::File, DriverError> {
    let dir = agent::dir(root, lease)?;
    match crate::workspace::create_private_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(DriverError::io(format!("cannot create {}", dir.display()), e)),
    }
    let path = dir.join("start.lock");
    tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
        Ok::<_, std::io::Error>(file)
    })
    .await
    .map_err(|e| DriverError::other(format!("the start lock task failed: {e}")))?
    .map_err(|e| DriverError::io("cannot lock the process supervisor's start", e))
}

/// An agent's output stream, holding its connection open.
struct LocalOutput {
    lease: String,
    number: u64,
    _client: Client,
    output: Output,
    ended: bool,
}

#[async_trait]
impl ProcessOutput for LocalOutput {
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
                Ok(Some(OutputEvent::Exit(info_of(&self.lease, info))))
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

fn request_of(
    driver: &LocalDriver,
    context: &LeaseContext,
    request: SpawnRequest,
) -> Result<proto::SpawnRequest, DriverError> {
    let workspace = driver.workspace_of(&context.lease.id)?;
    let cwd = match &request.cwd {
        None => workspace.clone(),
        Some(cwd) => driver.resolve_cwd(&workspace, cwd)?,
    };
    if !cwd.is_dir() {
        return Err(DriverError::missing_cwd(request.cwd.as_deref().unwrap_or_default()));
    }
    Ok(proto::SpawnRequest {
        argv: request.argv,
        cwd: Some(crate::workspace::path_str(&cwd)?.to_owned()),
        env: request
            .env
            .iter()
            .map(|(name, value)| (name.clone(), value.expose().to_owned()))
            .collect(),
        clear_env: false,
        stdin: match request.stdin {
            StdinMode::Null => proto::StdinMode::Null,
            StdinMode::Piped => proto::StdinMode::Piped,
        },
        tty: request.tty.map(|size| proto::TtySize {
            rows: size.rows,
            cols: size.cols,
        }),
        keep: request.keep,
        timeout_ms: request
            .timeout
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        idempotency_key: request.idempotency_key,
    })
}

fn agent_offsets(from: &Offsets) -> proto::Offsets {
    proto::Offsets {
        stdout: from.stdout,
        stderr: from.stderr,
        tty: from.tty,
    }
}

#[async_trait]
impl ProcessSessions for LocalDriver {
    async fn spawn(&self, context: &LeaseContext, request: SpawnRequest) -> Result<ProcessInfo, DriverError> {
        let lease = &context.lease.id;
        let request = request_of(self, context, request)?;
        let key = request.idempotency_key.clone();
        let client = self.agent_or_start(context).await?;
        let info = client.spawn(request).await.map_err(|e| match (&e, key) {
            (ClientError::Refused(text), Some(key)) if text.ends_with(" with a different request") => {
                match text
                    .rsplit_once(" for process ")
                    .and_then(|(_, rest)| rest.split_once(' '))
                {
                    Some((number, _)) if number.parse::<u64>().is_ok() => ProcessError::IdempotencyConflict {
                        key,
                        id: format!("{lease}/{number}"),
                    }
                    .into(),
                    _ => lift(lease, None, e),
                }
            }
            _ => lift(lease, None, e),
        })?;
        Ok(info_of(lease, info))
    }

    async fn processes(&self, context: &LeaseContext) -> Result<Vec<ProcessInfo>, DriverError> {
        let lease = &context.lease.id;
        // No agent yet: the lease has spawned nothing.
        if !self.agent_socket(lease)?.exists() {
            return Ok(Vec::new());
        }
        let client = self.agent(context).await?;
        let list = client.list().await.map_err(|e| lift(lease, Some(0), e))?;
        Ok(list.into_iter().map(|info| info_of(lease, info)).collect())
    }

    async fn process(&self, context: &LeaseContext, number: u64) -> Result<Option<ProcessInfo>, DriverError> {
        let lease = &context.lease.id;
        if !self.agent_socket(lease)?.exists() {
            return Ok(None);
        }
        let client = self.agent(context).await?;
        match client.info(number).await {
            Ok(info) if info.id == number => Ok(Some(info_of(lease, info))),
            Ok(other) => Err(DriverError::other(format!(
                "the process supervisor of lease {lease} answered process {} for process {number}",
                other.id
            ))),
            // The agent refuses `info` only for a process it does not hold.
            Err(ClientError::Refused(_)) => Ok(None),
            Err(error) => Err(lift(lease, Some(number), error)),
        }
    }

    async fn output(
        &self,
        context: &LeaseContext,
        number: u64,
        from: &Offsets,
    ) -> Result<Box<dyn ProcessOutput>, DriverError> {
        let lease = &context.lease.id;
        let client = self.agent(context).await?;
        let output = client
            .output(number, agent_offsets(from))
            .await
            .map_err(|e| lift(lease, Some(number), e))?;
        Ok(Box::new(LocalOutput {
            lease: lease.clone(),
            number,
            _client: client,
            output,
            ended: false,
        }))
    }

    async fn write_stdin(&self, context: &LeaseContext, number: u64, bytes: &[u8]) -> Result<(), DriverError> {
        let client = self.agent(context).await?;
        client
            .write_stdin(number, bytes)
            .await
            .map_err(|e| lift(&context.lease.id, Some(number), e))
    }

    async fn close_stdin(&self, context: &LeaseContext, number: u64) -> Result<(), DriverError> {
        let client = self.agent(context).await?;
        client
            .close_stdin(number)
            .await
            .map_err(|e| lift(&context.lease.id, Some(number), e))
    }

    async fn signal(&self, context: &LeaseContext, number: u64, signal: &str) -> Result<ProcessInfo, DriverError> {
        let lease = &context.lease.id;
        let client = self.agent(context).await?;
        let info = client
            .signal(number, signal)
            .await
            .map_err(|e| lift(lease, Some(number), e))?;
        Ok(info_of(lease, info))
    }

    async fn resize(&self, context: &LeaseContext, number: u64, rows: u16, cols: u16) -> Result<(), DriverError> {
        let client = self.agent(context).await?;
        client
            .resize(number, rows, cols)
            .await
            .map_err(|e| lift(&context.lease.id, Some(number), e))
    }

    async fn wait(
        &self,
        context: &LeaseContext,
        number: u64,
        timeout: Option<Duration>,
    ) -> Result<ProcessStatus, DriverError> {
        let client = self.agent(context).await?;
        let status = client
            .wait(number, timeout)
            .await
            .map_err(|e| lift(&context.lease.id, Some(number), e))?;
        Ok(status_of(status))
    }
}
