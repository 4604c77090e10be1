//! `execute` (contract section 5) through the lease's supervisor, where the lease has one:
//! one request on its unix socket instead of an engine exec (the engine's exec path is
//! about 95% of a buffered execute's time; see `docs/benchmarks.md`).
//!
//! - **When.** The driver mounts a supervisor (a static one, a local engine), the lease has
//!   it mounted ([`crate::processes::META_AGENT`]), the request names no `user` (the
//!   supervisor runs as the container's user), and this host sees the container's
//!   processes (the tree is killed from the host). The first execute of a lease starts
//!   the supervisor (one detached exec, as a first spawn does); every later one only
//!   connects. Otherwise, and when the supervisor refuses the start (a program that is
//!   not there, a working directory that is no directory, its bounds), the engine's exec
//!   path runs the command, which gives the contract's texts for those cases.
//! - **Exactly the same semantics.** The process is held (`hold`): its output is read only
//!   as fast as this driver takes it, so nothing is dropped and the output limit, the tail
//!   or head kept, and the streaming sink see every byte in order. Secrets travel in the
//!   spawn request over the socket (never through the engine's API, never logged). A
//!   timeout kills the tree from the host as the exec path does (`SIGTERM`, the grace, then
//!   `SIGKILL`; the process group, every process still holding its output pipes, a
//!   `setsid` escapee among them, and all their descendants), then drains what is left. A
//!   command that exits while something in the background still holds its output has
//!   that tree killed once a look sees the exit (100 ms after the start, then every
//!   250 ms at most: one request on the socket each, answered while the output is still
//!   taken), as the exec path does. Output that never pauses starves neither the timeout
//!   nor those looks. A signal
//!   death is reported as the signal. A dropped call kills the tree in `Drop`.
//! - **Untrusted.** The supervisor is inside the boundary: its frames are bounded and
//!   checked by its client, and what it says only decides which processes of this
//!   container are signalled (the host checks each one's cgroup before a signal). One that
//!   breaks off mid-call (the command killed it) fails the call with
//!   `the process supervisor of lease {lease} broke off an execute: {why}`, after its
//!   tree is killed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use envrt_driver_agent::agent::client::Event;
use envrt_driver_agent::agent::proto::{ProcessInfo, Status, Stream};
use envrt_driver_agent::{AgentHost, AgentSpawnRequest, AgentStdinMode, ClientError};
use envrt_driver_api::execute::{Ending, signal_name};
use envrt_driver_api::{
    CappedBuffer, DriverError, EnvValue, ExecuteRequest, ExecuteResult, JsonMap, LeaseContext, OutputStream, PathScope,
};

use crate::DockerDriver;
use crate::process::Target;
use crate::process::hostkill::{self, Mode};

/// How long output may still be drained after the command is over or killed.
const DRAIN: Duration = Duration::from_secs(2);
/// The first look at whether the command exited while its output stays open (something
/// in the background holds it), and the longest pause between two looks: the exec path's.
const FIRST_POLL: Duration = Duration::from_millis(100);
const MAX_POLL: Duration = Duration::from_millis(250);
/// The replay window of a held execute per stream: how far the supervisor reads ahead of
/// this driver (it reserves this much of its buffer bound while the command runs).
const WINDOW: u64 = 256 * 1024;

/// Kills the command's tree from the host when dropped while armed (a cancelled call).
struct KillOnDrop {
    container: String,
    target: Target,
    armed: bool,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.armed {
            let left = hostkill::apply(&self.container, &self.target, Mode::Kill);
            tracing::debug!(
                container = self.container,
                left,
                "dropped execute: killed its tree from the host"
            );
        }
    }
}

struct Collector<'a> {
    request: &'a ExecuteRequest,
    stdout: CappedBuffer,
    stderr: CappedBuffer,
}

impl Collector<'_> {
    fn deliver(&mut self, stream: Stream, bytes: &[u8]) {
        let stream = match stream {
            Stream::Stderr => OutputStream::Stderr,
            Stream::Stdout | Stream::Tty => OutputStream::Stdout,
        };
        if let Some(sink) = &self.request.sink {
            sink.on_chunk(stream, bytes);
        }
        match stream {
            OutputStream::Stdout => self.stdout.push(bytes),
            OutputStream::Stderr => self.stderr.push(bytes),
        }
    }
}

/// How the output stream ended.
enum End {
    Exit(ProcessInfo),
    Broken(String),
    TimedOut,
    Holders,
}

impl DockerDriver {
    /// Whether this host sees the containers' processes (a local engine), looked at once.
    fn host_sees(&self, container: &str) -> bool {
        *self.host_sees.get_or_init(|| hostkill::sees(container))
    }

    /// Runs `request` through the lease's supervisor; gives the request back (`Err`) when
    /// the engine's exec path must run it instead.
    pub(crate) async fn execute_through_agent(
        &self,
        context: &LeaseContext,
        container: &str,
        workspace: &str,
        mut request: ExecuteRequest,
    ) -> Result<Result<ExecuteResult, ExecuteRequest>, DriverError> {
        if request.user.is_some()
            || self.agent.is_err()
            || !crate::processes::mounted(&context.lease)
            || !self.host_sees(container)
        {
            return Ok(Err(request));
        }
        // The same checks and texts as the exec path.
        crate::execute::check_request(&request)?;
        let cwd = PathScope::WholeEnvironment.resolve(workspace, request.cwd.as_deref().unwrap_or(workspace))?;
        let client = match AgentHost::agent(self, context, true).await {
            Ok(Some(client)) => Arc::new(client),
            Ok(None) => return Ok(Err(request)),
            Err(error) => {
                tracing::debug!(%error, "no process supervisor for an execute; the exec path runs it");
                return Ok(Err(request));
            }
        };
        let started = std::time::Instant::now();
        let mut argv = Vec::with_capacity(request.args.len() + 1);
        argv.push(request.command.clone());
        argv.extend(request.args.iter().cloned());
        let env: BTreeMap<String, String> = request
            .env
            .iter()
            .map(|(name, value)| {
                let value = match value {
                    EnvValue::Plain(plain) => plain.clone(),
                    EnvValue::Secret(secret) => secret.expose().to_owned(),
                };
                (name.clone(), value)
            })
            .collect();
        let stdin = request.stdin.take().unwrap_or_default();
        let spawn = AgentSpawnRequest {
            argv,
            cwd: Some(cwd),
            env,
            stdin: if stdin.is_empty() {
                AgentStdinMode::Null
            } else {
                AgentStdinMode::Piped
            },
            keep: Some(WINDOW),
            hold: true,
            ..AgentSpawnRequest::default()
        };
        let lease = &context.lease.id;
        let info = match client.spawn(spawn).await {
            Ok(info) => info,
            Err(ClientError::Refused(text)) => {
                tracing::debug!(text, "the supervisor refused an execute; the exec path runs it");
                request.stdin = (!stdin.is_empty()).then_some(stdin);
                return Ok(Err(request));
            }
            Err(ClientError::Broken(why)) => return Err(broke_off(lease, &why)),
        };
        let target = Target {
            pid: u32::try_from(info.pid).unwrap_or(0),
            pipes: info.pipes.clone(),
        };
        let mut guard = KillOnDrop {
            container: container.to_owned(),
            target: target.clone(),
            armed: true,
        };
        let writer = (!stdin.is_empty()).then(|| {
            let client = Arc::clone(&client);
            tokio::spawn(async move {
                // Refused once the command exited without reading it all: as with a pipe.
                if client.write_stdin(info.id, &stdin).await.is_ok() {
                    let _ = client.close_stdin(info.id).await;
                }
            })
        });
        let mut output = client
            .output(info.id, Default::default())
            .await
            .map_err(|error| broke_off(lease, &error.to_string()))?;
        let mut collector = Collector {
            request: &request,
            stdout: request.output_buffer(),
            stderr: request.output_buffer(),
        };
        let deadline = request.timeout.map(|t| Instant::now() + t);
        let mut poll_delay = FIRST_POLL;
        let mut next_poll = Some(Instant::now() + poll_delay);
        // A look at the command's status in flight. It runs on a task of its own while
        // this loop goes on taking output: its answer comes on the same connection as the
        // chunks, behind any this loop has not taken yet.
        let mut look: Option<tokio::task::JoinHandle<Result<ProcessInfo, ClientError>>> = None;
        let end = loop {
            // The clocks first: output that never pauses must not starve them.
            tokio::select! {
                biased;
                _ = sleep_until_opt(deadline) => break End::TimedOut,
                _ = sleep_until_opt(next_poll), if look.is_none() => {
                    // The output stays open while something in the background holds it:
                    // notice the command's own exit apart.
                    let client = Arc::clone(&client);
                    let id = info.id;
                    look = Some(tokio::spawn(async move { client.info(id).await }));
                }
                answer = async { look.as_mut().expect("guarded by the branch condition").await }, if look.is_some() => {
                    look = None;
                    match answer {
                        Ok(Ok(now)) if now.status != Status::Running => break End::Holders,
                        Ok(Ok(_)) => {
                            poll_delay = (poll_delay * 2).min(MAX_POLL);
                            next_poll = Some(Instant::now() + poll_delay);
                        }
                        // A held process leaves the table only once its final state went
                        // to its reader, this output stream: the exit is on its way here,
                        // and the stream ends with it (or breaks, which is caught below).
                        Ok(Err(ClientError::Refused(_))) => next_poll = None,
                        Ok(Err(error)) => break End::Broken(error.to_string()),
                        Err(error) => break End::Broken(format!("its status look failed: {error}")),
                    }
                }
                event = output.next() => match event {
                    Some(Ok(Event::Chunk(chunk))) => collector.deliver(chunk.stream, &chunk.bytes),
                    Some(Ok(Event::Exit(info))) => break End::Exit(info),
                    Some(Err(error)) => break End::Broken(error.to_string()),
                    None => break End::Broken("its output ended without the exit".to_owned()),
                },
            }
        };
        if let Some(look) = look {
            look.abort();
        }
        let mut metadata = JsonMap::new();
        metadata.insert("containerId".into(), container.into());
        metadata.insert("pid".into(), info.pid.into());
        metadata.insert("supervisor".into(), true.into());
        let timed_out = matches!(end, End::TimedOut);
        let last = match end {
            End::Exit(info) => Some(info),
            End::Broken(why) => {
                crate::process::kill_tree(&self.engine, container, &target, self.config.kill_grace, false).await?;
                guard.armed = false;
                return Err(broke_off(lease, &why));
            }
            End::TimedOut | End::Holders => {
                let survivors =
                    crate::process::kill_tree(&self.engine, container, &target, self.config.kill_grace, timed_out)
                        .await?;
                metadata.insert("killedTree".into(), true.into());
                metadata.insert("survivors".into(), survivors.into());
                let deadline = Instant::now() + DRAIN;
                loop {
                    match tokio::time::timeout_at(deadline, output.next()).await {
                        Ok(Some(Ok(Event::Chunk(chunk)))) => collector.deliver(chunk.stream, &chunk.bytes),
                        Ok(Some(Ok(Event::Exit(info)))) => break Some(info),
                        _ => break None,
                    }
                }
            }
        };
        guard.armed = false;
        if let Some(writer) = writer {
            writer.abort();
        }
        // No longer read: chunks still on their way must not hold up the status's answer.
        drop(output);
        let status = match last {
            Some(info) => info.status,
            None => client.info(info.id).await.map_or(Status::Running, |info| info.status),
        };
        let (exit_code, signal) = match status {
            Status::Signalled { signal } => (None, Some(signal_name(signal))),
            Status::Exited { code } if timed_out && code > 128 => (None, Some(signal_name(code - 128))),
            Status::Exited { code } => (Some(code), None),
            _ => (None, None),
        };
        let ending = Ending {
            exit_code,
            signal,
            timed_out,
        };
        Ok(Ok(ExecuteResult::from_capped(
            ending,
            collector.stdout,
            collector.stderr,
            started.elapsed(),
            metadata,
        )))
    }
}

fn broke_off(lease: &str, why: &str) -> DriverError {
    DriverError::other(format!(
        "the process supervisor of lease {lease} broke off an execute: {why}"
    ))
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
