//! `envrt attach`: a persistent process's output, live, with this terminal's stdin fed to
//! it. The detach key (`Ctrl-]`, byte 0x1d) in the input ends the attachment and leaves
//! the process running (exit 0); the end of stdin closes the process's stdin; when the
//! process ends, attach exits with its code (128+n for signal n).

use std::io::Write;

use clap::Args;
use envrt::config::Paths;
use envrt::core::process::{Offsets, OutputEvent, ProcessStream};
use tokio::io::AsyncReadExt;

use crate::app::App;
use crate::error::CliError;

/// The detach key: `Ctrl-]`.
pub(crate) const DETACH: u8 = 0x1d;

#[derive(Debug, Args)]
pub(crate) struct AttachArgs {
    /// The process id (`LEASE/N`).
    #[arg(value_name = "PROC")]
    pub(crate) process: String,
    /// Replay from this offset of each stream (default: only what comes from now on).
    #[arg(long, value_name = "OFFSET")]
    pub(crate) from: Option<u64>,
}

pub(crate) fn emit(stream: ProcessStream, bytes: &[u8]) {
    let _ = match stream {
        ProcessStream::Stderr => std::io::stderr().write_all(bytes),
        _ => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes).and_then(|()| out.flush())
        }
    };
}

pub(crate) async fn run(paths: &Paths, args: AttachArgs) -> Result<u8, CliError> {
    let app = App::open(paths).await?;
    let info = app.runtime.process(&args.process).await?;
    let mut from = Offsets::default();
    for held in &info.streams {
        from = from.with(held.stream, args.from.unwrap_or(held.written));
    }
    let mut output = app.runtime.output(&args.process, &from).await?;
    let mut stdin = tokio::io::stdin();
    let mut buf = vec![0u8; 64 * 1024];
    let mut stdin_open = true;
    loop {
        tokio::select! {
            event = output.next() => match event? {
                Some(OutputEvent::Chunk(chunk)) => emit(chunk.stream, &chunk.bytes),
                Some(OutputEvent::Exit(info)) => {
                    return Ok(info.status.exit_code().map_or(1, |code| (code & 0xff) as u8));
                }
                None => return Ok(1),
            },
            read = stdin.read(&mut buf), if stdin_open => {
                let n = read.map_err(|e| CliError::Failure(format!("envrt: cannot read stdin: {e}")))?;
                if n == 0 {
                    stdin_open = false;
                    app.runtime.close_stdin(&args.process).await?;
                    continue;
                }
                let data = &buf[..n];
                let (before, detach) = match data.iter().position(|b| *b == DETACH) {
                    Some(at) => (&data[..at], true),
                    None => (data, false),
                };
                if !before.is_empty() {
                    app.runtime.write_stdin(&args.process, before).await?;
                }
                if detach {
                    crate::say!("envrt: detached from {}; it keeps running", args.process);
                    return Ok(0);
                }
            }
        }
    }
}
