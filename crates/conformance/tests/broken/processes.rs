//! Faulty process sessions: the local driver's real supervisor behind a wrapper that
//! breaks one promise of contract section 11 at a time (each caught by one check).

use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use envrt_runtime_core::driver::{LeaseContext, ProcessOutput, ProcessSessions};
use envrt_runtime_core::{
    DriverError, EnvironmentDriver, Offsets, OutputEvent, ProcessId, ProcessInfo, ProcessStatus, SpawnRequest,
};

use super::{Fault, Faulty};

/// One broken promise of the process verbs.
#[allow(dead_code, reason = "each test binary uses some of the faults")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProcessFault {
    /// Spawn answers a process number the supervisor does not know (not findable later).
    ShiftsProcessIds,
    /// Output skips its first chunk.
    SkipsFirstChunk,
    /// Output starts at the oldest byte whatever offset was asked.
    IgnoresFromOffset,
    /// Reports no dropped bytes.
    MisreportsDropped,
    /// Signals only the process, not its group.
    SignalsOnlyTheLeader,
    /// Drops the last byte of every stdin write.
    DropsLastStdinByte,
    /// Answers resize without resizing.
    IgnoresResize,
    /// Reports an exited process as having exited 0.
    ForgetsExitStatus,
    /// Also starts the command on the host, outside the lease, where no release reaches it.
    LeaksProcessOutsideLease,
    /// Drops the idempotency key.
    IgnoresIdempotencyKey,
    /// A second reader at once gets the exit and no bytes.
    StarvesASecondReader,
    /// Replaces the spawn timeout by a kill of the process alone.
    TimeoutKillsOnlyTheLeader,
    /// Lists no processes.
    ListsNothing,
    /// Answers any process number with a made-up running process.
    InventsProcesses,
    /// Has the group and the grant, then refuses every spawn.
    ClaimsProcessesButRefuses,
    /// Grants `persistentProcessSessions` (the local driver's snapshot) without the group.
    GrantsWithoutTheGroup,
    /// `eprintln!`s each spawn's argv and env values, secrets included.
    PrintsSpawnEnv,
}

static READERS: AtomicUsize = AtomicUsize::new(0);

impl Faulty {
    fn process_fault(&self) -> Option<ProcessFault> {
        match self.fault {
            Fault::Process(fault) => Some(fault),
            _ => None,
        }
    }

    fn breaks(&self, fault: ProcessFault) -> bool {
        self.process_fault() == Some(fault)
    }

    fn sessions(&self) -> &dyn ProcessSessions {
        self.inner.as_processes().expect("local has process sessions")
    }

    fn doctored(&self, mut info: ProcessInfo) -> ProcessInfo {
        if self.breaks(ProcessFault::MisreportsDropped) {
            info.streams.iter_mut().for_each(|s| s.dropped = 0);
        }
        if self.breaks(ProcessFault::ForgetsExitStatus) && !info.status.is_running() {
            info.status = ProcessStatus::Exited { code: 0 };
        }
        info
    }
}

fn kill_pid(signal: &str, pid: i32) {
    let _ = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status();
}

/// Output that skips its first chunk.
struct Skipping(Box<dyn ProcessOutput>, bool);

#[async_trait]
impl ProcessOutput for Skipping {
    async fn next(&mut self) -> Result<Option<OutputEvent>, DriverError> {
        let event = self.0.next().await?;
        if !self.1 && matches!(event, Some(OutputEvent::Chunk(_))) {
            self.1 = true;
            return self.0.next().await;
        }
        Ok(event)
    }
}

/// Output that ends at once with the process's state.
struct Ended(Option<ProcessInfo>);

#[async_trait]
impl ProcessOutput for Ended {
    async fn next(&mut self) -> Result<Option<OutputEvent>, DriverError> {
        Ok(self.0.take().map(OutputEvent::Exit))
    }
}

#[async_trait]
impl ProcessSessions for Faulty {
    async fn spawn(&self, context: &LeaseContext, mut request: SpawnRequest) -> Result<ProcessInfo, DriverError> {
        match self.process_fault() {
            Some(ProcessFault::ClaimsProcessesButRefuses) => return Err(DriverError::other("no processes here")),
            Some(ProcessFault::IgnoresIdempotencyKey) => request.idempotency_key = None,
            Some(ProcessFault::PrintsSpawnEnv) => {
                let values: Vec<&str> = request.env.values().map(|v| v.expose()).collect();
                eprintln!("faulty supervisor spawns {:?} with env {values:?}", request.argv);
            }
            Some(ProcessFault::LeaksProcessOutsideLease) => {
                let _ = std::process::Command::new(&request.argv[0])
                    .args(&request.argv[1..])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .process_group(0)
                    .spawn();
            }
            _ => {}
        }
        let timeout = request.timeout;
        if self.breaks(ProcessFault::TimeoutKillsOnlyTheLeader) {
            request.timeout = None;
        }
        if matches!(
            self.fault,
            super::Fault::NotReadyAtAcquire | super::Fault::SpawnNotReadyAtAcquire
        ) {
            let result = self.sessions().spawn(context, request).await;
            self.settle(&context.lease.id);
            return result;
        }
        let mut info = self.sessions().spawn(context, request).await?;
        if let (true, Some(after)) = (self.breaks(ProcessFault::TimeoutKillsOnlyTheLeader), timeout) {
            let pid = info.pid;
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                kill_pid("-KILL", pid);
            });
        }
        if self.breaks(ProcessFault::ShiftsProcessIds) {
            info.id = ProcessId::new(info.id.lease_id.clone(), info.id.number + 1000);
        }
        Ok(info)
    }

    async fn processes(&self, context: &LeaseContext) -> Result<Vec<ProcessInfo>, DriverError> {
        if self.breaks(ProcessFault::ListsNothing) {
            return Ok(Vec::new());
        }
        let list = self.sessions().processes(context).await?;
        Ok(list.into_iter().map(|info| self.doctored(info)).collect())
    }

    async fn process(&self, context: &LeaseContext, number: u64) -> Result<Option<ProcessInfo>, DriverError> {
        let found = self.sessions().process(context, number).await?;
        if found.is_none() && self.breaks(ProcessFault::InventsProcesses) {
            return Ok(Some(ProcessInfo {
                id: ProcessId::new(context.lease.id.clone(), number),
                pid: 1,
                started_at: envrt_runtime_core::Timestamp::now(),
                argv: vec!["made-up".into()],
                tty: false,
                status: ProcessStatus::Running,
                streams: Vec::new(),
            }));
        }
        Ok(found.map(|info| self.doctored(info)))
    }

    async fn output(
        &self,
        context: &LeaseContext,
        number: u64,
        from: &Offsets,
    ) -> Result<Box<dyn ProcessOutput>, DriverError> {
        if self.breaks(ProcessFault::StarvesASecondReader) && READERS.fetch_add(1, Ordering::SeqCst) > 0 {
            let info = self.sessions().process(context, number).await?;
            return Ok(Box::new(Ended(info)));
        }
        let from = if self.breaks(ProcessFault::IgnoresFromOffset) {
            Offsets::default()
        } else {
            from.clone()
        };
        let output = self.sessions().output(context, number, &from).await?;
        if self.breaks(ProcessFault::SkipsFirstChunk) {
            return Ok(Box::new(Skipping(output, false)));
        }
        Ok(output)
    }

    async fn write_stdin(&self, context: &LeaseContext, number: u64, bytes: &[u8]) -> Result<(), DriverError> {
        let bytes = match self.breaks(ProcessFault::DropsLastStdinByte) && !bytes.is_empty() {
            true => &bytes[..bytes.len() - 1],
            false => bytes,
        };
        self.sessions().write_stdin(context, number, bytes).await
    }

    async fn close_stdin(&self, context: &LeaseContext, number: u64) -> Result<(), DriverError> {
        self.sessions().close_stdin(context, number).await
    }

    async fn signal(&self, context: &LeaseContext, number: u64, signal: &str) -> Result<ProcessInfo, DriverError> {
        if self.breaks(ProcessFault::SignalsOnlyTheLeader)
            && let Some(info) = self.sessions().process(context, number).await?
        {
            kill_pid(&format!("-{}", signal.trim_start_matches("SIG")), info.pid);
            return Ok(info);
        }
        self.sessions().signal(context, number, signal).await
    }

    async fn resize(&self, context: &LeaseContext, number: u64, rows: u16, cols: u16) -> Result<(), DriverError> {
        if self.breaks(ProcessFault::IgnoresResize) {
            return Ok(());
        }
        self.sessions().resize(context, number, rows, cols).await
    }

    async fn wait(
        &self,
        context: &LeaseContext,
        number: u64,
        timeout: Option<Duration>,
    ) -> Result<ProcessStatus, DriverError> {
        self.sessions().wait(context, number, timeout).await
    }
}
