//! Duplex channels: a command on an SSH session channel of its own, started through the
//! same prologue as execute (allow-listed environment, watchdog, recorded process group).
//! The command's stderr is its stdout (the prologue points fd 2 at fd 1), so the channel
//! carries both in the order it wrote them (contract section 7). A pump task reads that
//! and the session's own stderr (the prologue's messages, such as a missing program) into
//! a bounded queue (output that arrives before the first read waits there; a full queue
//! slows the command, nothing is dropped). `close_input` half-closes the channel (EOF on the command's stdin); `stop`
//! kills the command's process group.

use std::sync::Arc;

use async_trait::async_trait;
use envrt_driver_api::{DriverError, DuplexChannel, DuplexExit, ExecuteRequest, NameRules};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Mutex, mpsc, watch};

use crate::connection::{Host, exit_code};
use crate::{SshDriver, remote};
use envrt_driver_api::{DuplexChannels, LeaseContext};

/// One duplex channel.
pub(crate) struct SshDuplex {
    host: Arc<Host>,
    run: String,
    stdin: Mutex<Option<openssh::ChildStdin>>,
    output: Mutex<mpsc::Receiver<Vec<u8>>>,
    exit: watch::Receiver<Option<DuplexExit>>,
    closed: std::sync::atomic::AtomicBool,
}

impl SshDuplex {
    /// Starts `command` through `script` (the launch text) and its pump.
    pub(crate) async fn open(host: Arc<Host>, script: &str, run: String) -> Result<SshDuplex, DriverError> {
        let mut remote = host.spawn(script).await?;
        let mut stdin = remote
            .child
            .stdin()
            .take()
            .ok_or_else(|| DriverError::other("the channel has no stdin"))?;
        // The prologue's (empty) variable block.
        stdin
            .write_all(&remote::env_block(&Default::default()))
            .await
            .map_err(|e| DriverError::io("cannot start the duplex command", e))?;
        let (tx, rx) = mpsc::channel::<Vec<u8>>(64);
        let (exit_tx, exit_rx) = watch::channel(None);
        let mut stdout = remote.child.stdout().take();
        let mut stderr = remote.child.stderr().take();
        let pump_host = host.clone();
        tokio::spawn(async move {
            let mut out_buf = vec![0u8; 32 * 1024];
            let mut err_buf = vec![0u8; 32 * 1024];
            let mut receiver_gone = false;
            while stdout.is_some() || stderr.is_some() {
                let chunk = tokio::select! {
                    read = async { stdout.as_mut().expect("checked").read(&mut out_buf).await }, if stdout.is_some() => {
                        match read { Ok(0) | Err(_) => { stdout = None; None } Ok(n) => Some(out_buf[..n].to_vec()) }
                    }
                    read = async { stderr.as_mut().expect("checked").read(&mut err_buf).await }, if stderr.is_some() => {
                        match read { Ok(0) | Err(_) => { stderr = None; None } Ok(n) => Some(err_buf[..n].to_vec()) }
                    }
                };
                if let Some(chunk) = chunk {
                    if !receiver_gone && tx.send(chunk).await.is_err() {
                        receiver_gone = true;
                    }
                }
            }
            drop(tx);
            let session = remote.session.clone();
            let code = exit_code(remote.child.wait().await);
            let transport_closed = code.is_none() && !pump_host.alive(&session).await;
            let _ = exit_tx.send(Some(DuplexExit {
                exit_code: code,
                transport_closed,
            }));
        });
        Ok(SshDuplex {
            host,
            run,
            stdin: Mutex::new(Some(stdin)),
            output: Mutex::new(rx),
            exit: exit_rx,
            closed: std::sync::atomic::AtomicBool::new(false),
        })
    }

    fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn kill(&self) -> Result<(), DriverError> {
        if self.exit.borrow().is_some() {
            return Ok(());
        }
        self.host
            .run(&remote::signal_run(&self.run, "KILL"), &[])
            .await
            .map(|_| ())
    }
}

#[async_trait]
impl DuplexChannel for SshDuplex {
    async fn write(&self, data: &[u8]) -> Result<(), DriverError> {
        if self.is_closed() {
            return Err(DriverError::ChannelClosed);
        }
        let mut stdin = self.stdin.lock().await;
        let pipe = stdin.as_mut().ok_or(DriverError::ChannelClosed)?;
        pipe.write_all(data).await.map_err(|_| DriverError::ChannelClosed)?;
        pipe.flush().await.map_err(|_| DriverError::ChannelClosed)
    }

    async fn read(&self) -> Result<Option<Vec<u8>>, DriverError> {
        if self.is_closed() {
            return Err(DriverError::ChannelClosed);
        }
        Ok(self.output.lock().await.recv().await)
    }

    async fn close_input(&self) -> Result<(), DriverError> {
        if self.is_closed() {
            return Err(DriverError::ChannelClosed);
        }
        if let Some(mut pipe) = self.stdin.lock().await.take() {
            let _ = pipe.shutdown().await;
        }
        Ok(())
    }

    async fn stop(&self) -> Result<(), DriverError> {
        self.kill().await
    }

    async fn close(&self) -> Result<(), DriverError> {
        if self.closed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        self.stdin.lock().await.take();
        let _ = self.kill().await;
        self.output.lock().await.close();
        Ok(())
    }

    async fn wait(&self) -> Result<DuplexExit, DriverError> {
        let mut exit = self.exit.clone();
        let value = exit
            .wait_for(Option::is_some)
            .await
            .map_err(|_| DriverError::other("the duplex pump ended without an exit"))?;
        Ok(value.expect("waited for Some"))
    }
}

impl Drop for SshDuplex {
    fn drop(&mut self) {
        if self.exit.borrow().is_none() {
            let host = self.host.clone();
            let script = remote::signal_run(&self.run, "KILL");
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move {
                    let _ = host.run(&script, &[]).await;
                });
            }
        }
    }
}

#[async_trait]
impl DuplexChannels for SshDriver {
    async fn open_duplex_channel(
        &self,
        context: &LeaseContext,
        command: &[String],
    ) -> Result<Box<dyn DuplexChannel>, DriverError> {
        let place = self.place(context).await?;
        let (program, args) = command
            .split_first()
            .ok_or_else(|| DriverError::invalid("the command is empty"))?;
        ExecuteRequest::new(program, args.iter().cloned()).validate(NameRules::Shell)?;
        let run = format!("{}/run/{}", place.lease_dir, uuid::Uuid::new_v4().simple());
        let script = remote::launch(
            &remote::Launch {
                workspace: &place.workspace,
                run: &run,
                cwd: None,
                allowlist: &self.config.env_allowlist,
                stdin_len: None,
            },
            program,
            args,
        );
        Ok(Box::new(SshDuplex::open(place.host.clone(), &script, run).await?))
    }
}
