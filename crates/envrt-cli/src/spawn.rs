//! `envrt spawn`: start a process that outlives this invocation and print its id.
//!
//! The process runs on `--lease`, or on a new lease of the environment that no holder
//! keeps (so `envrt gc` leaves it alone; it ends at the environment's `ttl`, or when it
//! is released). The id, `{lease id}/{n}`, is the last line on stdout; every other verb
//! (`ps`, `logs`, `kill`, `wait`) finds the process from it, in any later invocation.

use std::collections::BTreeMap;

use clap::Args;
use envrt::config::Paths;
use envrt::core::process::{SpawnRequest, StdinMode, TtySize};
use envrt::{LeasePolicy, LeaseStatus};

use crate::Target;
use crate::app::App;
use crate::error::CliError;
use crate::exec::{parse_env, parse_timeout, read_env_files};

#[derive(Debug, Args)]
pub(crate) struct SpawnArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// Spawn on this existing lease instead of acquiring a new one (which is left running).
    #[arg(long, value_name = "ID", conflicts_with_all = ["env_id", "driver"])]
    pub(crate) lease: Option<String>,
    /// Give the process a pseudo-terminal ($LINES x $COLUMNS when set, else 24x80).
    #[arg(long)]
    pub(crate) tty: bool,
    /// Bytes of output held per stream for replay: `65536`, `64K`, `8M`, `1G` (default 8M).
    #[arg(long, value_name = "SIZE")]
    pub(crate) keep: Option<String>,
    /// Give the process a stdin pipe (fed by `envrt attach`); else it reads /dev/null.
    #[arg(long, conflicts_with = "tty")]
    pub(crate) stdin: bool,
    /// Working directory in the environment.
    #[arg(long, value_name = "DIR")]
    pub(crate) cwd: Option<String>,
    /// Run the process as this user of the environment: NAME, UID, NAME:GROUP or UID:GID.
    #[arg(long, value_name = "USER")]
    pub(crate) user: Option<String>,
    /// An environment variable for the process (repeatable).
    #[arg(short = 'e', long = "env", value_name = "K=V")]
    pub(crate) env: Vec<String>,
    /// Read environment variables (secrets) from a file of `K=V` lines (repeatable).
    #[arg(long, value_name = "FILE")]
    pub(crate) env_file: Vec<std::path::PathBuf>,
    /// Kill the process's whole group after this long: `90`, `500ms`, `2m`.
    #[arg(long, value_name = "DURATION")]
    pub(crate) timeout: Option<String>,
    /// The same key with the same command returns the same process.
    #[arg(long, value_name = "KEY")]
    pub(crate) idempotency_key: Option<String>,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    pub(crate) command: Vec<String>,
}

/// Parses `--keep`: bytes, or a number with `K`, `M` or `G` (binary multiples).
pub(crate) fn parse_size(raw: &str) -> Result<u64, CliError> {
    let bad = || {
        CliError::Usage(format!(
            "envrt: --keep expects a size like 65536, 64K or 8M, got \"{raw}\""
        ))
    };
    envrt::core::process::parse_size(raw).ok_or_else(bad)
}

/// The terminal size for `--tty`: `$LINES` x `$COLUMNS` when both are set, else 24x80.
pub(crate) fn terminal_size() -> TtySize {
    let var = |name| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<u16>().ok())
            .filter(|n| *n > 0)
    };
    match (var("LINES"), var("COLUMNS")) {
        (Some(rows), Some(cols)) => TtySize { rows, cols },
        _ => TtySize { rows: 24, cols: 80 },
    }
}

pub(crate) async fn run(paths: &Paths, args: SpawnArgs) -> Result<u8, CliError> {
    let mut env = BTreeMap::new();
    read_env_files(&args.env_file, &mut env)?;
    env.extend(parse_env(&args.env)?);
    let timeout = parse_timeout(args.timeout.as_deref())?;
    let keep = args.keep.as_deref().map(parse_size).transpose()?;
    let app = App::open_for(paths, args.target.driver.as_deref()).await?;
    let (lease, own) = match &args.lease {
        Some(id) => (app.existing_lease(id).await?, false),
        None => {
            let environment = app.environment_id(&args.target).await?;
            // No holder: the lease outlives this invocation on purpose.
            let lease = app
                .acquire(&environment, LeasePolicy::Ephemeral, None, None, None, "envrt spawn")
                .await?;
            (lease, true)
        }
    };
    let request = SpawnRequest {
        argv: args.command,
        cwd: args.cwd,
        user: args.user,
        env,
        stdin: if args.stdin { StdinMode::Piped } else { StdinMode::Null },
        tty: args.tty.then(terminal_size),
        keep,
        timeout,
        idempotency_key: args.idempotency_key,
    };
    match app.runtime.spawn(&lease.id, request).await {
        Ok(info) => {
            if own {
                crate::say!("envrt: spawned on new lease {}", lease.id);
            }
            crate::out!("{}", info.id);
            Ok(0)
        }
        Err(error) => {
            // A lease made for nothing is not left behind.
            if own {
                app.release_own(&lease, LeaseStatus::Released).await;
            }
            Err(error.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(parse_size("65536").unwrap(), 65536);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("8m").unwrap(), 8 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        for bad in ["", "K", "0", "1T", "-1", "1.5M", "x"] {
            assert_eq!(
                parse_size(bad).unwrap_err().to_string(),
                format!("envrt: --keep expects a size like 65536, 64K or 8M, got \"{bad}\"")
            );
        }
    }
}
