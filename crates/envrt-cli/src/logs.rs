//! `envrt logs`: a persistent process's output from an absolute offset, replayed from what
//! its supervisor holds; with `--follow`, live until the process ends.
//!
//! Without `--follow` it prints what the process had written when the command started and
//! returns. stdout (or a terminal's stream) goes to stdout, stderr to stderr. An offset no
//! longer held (or past the end) is refused with the runtime's exact text, exit 2.

use std::io::Write;

use clap::Args;
use envrt::config::Paths;
use envrt::core::process::{Offsets, OutputEvent, ProcessStream};

use crate::app::App;
use crate::error::CliError;

#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    /// The process id (`LEASE/N`, as `envrt spawn` printed it).
    #[arg(value_name = "PROC")]
    pub(crate) process: String,
    /// Start at this byte offset of the stream(s) (default: the oldest byte still held).
    #[arg(long, value_name = "OFFSET")]
    pub(crate) from: Option<u64>,
    /// Keep printing until the process ends.
    #[arg(short = 'f', long)]
    pub(crate) follow: bool,
    /// Only this stream: stdout, stderr (or tty).
    #[arg(long, value_name = "STREAM")]
    pub(crate) stream: Option<ProcessStream>,
}

pub(crate) fn emit(stream: ProcessStream, bytes: &[u8]) {
    // A closed reader is not an error of ours (see `output`).
    let _ = match stream {
        ProcessStream::Stderr => std::io::stderr().write_all(bytes),
        _ => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes).and_then(|()| out.flush())
        }
    };
}

pub(crate) async fn run(paths: &Paths, args: LogsArgs) -> Result<u8, CliError> {
    let app = App::open(paths).await?;
    let info = app.runtime.process(&args.process).await?;
    let mut from = Offsets::default();
    if let Some(offset) = args.from {
        for held in &info.streams {
            if args.stream.is_none_or(|s| s == held.stream) {
                from = from.with(held.stream, offset);
            }
        }
        if let Some(stream) = args.stream {
            from = from.with(stream, offset);
        }
    }
    // Without --follow: stop at what each stream had written by now.
    let ends: Vec<(ProcessStream, u64)> = info.streams.iter().map(|s| (s.stream, s.written)).collect();
    let mut output = app.runtime.output(&args.process, &from).await?;
    let done = |ends: &[(ProcessStream, u64)], cursor: &[(ProcessStream, u64)]| {
        ends.iter()
            .all(|(s, end)| cursor.iter().find(|(c, _)| c == s).is_some_and(|(_, at)| at >= end))
    };
    let mut cursor: Vec<(ProcessStream, u64)> = info
        .streams
        .iter()
        .map(|s| (s.stream, from.get(s.stream).unwrap_or(s.dropped)))
        .collect();
    if !args.follow && done(&ends, &cursor) {
        return Ok(0);
    }
    while let Some(event) = output.next().await? {
        match event {
            OutputEvent::Chunk(chunk) => {
                if args.stream.is_none_or(|s| s == chunk.stream) {
                    emit(chunk.stream, &chunk.bytes);
                }
                if let Some(at) = cursor.iter_mut().find(|(s, _)| *s == chunk.stream) {
                    at.1 = chunk.offset + chunk.bytes.len() as u64;
                }
                if !args.follow && done(&ends, &cursor) {
                    break;
                }
            }
            OutputEvent::Exit(_) => break,
        }
    }
    Ok(0)
}
