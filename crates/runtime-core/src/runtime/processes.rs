//! The process verbs of the facade (contract section 9): spawn a process that outlives
//! its caller, list and find processes, read their output from absolute offsets, feed
//! stdin, signal, resize, wait. Each passes the gate under `persistentProcessSessions`;
//! the verbs on one process find it by its id (`{lease id}/{n}`) in the store first, and
//! check what the contract refuses (an exited process, no terminal, an offset no longer
//! held or past the end) before the driver is called, so every driver refuses alike.

use std::time::Duration;

use crate::driver::{ProcessOutput, ProcessSessions};
use crate::error::{DriverError, RuntimeError};
use crate::process::{Offsets, OutputEvent, ProcessError, ProcessId, ProcessInfo, ProcessStatus, SpawnRequest};

use super::gate::{Operation, gate};
use super::reader::ReaderKeeper;
use super::{EnvironmentRuntime, Resolved};

/// A live output stream of one process: chunks in order, then the exit.
pub struct ProcessOutputStream {
    id: ProcessId,
    inner: Box<dyn ProcessOutput>,
    done: bool,
    /// Resets the lease's idle clock while the stream is open (an attached reader is
    /// activity); dropped at the exit and with the stream.
    keeper: Option<ReaderKeeper>,
}

impl std::fmt::Debug for ProcessOutputStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessOutputStream")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl ProcessOutputStream {
    /// The process read.
    pub fn id(&self) -> &ProcessId {
        &self.id
    }

    /// The next chunk, or the exit (the process's final state); `None` after the exit.
    pub async fn next(&mut self) -> Result<Option<OutputEvent>, RuntimeError> {
        if self.done {
            return Ok(None);
        }
        match self.inner.next().await.map_err(lift)? {
            Some(OutputEvent::Exit(mut info)) => {
                self.done = true;
                self.keeper = None;
                info.id = self.id.clone();
                Ok(Some(OutputEvent::Exit(info)))
            }
            Some(chunk) => Ok(Some(chunk)),
            None => {
                self.done = true;
                self.keeper = None;
                Ok(None)
            }
        }
    }
}

/// A driver's process refusal becomes the facade's own variant; anything else stays the
/// driver's error.
fn lift(error: DriverError) -> RuntimeError {
    match error {
        DriverError::Process(refusal) => RuntimeError::Process(refusal),
        other => RuntimeError::Driver(other),
    }
}

/// The id the facade reports: always the lease's, whatever number the driver gave.
fn owned(mut info: ProcessInfo, lease_id: &str) -> ProcessInfo {
    info.id = ProcessId::new(lease_id, info.id.number);
    info
}

/// A process found: its lease resolved and its current state.
struct Found {
    resolved: Resolved,
    id: ProcessId,
    info: ProcessInfo,
}

impl EnvironmentRuntime {
    async fn gated<'a>(&self, resolved: &'a Resolved) -> Result<&'a dyn ProcessSessions, RuntimeError> {
        gate(resolved, Operation::Processes, |d| d.as_processes(), |_| true).await
    }

    /// Finds the process `id` in the store: its lease (which must be visible and pass the
    /// gate), then the process in the lease's supervisor.
    async fn find(&self, id: &str) -> Result<Found, RuntimeError> {
        let parsed: ProcessId = id.parse()?;
        let unknown = || RuntimeError::Process(ProcessError::Unknown { id: id.to_owned() });
        let resolved = match self.resolve(&parsed.lease_id).await {
            Ok(resolved) => resolved,
            Err(RuntimeError::LeaseNotFound { .. }) => return Err(unknown()),
            Err(other) => return Err(other),
        };
        let sessions = self.gated(&resolved).await?;
        let info = sessions
            .process(&resolved.context, parsed.number)
            .await
            .map_err(lift)?
            .ok_or_else(unknown)?;
        let info = owned(info, &parsed.lease_id);
        Ok(Found {
            resolved,
            id: parsed,
            info,
        })
    }

    /// The refusal of `verb` on a process that has exited.
    fn exited(found: &Found, verb: &'static str) -> Result<(), RuntimeError> {
        if found.info.status.is_running() {
            Ok(())
        } else {
            Err(ProcessError::Exited {
                id: found.id.to_string(),
                verb,
            }
            .into())
        }
    }

    /// After a driver failure: the process may have exited meanwhile, which is the refusal
    /// to report.
    async fn refine(&self, found: &Found, verb: &'static str, error: DriverError) -> RuntimeError {
        if let Some(sessions) = found.resolved.driver.as_processes()
            && let Ok(Some(now)) = sessions.process(&found.resolved.context, found.id.number).await
            && !now.status.is_running()
        {
            return ProcessError::Exited {
                id: found.id.to_string(),
                verb,
            }
            .into();
        }
        lift(error)
    }

    /// Starts a process on the lease; answers once it runs. It lives until it exits, is
    /// signalled, times out or the lease ends, whatever becomes of the caller.
    pub async fn spawn(&self, lease_id: &str, request: SpawnRequest) -> Result<ProcessInfo, RuntimeError> {
        self.traced("spawn", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let sessions = self.gated(&resolved).await?;
            if request.argv.is_empty() || request.argv[0].is_empty() {
                return Err(ProcessError::Spawn {
                    reason: "argv is empty".to_owned(),
                }
                .into());
            }
            let info = sessions.spawn(&resolved.context, request).await.map_err(lift)?;
            Ok(owned(info, lease_id))
        })
        .await
    }

    /// Every process of the lease, exited ones included, in spawn order.
    pub async fn processes(&self, lease_id: &str) -> Result<Vec<ProcessInfo>, RuntimeError> {
        self.traced("processes", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let sessions = self.gated(&resolved).await?;
            let list = sessions.processes(&resolved.context).await.map_err(lift)?;
            Ok(list.into_iter().map(|info| owned(info, lease_id)).collect())
        })
        .await
    }

    /// One process by id, from any program on the same store.
    pub async fn process(&self, id: &str) -> Result<ProcessInfo, RuntimeError> {
        Ok(self.find(id).await?.info)
    }

    /// The output from `from` (per stream; a stream left out starts at its oldest byte
    /// held), live until the process ends, then its exit. While the stream is open and
    /// the process runs, it keeps the lease's idle clock fresh (an attached reader is
    /// activity; see `reader`).
    pub async fn output(&self, id: &str, from: &Offsets) -> Result<ProcessOutputStream, RuntimeError> {
        let found = self.find(id).await?;
        ProcessError::check_offsets(&found.info, from)?;
        // Only the streams the process has reach the driver (`Offsets::zero()` names all).
        let mut from_held = Offsets::default();
        for held in &found.info.streams {
            if let Some(offset) = from.get(held.stream) {
                from_held = from_held.with(held.stream, offset);
            }
        }
        let sessions = self.gated(&found.resolved).await?;
        let inner = sessions
            .output(&found.resolved.context, found.id.number, &from_held)
            .await
            .map_err(lift)?;
        Ok(ProcessOutputStream {
            keeper: ReaderKeeper::start(&found.resolved),
            id: found.id,
            inner,
            done: false,
        })
    }

    /// Writes `bytes` to the process's stdin (or terminal).
    pub async fn write_stdin(&self, id: &str, bytes: &[u8]) -> Result<(), RuntimeError> {
        let found = self.find(id).await?;
        Self::exited(&found, "write to its stdin")?;
        let sessions = self.gated(&found.resolved).await?;
        match sessions
            .write_stdin(&found.resolved.context, found.id.number, bytes)
            .await
        {
            Ok(()) => Ok(()),
            Err(error) => Err(self.refine(&found, "write to its stdin", error).await),
        }
    }

    /// Ends the process's stdin.
    pub async fn close_stdin(&self, id: &str) -> Result<(), RuntimeError> {
        let found = self.find(id).await?;
        Self::exited(&found, "close its stdin")?;
        let sessions = self.gated(&found.resolved).await?;
        match sessions.close_stdin(&found.resolved.context, found.id.number).await {
            Ok(()) => Ok(()),
            Err(error) => Err(self.refine(&found, "close its stdin", error).await),
        }
    }

    /// Sends `signal` (a name, `TERM` or `SIGTERM`, or a number) to the process group.
    pub async fn signal(&self, id: &str, signal: &str) -> Result<ProcessInfo, RuntimeError> {
        let found = self.find(id).await?;
        Self::exited(&found, "signal it")?;
        let sessions = self.gated(&found.resolved).await?;
        match sessions.signal(&found.resolved.context, found.id.number, signal).await {
            Ok(info) => Ok(owned(info, &found.id.lease_id)),
            Err(error) => Err(self.refine(&found, "signal it", error).await),
        }
    }

    /// Resizes the process's terminal.
    pub async fn resize(&self, id: &str, rows: u16, cols: u16) -> Result<(), RuntimeError> {
        let found = self.find(id).await?;
        if !found.info.tty {
            return Err(ProcessError::NoTty {
                id: found.id.to_string(),
            }
            .into());
        }
        Self::exited(&found, "resize its terminal")?;
        let sessions = self.gated(&found.resolved).await?;
        match sessions
            .resize(&found.resolved.context, found.id.number, rows, cols)
            .await
        {
            Ok(()) => Ok(()),
            Err(error) => Err(self.refine(&found, "resize its terminal", error).await),
        }
    }

    /// Waits for the process to end, at most `timeout` (forever when `None`); answers its
    /// status, still `running` when the timeout passed first.
    pub async fn wait_process(&self, id: &str, timeout: Option<Duration>) -> Result<ProcessStatus, RuntimeError> {
        let found = self.find(id).await?;
        if !found.info.status.is_running() {
            return Ok(found.info.status);
        }
        let sessions = self.gated(&found.resolved).await?;
        sessions
            .wait(&found.resolved.context, found.id.number, timeout)
            .await
            .map_err(lift)
    }
}
