//! `envrt kill` and `envrt wait`: signal a persistent process's group, and wait for its
//! end, exiting with its code (128+n when signal n ended it).

use std::time::Duration;

use clap::Args;
use envrt::config::Paths;
use envrt::core::process::ProcessStatus;

use crate::app::App;
use crate::error::CliError;

#[derive(Debug, Args)]
pub(crate) struct KillArgs {
    /// The signal, by name (`TERM`, `SIGINT`, `kill`) or number (default TERM).
    #[arg(short = 's', long, value_name = "SIGNAL", default_value = "TERM")]
    pub(crate) signal: String,
    /// The process id (`LEASE/N`).
    #[arg(value_name = "PROC")]
    pub(crate) process: String,
}

#[derive(Debug, Args)]
pub(crate) struct WaitArgs {
    /// The process id (`LEASE/N`).
    #[arg(value_name = "PROC")]
    pub(crate) process: String,
    /// Give up after this long (exit 124 while the process still runs): `90`, `500ms`.
    #[arg(long, value_name = "DURATION")]
    pub(crate) timeout: Option<String>,
}

pub(crate) async fn kill(paths: &Paths, args: KillArgs) -> Result<u8, CliError> {
    let app = App::open(paths).await?;
    app.runtime.signal(&args.process, &args.signal).await?;
    Ok(0)
}

/// The exit code standing for a status: the code, 128+n for signal n.
pub(crate) fn code_of(status: ProcessStatus) -> u8 {
    match status.exit_code() {
        Some(code) => (code & 0xff) as u8,
        None => crate::exec::EXIT_TIMEOUT,
    }
}

pub(crate) async fn wait(paths: &Paths, args: WaitArgs) -> Result<u8, CliError> {
    let timeout: Option<Duration> = crate::exec::parse_timeout(args.timeout.as_deref())?;
    let app = App::open(paths).await?;
    let status = app.runtime.wait_process(&args.process, timeout).await?;
    if status == ProcessStatus::Lost {
        return Err(CliError::Failure(format!(
            "envrt: process {} was lost: its supervisor no longer knows it",
            args.process
        )));
    }
    Ok(code_of(status))
}
