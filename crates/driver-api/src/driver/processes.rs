//! The optional driver group behind `persistentProcessSessions` (contract section 9):
//! processes that outlive the program that spawned them, held by one supervisor per lease.
//!
//! Every driver implements it the same way: it keeps one supervisor (`envrt-agent`) per
//! lease inside the lease's isolation boundary and forwards each verb to it; the facade
//! checks ids, exited processes, terminals and offsets before the call (so the refusal
//! texts are the same on every driver) and the driver only translates. Process numbers are
//! the supervisor's; the facade joins them with the lease id into a
//! [`ProcessId`](crate::process::ProcessId).

use std::time::Duration;

use async_trait::async_trait;

use crate::driver::LeaseContext;
use crate::error::DriverError;
use crate::process::{Offsets, OutputEvent, ProcessInfo, ProcessStatus, SpawnRequest};

/// A live output stream: chunks in order (each stream's offsets contiguous), then the exit.
#[async_trait]
pub trait ProcessOutput: Send {
    /// The next chunk or the exit; `None` after the exit.
    ///
    /// - MUST yield each stream's bytes at contiguous absolute offsets, from the offset
    ///   asked for (or the oldest held), and end with [`OutputEvent::Exit`] once the
    ///   process has ended and every byte was delivered.
    /// - A reader that fell behind so far that its next byte was dropped MUST get the
    ///   refusal ([`ProcessError::OffsetDropped`](crate::process::ProcessError)), never a
    ///   gap.
    async fn next(&mut self) -> Result<Option<OutputEvent>, DriverError>;
}

/// Persistent process sessions, if the driver has them (`as_processes`). The facade calls
/// each method only after the gate (`persistentProcessSessions` granted, lease active) and,
/// for verbs on one process, after [`process`](Self::process) found it.
#[async_trait]
pub trait ProcessSessions: Send + Sync {
    /// Starts a process in the lease and answers once it really runs.
    ///
    /// - MUST return a [`ProcessInfo`] whose id names this lease and a number unique in it.
    /// - MUST keep the process running when the calling program ends; it ends only when
    ///   it exits, is signalled, hits its timeout, or the lease ends (release, destroy,
    ///   expiry, `gc` of a dead holder: the whole tree, `setsid` escapees included).
    /// - The same idempotency key with the same request MUST return the same process; with
    ///   another request it MUST be refused.
    async fn spawn(&self, context: &LeaseContext, request: SpawnRequest) -> Result<ProcessInfo, DriverError>;

    /// Every process the lease holds, exited ones included, in spawn order.
    async fn processes(&self, context: &LeaseContext) -> Result<Vec<ProcessInfo>, DriverError>;

    /// One process by number; `None` when the lease holds none such.
    async fn process(&self, context: &LeaseContext, number: u64) -> Result<Option<ProcessInfo>, DriverError>;

    /// The output from `from`, live until the exit. Several readers at once MUST see the
    /// same bytes.
    async fn output(
        &self,
        context: &LeaseContext,
        number: u64,
        from: &Offsets,
    ) -> Result<Box<dyn ProcessOutput>, DriverError>;

    /// Writes bytes to the process's stdin (or terminal), whole and in order.
    async fn write_stdin(&self, context: &LeaseContext, number: u64, bytes: &[u8]) -> Result<(), DriverError>;

    /// Ends stdin: the process reads EOF (a terminal gets its EOF character).
    async fn close_stdin(&self, context: &LeaseContext, number: u64) -> Result<(), DriverError>;

    /// Sends `signal` (a name like `TERM` / `SIGTERM` or a number) to the process group.
    async fn signal(&self, context: &LeaseContext, number: u64, signal: &str) -> Result<ProcessInfo, DriverError>;

    /// Sets the terminal's size; the foreground group gets SIGWINCH.
    async fn resize(&self, context: &LeaseContext, number: u64, rows: u16, cols: u16) -> Result<(), DriverError>;

    /// Waits for the end, at most `timeout` (forever when `None`); `Running` on timeout.
    async fn wait(
        &self,
        context: &LeaseContext,
        number: u64,
        timeout: Option<Duration>,
    ) -> Result<ProcessStatus, DriverError>;
}
