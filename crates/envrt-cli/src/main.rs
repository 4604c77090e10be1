//! `envrt`: lease environments, run commands, copy files and open shells from the
//! command line, over the envrt runtime with a durable SQLite lease store.
//!
//! Exit codes: a command run by `exec` or `shell` passes its own code through (128+n when
//! a signal ended it, 124 on `--timeout`, 127 when the program does not exist). The tool's
//! own outcomes: 0 success, 1 a failure (driver, store, I/O), 2 a refusal or a usage error
//! (the runtime's exact refusal text, or the argument that is wrong, on stderr).

#[macro_use]
mod output;

mod app;
mod attach;
mod caps;
mod cp;
mod cp_merge;
mod cp_progress;
mod doctor;
mod error;
mod exec;
mod expose;
mod gc_report;
mod isolation;
mod lease;
mod lease_fork;
mod lease_idle;
mod lease_ingress;
mod lease_pause;
mod lease_scope;
mod lease_show;
mod logs;
mod network;
mod ps;
mod serve;
mod server;
mod shell;
mod shell_tty;
mod signal;
mod spawn;
mod template;
mod token;
mod via_server;
mod via_server_attach;
mod via_server_cp;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::error::CliError;

/// Lease execution environments, run commands in them, move files, open shells.
#[derive(Debug, Parser)]
#[command(
    name = "envrt",
    version,
    after_help = "Exit codes: exec and shell pass the command's code through (128+n for signal n, \
                  124 on --timeout, 127 for a missing program); otherwise 0 success, 1 failure, \
                  2 refusal or usage error (the refusal's exact text is on stderr)."
)]
struct Cli {
    /// The environments file; else $ENVRT_CONFIG, else ./envrt.toml when present. Without
    /// one, the environment `local` (driver `local`) still exists.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Where the lease store and local workspaces live; else $ENVRT_STATE_DIR, else
    /// $XDG_STATE_HOME/envrt, else ~/.local/state/envrt.
    #[arg(long, global = true, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Act through an `envrt serve` at this URL (`unix:PATH` or `http://HOST:PORT`) with
    /// the token in $ENVRT_TOKEN: lease acquire/list/release/destroy/network, exec, spawn,
    /// ps, logs, kill, wait and cp.
    #[arg(long, global = true, value_name = "URL", env = "ENVRT_SERVER")]
    server: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one command in an environment; exits with the command's exit code.
    Exec(exec::ExecArgs),
    /// An interactive session over a duplex channel (raw terminal when stdin is one).
    Shell(shell::ShellArgs),
    /// Copy a file or directory into or out of a lease: `lease:ID:/path` names the lease side.
    Cp(cp::CpArgs),
    /// Acquire, list, release and destroy leases.
    #[command(subcommand)]
    Lease(lease::LeaseCommand),
    /// Capture a lease as a template, list and delete templates.
    #[command(subcommand)]
    Template(template::TemplateCommand),
    /// Release active leases whose holder process is gone, and retry failed clean-ups.
    Gc(lease::GcArgs),
    /// The nine-key capability matrix of the configured environments.
    Caps(caps::CapsArgs),
    /// Check the Docker engine, bwrap, the worker binaries and the lease store.
    Doctor(doctor::DoctorArgs),
    /// Start a process that outlives this invocation; prints its id on the last line.
    Spawn(spawn::SpawnArgs),
    /// List persistent processes (of one lease, or of every active lease).
    Ps(ps::PsArgs),
    /// Print a persistent process's output from an offset (`--follow`: until it ends).
    Logs(logs::LogsArgs),
    /// Feed stdin to a persistent process and print its output live (Ctrl-] detaches).
    Attach(attach::AttachArgs),
    /// Send a signal to a persistent process's group.
    Kill(signal::KillArgs),
    /// Wait for a persistent process to end; exits with its code (128+n for signal n).
    Wait(signal::WaitArgs),
    /// Serve a port inside a lease on the host until the lease ends (prints where).
    Expose(expose::ExposeArgs),
    /// Serve the runtime over HTTP and WebSocket under /v1/ (see docs/serve.md).
    Serve(serve::ServeArgs),
    /// Create, list and revoke the service's bearer tokens.
    #[command(subcommand)]
    Token(token::TokenCommand),
}

/// Which environment an operation targets.
#[derive(Debug, Clone, Args, Default)]
pub(crate) struct Target {
    /// The environment id (from envrt.toml, or `local`).
    #[arg(long, value_name = "ID", conflicts_with = "driver")]
    pub(crate) env_id: Option<String>,
    /// Use the first configured environment with this driver key, or an unconfigured one
    /// named after the key.
    #[arg(long, value_name = "KEY")]
    pub(crate) driver: Option<String>,
}

/// `1 file`, `2 files`: a count with its noun in the right number.
pub(crate) fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            say!("envrt: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let outcome = runtime.block_on(run(cli));
    // Stdin readers may still sit in a blocking read; do not wait for them.
    runtime.shutdown_background();
    match outcome {
        // The reader of stdout quit: as a shell reports `ls | head`.
        Ok(0) if output::stdout_closed() => ExitCode::from(141),
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            say!("{error}");
            if let Some(hint) = error.hint() {
                say!("{hint}");
            }
            ExitCode::from(error.exit_code())
        }
    }
}

async fn run(cli: Cli) -> Result<u8, CliError> {
    if let Some(url) = &cli.server {
        let server = server::Server::new(url, std::env::var(server::TOKEN_VAR).ok())?;
        return via_server::run(&server, cli.command).await;
    }
    let paths = envrt::config::Paths::resolve(cli.config.as_deref(), cli.state_dir.as_deref())?;
    match cli.command {
        Command::Exec(args) => exec::run(&paths, args).await,
        Command::Shell(args) => shell::run(&paths, args).await,
        Command::Cp(args) => cp::run(&paths, args).await,
        Command::Lease(command) => lease::run(&paths, command).await,
        Command::Template(command) => template::run(&paths, command).await,
        Command::Gc(args) => lease::gc(&paths, args).await,
        Command::Caps(args) => caps::run(&paths, args).await,
        Command::Doctor(args) => doctor::run(&paths, args).await,
        Command::Spawn(args) => spawn::run(&paths, args).await,
        Command::Ps(args) => ps::run(&paths, args).await,
        Command::Logs(args) => logs::run(&paths, args).await,
        Command::Attach(args) => attach::run(&paths, args).await,
        Command::Kill(args) => signal::kill(&paths, args).await,
        Command::Wait(args) => signal::wait(&paths, args).await,
        Command::Expose(args) => expose::run(&paths, args).await,
        Command::Serve(args) => serve::run(&paths, args).await,
        Command::Token(command) => token::run(&paths, command).await,
    }
}
