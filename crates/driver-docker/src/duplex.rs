//! Duplex channels (contract section 7) over exec attach.
//!
//! A pump task reads the exec's frames into a bounded queue (output that arrives before
//! the first read waits there; when the queue is full the command is slowed down, nothing
//! is dropped). The command's stderr is its stdout (one pipe), so the channel carries both
//! in the order the command wrote them (contract section 7). `stop`
//! and `close` kill the command's process tree the same way a timed-out `execute` does.

use std::sync::Mutex as SyncMutex;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::{Mutex, Notify, mpsc, watch};
use tokio::task::JoinHandle;

use envrt_driver_api::{DriverError, DuplexChannel, DuplexChannels, DuplexExit, LeaseContext};

use crate::DockerDriver;
use crate::engine::Engine;
use crate::process::{self, Demux, ExecState, InputSide, Target};

/// Chunks held before the command is slowed down.
const QUEUE: usize = 64;
/// Longest pause between two looks at whether the command has exited.
const MAX_POLL: Duration = Duration::from_millis(250);
/// How long `stop` waits for the wrapper to report the pid.
const PID_WAIT: Duration = Duration::from_secs(5);

#[derive(Default)]
struct State {
    closed: bool,
    stopped: bool,
    exit: Option<DuplexExit>,
}

struct Shared {
    engine: Engine,
    container: String,
    exec_id: String,
    grace: Duration,
}

/// A channel to one command started through exec attach.
pub(crate) struct DockerChannel {
    shared: std::sync::Arc<Shared>,
    input: Mutex<Option<InputSide>>,
    output: Mutex<mpsc::Receiver<Vec<u8>>>,
    target: watch::Receiver<Option<Target>>,
    transport_broken: watch::Receiver<bool>,
    /// Set once the exec's output stream ended (the pump read all of it, or it broke).
    output_ended: watch::Receiver<bool>,
    pump: JoinHandle<()>,
    state: SyncMutex<State>,
    closed: Notify,
}

/// Starts `command` (argv) in `container` and connects a channel to it.
pub(crate) async fn open(
    engine: &Engine,
    grace: Duration,
    container: &str,
    workspace: &str,
    command: &[String],
) -> Result<Box<dyn DuplexChannel>, DriverError> {
    if command.first().is_none_or(|c| c.is_empty()) {
        return Err(DriverError::invalid("The duplex command is empty."));
    }
    if command.iter().any(|a| a.contains('\0')) {
        return Err(DriverError::invalid("The command or an argument contains a NUL byte."));
    }
    let spawned = process::spawn_duplex(engine, container, command, workspace).await?;
    let (tx, rx) = mpsc::channel(QUEUE);
    let (target_tx, target_rx) = watch::channel(None);
    let (broken_tx, broken_rx) = watch::channel(false);
    let (ended_tx, ended_rx) = watch::channel(false);
    let mut output = spawned.output;
    let pump = tokio::spawn(async move {
        // Told on every way out, the caller's read going away included.
        let _ended = Ended(ended_tx);
        let mut demux = Demux::default();
        while let Some(frame) = output.next().await {
            let frame = match frame {
                Ok(frame) => frame,
                Err(_) => {
                    let _ = broken_tx.send(true);
                    break;
                }
            };
            let item = demux.feed(frame);
            if demux.target().is_some() && target_tx.borrow().is_none() {
                let _ = target_tx.send(demux.target().cloned());
            }
            if let Some((_, bytes)) = item {
                if tx.send(bytes).await.is_err() {
                    return;
                }
            }
        }
        if let Some((_, bytes)) = demux.flush() {
            let _ = tx.send(bytes).await;
        }
    });
    Ok(Box::new(DockerChannel {
        shared: std::sync::Arc::new(Shared {
            engine: engine.clone(),
            container: container.to_owned(),
            exec_id: spawned.exec_id,
            grace,
        }),
        input: Mutex::new(Some(spawned.input)),
        output: Mutex::new(rx),
        target: target_rx,
        transport_broken: broken_rx,
        output_ended: ended_rx,
        pump,
        state: SyncMutex::new(State::default()),
        closed: Notify::new(),
    }))
}

impl DockerChannel {
    fn is_closed(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).closed
    }

    async fn known_target(&self) -> Option<Target> {
        wait_for_target(self.target.clone()).await
    }

    /// Kills the command's tree if it still runs.
    async fn kill(&self, graceful: bool) -> Result<(), DriverError> {
        let s = &self.shared;
        if !process::is_running(&s.engine, &s.container, &s.exec_id).await? {
            return Ok(());
        }
        if let Some(target) = self.known_target().await {
            process::kill_tree(&s.engine, &s.container, &target, s.grace, graceful).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl DuplexChannel for DockerChannel {
    async fn write(&self, data: &[u8]) -> Result<(), DriverError> {
        if self.is_closed() {
            return Err(DriverError::ChannelClosed);
        }
        let mut input = self.input.lock().await;
        let Some(side) = input.as_mut() else {
            return Err(DriverError::ChannelClosed);
        };
        match side.write_all(data).await {
            Ok(()) => side.flush().await.map_err(|_| DriverError::ChannelClosed),
            Err(_) => Err(DriverError::ChannelClosed),
        }
    }

    async fn read(&self) -> Result<Option<Vec<u8>>, DriverError> {
        if self.is_closed() {
            return Ok(None);
        }
        let closed = self.closed.notified();
        let mut output = self.output.lock().await;
        tokio::select! {
            chunk = output.recv() => Ok(chunk),
            _ = closed => Ok(None),
        }
    }

    async fn close_input(&self) -> Result<(), DriverError> {
        if let Some(mut side) = self.input.lock().await.take() {
            let _ = side.shutdown().await;
        }
        Ok(())
    }

    async fn stop(&self) -> Result<(), DriverError> {
        if self.is_closed() {
            return Ok(());
        }
        self.state.lock().unwrap_or_else(|e| e.into_inner()).stopped = true;
        self.kill(true).await
    }

    async fn close(&self) -> Result<(), DriverError> {
        {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if state.closed {
                return Ok(());
            }
            state.closed = true;
        }
        self.closed.notify_waiters();
        let killed = self.kill(false).await;
        self.input.lock().await.take();
        self.pump.abort();
        killed
    }

    async fn wait(&self) -> Result<DuplexExit, DriverError> {
        let s = &self.shared;
        let mut delay = Duration::from_millis(10);
        loop {
            {
                let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(exit) = state.exit {
                    return Ok(exit);
                }
            }
            let closed = self.closed.notified();
            if self.is_closed() {
                return Ok(DuplexExit {
                    exit_code: None,
                    transport_closed: false,
                });
            }
            let exec = match process::state(&s.engine, &s.container, &s.exec_id).await {
                Ok(exec) => exec,
                Err(_) if *self.transport_broken.borrow() => {
                    return Ok(DuplexExit {
                        exit_code: None,
                        transport_closed: true,
                    });
                }
                Err(e) => return Err(e),
            };
            let over = match exec {
                ExecState::Exited(code) => Some(Some(code)),
                // Not started, and its stream is over: the engine never started it.
                ExecState::Starting if *self.output_ended.borrow() => Some(None),
                // Running, or not started yet (the engine answers the start before it
                // marks the exec running): not an exit.
                ExecState::Starting | ExecState::Running => None,
            };
            if let Some(code) = over {
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                let exit = DuplexExit {
                    exit_code: if state.stopped { None } else { code.map(|c| c as i32) },
                    transport_closed: code.is_none(),
                };
                state.exit = Some(exit);
                return Ok(exit);
            }
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = closed => {}
            }
            delay = (delay * 2).min(MAX_POLL);
        }
    }
}

/// Sends `true` when dropped: the pump is over.
struct Ended(watch::Sender<bool>);

impl Drop for Ended {
    fn drop(&mut self) {
        let _ = self.0.send(true);
    }
}

/// The command's process group and pipes, once the wrapper reported them (bounded wait).
async fn wait_for_target(mut target: watch::Receiver<Option<Target>>) -> Option<Target> {
    let found = tokio::time::timeout(PID_WAIT, target.wait_for(|t| t.is_some()))
        .await
        .ok()
        .and_then(|r| r.ok().and_then(|t| t.clone()));
    found.or_else(|| target.borrow().clone())
}

impl Drop for DockerChannel {
    fn drop(&mut self) {
        let pump = self.pump.abort_handle();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            pump.abort();
            return;
        };
        if self.is_closed() {
            pump.abort();
            return;
        }
        // Dropped without close: still kill the command, in the background. The pump
        // keeps running until the wrapper's pid report is in, which may come after the
        // first output the caller read.
        let shared = self.shared.clone();
        let target = self.target.clone();
        handle.spawn(async move {
            let target = wait_for_target(target).await;
            pump.abort();
            let Some(target) = target else { return };
            if process::is_running(&shared.engine, &shared.container, &shared.exec_id)
                .await
                .unwrap_or(false)
            {
                let _ = process::kill_tree(&shared.engine, &shared.container, &target, shared.grace, false).await;
            }
        });
    }
}

#[async_trait]
impl DuplexChannels for DockerDriver {
    async fn open_duplex_channel(
        &self,
        context: &LeaseContext,
        command: &[String],
    ) -> Result<Box<dyn DuplexChannel>, DriverError> {
        let container = Self::container_of(context)?;
        let workspace = Self::workspace_of(context);
        open(&self.engine, self.config.kill_grace, container, &workspace, command).await
    }
}
