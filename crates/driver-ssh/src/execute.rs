//! Execute over an SSH session channel, with the local driver's semantics: the exit code
//! from the channel, 127 for a missing program, capped output streamed to the sink, env
//! as an allow-list plus the request's variables (sent on stdin), and a timeout that kills
//! everything of the command's run on the remote (its process group, its session and
//! whatever holds its output: see `remote`) and returns with the output gathered so far.

use std::sync::Arc;
use std::time::{Duration, Instant};

use envrt_driver_api::execute::{Ending, signal_name};
use envrt_driver_api::{DriverError, ExecuteRequest, ExecuteResult, JsonMap, NameRules, OutputStream};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use async_trait::async_trait;
use envrt_driver_api::{Execute, LeaseContext};

use crate::SshDriver;
use crate::connection::{Host, exit_code};
use crate::remote::{self, CWD_MISSING, CWD_OUTSIDE, CWD_REFUSED_CODE, LEASE_GONE, Launch};

/// How long the output and the exit status are awaited after a timeout's `KILL`.
const DRAIN: Duration = Duration::from_secs(5);

/// Where a command runs.
pub(crate) struct ExecSite<'a> {
    pub(crate) host: &'a Arc<Host>,
    pub(crate) workspace: &'a str,
    pub(crate) lease_dir: &'a str,
    pub(crate) allowlist: &'a [String],
    pub(crate) kill_grace: Duration,
}

/// Kills a run's process group when dropped armed (the caller dropped the execute
/// future): closing the channel alone would leave the command running.
struct KillOnDrop {
    host: Arc<Host>,
    run: String,
    armed: bool,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.armed {
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

async fn read_some<R: AsyncRead + Unpin>(reader: Option<&mut R>, buf: &mut [u8]) -> std::io::Result<usize> {
    match reader {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

/// Runs `request` (already validated, its cwd confined lexically to `cwd`).
pub(crate) async fn run(
    site: &ExecSite<'_>,
    request: ExecuteRequest,
    cwd: Option<&str>,
) -> Result<ExecuteResult, DriverError> {
    request.validate(NameRules::Shell)?;
    let started = Instant::now();
    let run = format!("{}/run/{}", site.lease_dir, uuid::Uuid::new_v4().simple());
    let script = remote::launch(
        &Launch {
            workspace: site.workspace,
            run: &run,
            cwd,
            allowlist: site.allowlist,
            stdin_len: Some(request.stdin.as_ref().map_or(0, Vec::len)),
        },
        &request.command,
        &request.args,
    );
    let mut remote = site.host.spawn(&script).await?;
    let mut guard = KillOnDrop {
        host: site.host.clone(),
        run: run.clone(),
        armed: true,
    };
    let mut input = remote::env_block(&request.env);
    if let Some(data) = &request.stdin {
        input.extend_from_slice(data);
    }
    // The channel's stdin stays open until the call ends: its end tells the remote
    // feeder the call is gone (see `remote`).
    let mut stdin = remote.child.stdin().take();
    let feed = async {
        if let Some(pipe) = stdin.as_mut() {
            // A command that stops reading is not an error of the call.
            let _ = pipe.write_all(&input).await;
            let _ = pipe.flush().await;
        }
    };
    tokio::pin!(feed);
    let mut fed = false;
    let sink = request.sink.clone();
    let mut out_reader = remote.child.stdout().take();
    let mut err_reader = remote.child.stderr().take();
    let mut out = request.output_buffer();
    let mut err = request.output_buffer();
    // The prologue's own refusal (before the command runs) is the first bytes of stderr.
    let mut err_head: Vec<u8> = Vec::new();
    let mut out_buf = vec![0u8; 64 * 1024];
    let mut err_buf = vec![0u8; 64 * 1024];

    let timer = tokio::time::sleep(request.timeout.unwrap_or(Duration::ZERO));
    tokio::pin!(timer);
    let mut timer_armed = request.timeout.is_some();
    let mut timed_out = false;
    let mut sent: Option<&'static str> = None;
    let mut kills = Vec::new();
    // Set once the kill has been sent: the output stops being awaited then.
    let mut draining = false;

    while out_reader.is_some() || err_reader.is_some() {
        tokio::select! {
            () = &mut feed, if !fed => { fed = true; }
            read = read_some(out_reader.as_mut(), &mut out_buf) => match read {
                Ok(0) | Err(_) => out_reader = None,
                Ok(n) => {
                    out.push(&out_buf[..n]);
                    if let Some(sink) = &sink { sink.on_chunk(OutputStream::Stdout, &out_buf[..n]); }
                }
            },
            read = read_some(err_reader.as_mut(), &mut err_buf) => match read {
                Ok(0) | Err(_) => err_reader = None,
                Ok(n) => {
                    if err_head.len() < 64 {
                        err_head.extend_from_slice(&err_buf[..n.min(64)]);
                    }
                    err.push(&err_buf[..n]);
                    if let Some(sink) = &sink { sink.on_chunk(OutputStream::Stderr, &err_buf[..n]); }
                }
            },
            () = &mut timer, if timer_armed => {
                if draining {
                    // Whatever still holds the output after the kill (the kill raced a
                    // fork) does not hold the call: it returns with what came so far.
                    out_reader = None;
                    err_reader = None;
                    timer_armed = false;
                    continue;
                }
                let signal = if timed_out { "KILL" } else { "TERM" };
                timed_out = true;
                sent = Some(signal);
                let host = site.host.clone();
                let script = remote::signal_run(&run, signal);
                kills.push(tokio::spawn(async move { host.run(&script, &[]).await }));
                let wait = if signal == "TERM" {
                    site.kill_grace
                } else {
                    draining = true;
                    DRAIN
                };
                timer.as_mut().reset(tokio::time::Instant::now() + wait);
            }
        }
    }
    drop(stdin);
    let code = if draining {
        // The exit status can only come once `sshd` has seen the output end: bounded too.
        match tokio::time::timeout(DRAIN, remote.child.wait()).await {
            Ok(status) => exit_code(status),
            Err(_) => None,
        }
    } else {
        exit_code(remote.child.wait().await)
    };
    for kill in kills {
        let _ = kill.await;
    }
    if code == Some(CWD_REFUSED_CODE) {
        let shown = request.cwd.clone().unwrap_or_default();
        if err_head.starts_with(CWD_OUTSIDE) {
            guard.armed = false;
            return Err(DriverError::PathOutsideWorkspace { path: shown });
        }
        if err_head.starts_with(CWD_MISSING) {
            guard.armed = false;
            return Err(DriverError::missing_cwd(&shown));
        }
        if err_head.starts_with(LEASE_GONE) {
            guard.armed = false;
            return Err(remote::lease_gone(site.lease_dir));
        }
    }
    let mut metadata = JsonMap::new();
    let ending = match code {
        Some(code) => Ending {
            exit_code: Some(code),
            signal: None,
            timed_out,
        },
        None if timed_out => Ending {
            exit_code: None,
            signal: Some(signal_name(if sent == Some("KILL") { 9 } else { 15 })),
            timed_out,
        },
        None => {
            if !site.host.alive(&remote.session).await {
                site.host.forget(&remote.session).await;
                // The watchdog kills the command once `sshd` notices, which may be never
                // (a network that dropped every packet, no `ClientAliveInterval`): the
                // next master kills it too.
                site.host.orphan(run.clone());
                guard.armed = false;
                return Err(site.host.unavailable(
                    "the connection broke during the command",
                    format!("{} {:?}", request.command, request.args),
                ));
            }
            // OpenSSH's multiplexing protocol carries the exit status but not the
            // exit-signal message: the command was killed by a signal it does not name.
            metadata.insert("signal".into(), "unknown".into());
            Ending {
                exit_code: None,
                signal: None,
                timed_out,
            }
        }
    };
    guard.armed = false;
    Ok(ExecuteResult::from_capped(
        ending,
        out,
        err,
        started.elapsed(),
        metadata,
    ))
}

#[async_trait]
impl Execute for SshDriver {
    async fn execute(&self, context: &LeaseContext, request: ExecuteRequest) -> Result<ExecuteResult, DriverError> {
        // Refused rather than run as the login user behind the caller's back.
        if let Some(user) = &request.user {
            return Err(crate::processes::user_refused(user));
        }
        let place = self.place(context).await?;
        self.exec_at(&place, request).await
    }
}
