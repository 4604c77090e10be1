//! `envrt shell`: an interactive session. Where the lease grants `persistentProcessSessions`
//! and stdin is a terminal, the command gets a real pseudo-terminal (`shell_tty`). Else it
//! runs over a duplex channel: when stdin is a terminal it is switched to raw mode
//! (restored on every way out), so keys such as Ctrl-C reach the command as bytes instead
//! of stopping envrt.
//!
//! The drivers' duplex channels are pipes, not terminals: nothing on the far side echoes
//! or turns Enter into a newline. So the raw mode keeps three cooked habits: typed keys
//! are echoed, Enter sends `\n`, and output `\n` starts a new line; and Ctrl-D closes the
//! command's input (EOF), as it would on a terminal. `--no-raw` keeps the terminal cooked
//! (local line editing; Ctrl-C then stops the session).

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use clap::Args;
use envrt::sqlite::holder::Holder;
use envrt::{DuplexChannel, LeasePolicy, LeaseStatus};
use nix::sys::termios::{self, SetArg, Termios};
use tokio::io::AsyncReadExt;

use crate::Target;
use crate::app::App;
use crate::error::CliError;
use envrt::config::Paths;

/// Ctrl-D.
const CTRL_D: u8 = 0x04;

/// The command a shell runs when none is given.
const DEFAULT_SHELL: [&str; 2] = ["/bin/sh", "-i"];

#[derive(Debug, Args)]
pub(crate) struct ShellArgs {
    #[command(flatten)]
    target: Target,
    /// Open the session on this existing lease instead of an ephemeral one.
    #[arg(long, value_name = "ID", conflicts_with_all = ["env_id", "driver"])]
    lease: Option<String>,
    /// Keep the terminal in its normal (cooked) mode.
    #[arg(long)]
    no_raw: bool,
    /// The command (argv) to run; default `/bin/sh -i`.
    #[arg(last = true, value_name = "ARGV")]
    argv: Vec<String>,
}

/// Puts the terminal on stdin into raw mode and restores it when dropped.
struct RawMode {
    saved: Termios,
}

impl RawMode {
    fn enter() -> Option<RawMode> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(&stdin).ok()?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        // The far side is a pipe: echo locally, send Enter as \n, print \n as a new line.
        raw.input_flags |= termios::InputFlags::ICRNL;
        raw.output_flags |= termios::OutputFlags::OPOST | termios::OutputFlags::ONLCR;
        raw.local_flags |= termios::LocalFlags::ECHO;
        termios::tcsetattr(&stdin, SetArg::TCSANOW, &raw).ok()?;
        Some(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin(), SetArg::TCSANOW, &self.saved);
    }
}

pub(crate) async fn run(paths: &Paths, args: ShellArgs) -> Result<u8, CliError> {
    let mut interrupts = crate::exec::Interrupts::install();
    let app = App::open_for(paths, args.target.driver.as_deref()).await?;
    let (lease, own) = match &args.lease {
        Some(id) => (app.existing_lease(id).await?, false),
        None => {
            let environment = app.environment_id(&args.target).await?;
            let lease = app
                .acquire(
                    &environment,
                    LeasePolicy::Ephemeral,
                    None,
                    Holder::current().ok(),
                    None,
                    "envrt shell",
                )
                .await?;
            (lease, true)
        }
    };
    let argv: Vec<String> = if args.argv.is_empty() {
        DEFAULT_SHELL.iter().map(|s| s.to_string()).collect()
    } else {
        args.argv
    };
    // A real terminal where the lease has process sessions and this side is one.
    let on_terminal = match !args.no_raw && std::io::stdin().is_terminal() {
        true => crate::shell_tty::session(&app, &lease.id, argv.clone(), &mut interrupts).await,
        false => Ok(None),
    };
    let outcome = match on_terminal {
        Ok(Some(code)) => Ok(code),
        Ok(None) => match app.runtime.open_duplex_channel(&lease.id, &argv).await {
            Ok(channel) => match session(Arc::from(channel), !args.no_raw, &mut interrupts).await {
                // The container went while the stream ran (an engine restart removes a
                // stopped one): the lease is lost, said as any other call says it.
                Err(CliError::Runtime(e)) => Err(CliError::Runtime(app.runtime.on_lease_error(&lease.id, e).await)),
                other => other,
            },
            Err(e) => Err(e.into()),
        },
        Err(e) => Err(e),
    };
    if own {
        app.release_own(&lease, LeaseStatus::Released).await;
    }
    outcome
}

pub(crate) async fn session(
    channel: Arc<dyn DuplexChannel>,
    raw: bool,
    interrupts: &mut crate::exec::Interrupts,
) -> Result<u8, CliError> {
    let raw_mode = if raw && std::io::stdin().is_terminal() {
        RawMode::enter()
    } else {
        None
    };
    let output = {
        let channel = Arc::clone(&channel);
        tokio::spawn(async move {
            while let Ok(Some(chunk)) = channel.read().await {
                let mut out = std::io::stdout().lock();
                if out.write_all(&chunk).and_then(|()| out.flush()).is_err() {
                    break;
                }
            }
        })
    };
    let eof_key = raw_mode.is_some();
    let input = {
        let channel = Arc::clone(&channel);
        tokio::spawn(async move {
            let mut stdin = tokio::io::stdin();
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match stdin.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        // In raw mode Ctrl-D arrives as a byte: treat it as end of input.
                        let (data, eof) = match buf[..n].iter().position(|b| eof_key && *b == CTRL_D) {
                            Some(at) => (&buf[..at], true),
                            None => (&buf[..n], false),
                        };
                        if !data.is_empty() && channel.write(data).await.is_err() {
                            return;
                        }
                        if eof {
                            break;
                        }
                    }
                }
            }
            let _ = channel.close_input().await;
        })
    };
    let ended = tokio::select! {
        exit = channel.wait() => Ok(exit),
        signal = interrupts.next() => Err(signal),
    };
    if ended.is_err() {
        // A signal (a closed terminal's SIGHUP, a SIGTERM) ends the session now: the
        // command is stopped first, so the output below ends instead of waiting for it.
        let _ = channel.stop().await;
    }
    // Drain what the command wrote before it exited, then free the channel.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), output).await;
    input.abort();
    let _ = channel.close().await;
    drop(raw_mode);
    match ended {
        Ok(Ok(exit)) => match exit.exit_code {
            Some(code) => Ok((code & 0xff) as u8),
            None if exit.transport_closed => Err(CliError::Failure(
                "envrt: the environment's transport closed before the command exited".into(),
            )),
            None => Err(CliError::Failure(
                "envrt: the session ended without an exit code".into(),
            )),
        },
        Ok(Err(e)) => Err(CliError::Runtime(e.into())),
        Err(signal) => {
            crate::say!("envrt: interrupted by {}", envrt::core::execute::signal_name(signal));
            Ok((128 + signal) as u8)
        }
    }
}
