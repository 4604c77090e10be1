//! A real duplex channel for the faulty drivers: the command runs as a child process in
//! the lease workspace with piped stdin and stdout, and its stderr is what the fault gets
//! wrong (dropped, or held back until stdout ends), so the kit's duplex checks have a
//! working channel to catch it on.

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use envrt_runtime_core::{DriverError, DuplexChannel, DuplexExit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{ChildStdin, Command};
use tokio::sync::{Mutex, Notify, mpsc, watch};

/// What the channel does wrong with the command's stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StderrFault {
    /// stderr goes nowhere.
    Dropped,
    /// stderr is carried, but only after all of stdout (its order is lost).
    AfterStdout,
}

/// A channel to a local child process.
pub(crate) struct LocalChannel {
    stdin: Mutex<Option<ChildStdin>>,
    output: Mutex<mpsc::Receiver<Vec<u8>>>,
    exit: watch::Receiver<Option<DuplexExit>>,
    kill: std::sync::Arc<Notify>,
    closed: AtomicBool,
}

async fn read_to_end(pipe: Option<impl tokio::io::AsyncRead + Unpin>) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(mut pipe) = pipe {
        let _ = pipe.read_to_end(&mut out).await;
    }
    out
}

impl LocalChannel {
    /// Starts `argv` in `workspace`.
    pub(crate) fn open(workspace: &Path, argv: &[String], fault: StderrFault) -> Result<LocalChannel, DriverError> {
        let (program, args) = argv.split_first().ok_or_else(|| DriverError::invalid("empty argv"))?;
        let stderr = match fault {
            StderrFault::Dropped => Stdio::null(),
            StderrFault::AfterStdout => Stdio::piped(),
        };
        let mut child = Command::new(program)
            .args(args)
            .current_dir(workspace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| DriverError::io("starting the duplex command", e))?;
        let stdin = child.stdin.take();
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            let (out, err) = tokio::join!(read_to_end(stdout), read_to_end(stderr));
            for chunk in [out, err] {
                if !chunk.is_empty() && tx.send(chunk).await.is_err() {
                    return;
                }
            }
        });
        let (exit_tx, exit_rx) = watch::channel(None);
        let kill = std::sync::Arc::new(Notify::new());
        let killer = kill.clone();
        tokio::spawn(async move {
            let code = tokio::select! {
                status = child.wait() => status.ok().and_then(|s| s.code()),
                () = killer.notified() => {
                    let _ = child.kill().await;
                    None
                }
            };
            let _ = exit_tx.send(Some(DuplexExit {
                exit_code: code,
                transport_closed: false,
            }));
        });
        Ok(LocalChannel {
            stdin: Mutex::new(stdin),
            output: Mutex::new(rx),
            exit: exit_rx,
            kill,
            closed: AtomicBool::new(false),
        })
    }
}

#[async_trait]
impl DuplexChannel for LocalChannel {
    async fn write(&self, data: &[u8]) -> Result<(), DriverError> {
        let mut stdin = self.stdin.lock().await;
        let pipe = stdin.as_mut().ok_or(DriverError::ChannelClosed)?;
        pipe.write_all(data).await.map_err(|_| DriverError::ChannelClosed)
    }
    async fn read(&self) -> Result<Option<Vec<u8>>, DriverError> {
        Ok(self.output.lock().await.recv().await)
    }
    async fn close_input(&self) -> Result<(), DriverError> {
        self.stdin.lock().await.take();
        Ok(())
    }
    async fn stop(&self) -> Result<(), DriverError> {
        self.kill.notify_one();
        Ok(())
    }
    async fn close(&self) -> Result<(), DriverError> {
        if !self.closed.swap(true, Ordering::SeqCst) {
            self.stdin.lock().await.take();
            self.kill.notify_one();
        }
        Ok(())
    }
    async fn wait(&self) -> Result<DuplexExit, DriverError> {
        let mut exit = self.exit.clone();
        let ended = exit
            .wait_for(Option::is_some)
            .await
            .map_err(|_| DriverError::ChannelClosed)?;
        Ok((*ended).expect("waited for it"))
    }
}
