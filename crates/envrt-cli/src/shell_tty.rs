//! `envrt shell` on a real terminal: where the lease grants `persistentProcessSessions` and
//! stdin is a terminal, the command runs as a process with a pseudo-terminal of this
//! terminal's size (contract section 9), so it has a controlling terminal (`tty` prints a
//! `/dev/pts/N`, `stty size` the size), the far side echoes and edits lines, Ctrl-C in the
//! input interrupts its foreground job, and full-screen programs (`vi`, `top`, Python's
//! REPL) work. This terminal is put in raw mode (restored on every way out) and its size
//! changes (SIGWINCH) are passed on; the session ends with the command's exit code (128+n
//! for signal n). `TERM` is passed on when set.
//!
//! A SIGHUP (the terminal closed), SIGTERM or SIGINT to envrt kills the command's process
//! group before envrt returns 128+n, so nothing is left running on a lease the shell did
//! not make (its own ephemeral lease is released by the caller either way).

use std::collections::BTreeMap;
use std::io::Write;

use envrt::core::error::{RuntimeError, UnsupportedOperation};
use envrt::core::process::{Offsets, OutputEvent, SpawnRequest, StdinMode, TtySize};
use nix::sys::termios::{self, SetArg, Termios};
use tokio::io::AsyncReadExt;

use crate::app::App;
use crate::error::CliError;
use crate::exec::Interrupts;

/// Puts the terminal on stdin into full raw mode (the far side is a terminal that echoes
/// and edits) and restores it when dropped.
struct RawTerminal {
    saved: Termios,
}

impl RawTerminal {
    fn enter() -> Option<RawTerminal> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(&stdin).ok()?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(&stdin, SetArg::TCSANOW, &raw).ok()?;
        Some(RawTerminal { saved })
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin(), SetArg::TCSANOW, &self.saved);
    }
}

/// This terminal's size, 24x80 when stdin has none (or a zero one).
fn size_of_stdin() -> TtySize {
    match rustix::termios::tcgetwinsize(std::io::stdin()) {
        Ok(size) if size.ws_row > 0 && size.ws_col > 0 => TtySize {
            rows: size.ws_row,
            cols: size.ws_col,
        },
        _ => TtySize { rows: 24, cols: 80 },
    }
}

/// The request for `argv` on a terminal of this terminal's size.
fn request(argv: Vec<String>) -> SpawnRequest {
    let mut env = BTreeMap::new();
    if let Ok(term) = std::env::var("TERM") {
        env.insert("TERM".to_owned(), term.into());
    }
    SpawnRequest {
        argv,
        env,
        stdin: StdinMode::Null,
        tty: Some(size_of_stdin()),
        ..Default::default()
    }
}

/// Runs `argv` on a terminal in `lease`; `Ok(None)` when the lease has no process sessions
/// (the caller then opens a duplex channel instead), before anything was started.
pub(crate) async fn session(
    app: &App,
    lease: &str,
    argv: Vec<String>,
    interrupts: &mut Interrupts,
) -> Result<Option<u8>, CliError> {
    let info = match app.runtime.spawn(lease, request(argv)).await {
        Ok(info) => info,
        Err(RuntimeError::Unsupported {
            operation: UnsupportedOperation::ProcessSessions,
            ..
        }) => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    let id = info.id.to_string();
    let raw = RawTerminal::enter();
    let outcome = pump(app, &id, interrupts).await;
    drop(raw);
    outcome.map(Some)
}

/// Copies the terminal's keys to the process and its output here until it ends.
async fn pump(app: &App, id: &str, interrupts: &mut Interrupts) -> Result<u8, CliError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut output = app.runtime.output(id, &Offsets::default()).await?;
    let mut resized = signal(SignalKind::window_change()).ok();
    let mut stdin = tokio::io::stdin();
    let mut buf = vec![0u8; 16 * 1024];
    let mut stdin_open = true;
    loop {
        tokio::select! {
            event = output.next() => match event? {
                Some(OutputEvent::Chunk(chunk)) => {
                    let mut out = std::io::stdout().lock();
                    // A closed stdout: the command keeps running until its input ends.
                    let _ = out.write_all(&chunk.bytes).and_then(|()| out.flush());
                }
                Some(OutputEvent::Exit(info)) => {
                    return Ok(match info.status.exit_code() {
                        Some(code) => (code & 0xff) as u8,
                        None => 1,
                    });
                }
                None => return Err(CliError::Failure(format!("envrt: the output of {id} ended before its exit"))),
            },
            read = stdin.read(&mut buf), if stdin_open => match read {
                Ok(0) | Err(_) => {
                    stdin_open = false;
                    // The terminal's end of input, as the far side's EOF character.
                    let _ = app.runtime.close_stdin(id).await;
                }
                Ok(n) => {
                    // The process may have just exited: its exit comes through the output.
                    let _ = app.runtime.write_stdin(id, &buf[..n]).await;
                }
            },
            Some(()) = async { resized.as_mut()?.recv().await } => {
                let size = size_of_stdin();
                let _ = app.runtime.resize(id, size.rows, size.cols).await;
            }
            signal = interrupts.next() => {
                let _ = app.runtime.signal(id, "KILL").await;
                crate::say!("\r\nenvrt: interrupted by {}", envrt::core::execute::signal_name(signal));
                return Ok((128 + signal) as u8);
            }
        }
    }
}
