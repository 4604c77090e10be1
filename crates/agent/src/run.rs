//! The agent's main loop: the socket (a 0700 directory, a 0600 socket), the reaper on
//! SIGCHLD, orphan reaping as PID 1 or a subreaper, and the end on SIGTERM or SIGINT.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::path::PathBuf;
use std::sync::Arc;

use rustix::fs::Mode;
use tokio::net::UnixListener;
use tokio::signal::unix::{SignalKind, signal};

use crate::table::{Agent, Config};

/// The binary's options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Where to listen.
    pub socket: PathBuf,
    /// Become a subreaper (implied when the agent is PID 1).
    pub subreaper: bool,
    /// The bound on processes held.
    pub max_processes: u64,
    /// The bound on replay bytes reserved.
    pub max_buffer_bytes: u64,
    /// Forwarders from the lease's loopback to sockets the host bound in (`--forward`).
    pub forwards: Vec<crate::forward::Forward>,
    /// The first process's id.
    pub first_id: u64,
    /// End (as on SIGTERM) once the socket it listens on is gone or replaced
    /// (`--exit-when-socket-gone`): a local lease's supervisor whose lease directory was
    /// removed without a release (its state and root deleted) would otherwise hold its
    /// processes for ever, out of everyone's reach.
    pub exit_when_socket_gone: bool,
}

/// How often an agent with `--exit-when-socket-gone` looks at its socket.
const SOCKET_LOOK: std::time::Duration = std::time::Duration::from_secs(2);

/// The socket file's identity (device, inode), or `None` when it is not there.
fn identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|meta| (meta.dev(), meta.ino()))
}

impl Options {
    /// Parses the command line (without the program name).
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let defaults = Config::default();
        let mut socket = None;
        let mut options = Options {
            socket: PathBuf::new(),
            subreaper: false,
            max_processes: defaults.max_processes,
            max_buffer_bytes: defaults.buffer_bound,
            forwards: Vec::new(),
            first_id: defaults.first_id,
            exit_when_socket_gone: false,
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| args.next().cloned().ok_or_else(|| format!("{name} needs a value"));
            let number = |name: &str, text: String| {
                text.parse::<u64>()
                    .map_err(|_| format!("{name} takes a whole number, not {text:?}"))
            };
            match arg.as_str() {
                "--socket" => socket = Some(PathBuf::from(value("--socket")?)),
                "--subreaper" => options.subreaper = true,
                "--exit-when-socket-gone" => options.exit_when_socket_gone = true,
                "--max-processes" => options.max_processes = number(arg, value(arg)?)?,
                "--max-buffer-bytes" => options.max_buffer_bytes = number(arg, value(arg)?)?,
                "--forward" => options.forwards.push(crate::forward::Forward::parse(&value(arg)?)?),
                "--first-id" => match number(arg, value(arg)?)? {
                    0 => return Err("--first-id takes a number from 1".to_owned()),
                    first => options.first_id = first,
                },
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        options.socket = socket.ok_or("--socket PATH is required")?;
        Ok(options)
    }
}

fn listen(path: &std::path::Path) -> Result<UnixListener, String> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty())
        && !dir.exists()
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(format!("{} exists and is not a socket", path.display()));
        }
        std::fs::remove_file(path).map_err(|error| format!("cannot remove {}: {error}", path.display()))?;
    }
    // The socket is created 0600: only the agent's user (the command's) may connect.
    let old = rustix::process::umask(Mode::from_raw_mode(0o177));
    let listener = UnixListener::bind(path);
    rustix::process::umask(old);
    listener.map_err(|error| format!("cannot listen on {}: {error}", path.display()))
}

/// Each process holds up to three descriptors in the agent: lift the soft limit to the hard.
fn raise_fd_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

/// Runs the agent until SIGTERM or SIGINT, which SIGKILL every process group it holds.
pub async fn run(options: Options) -> Result<(), String> {
    let pid1 = rustix::process::getpid().is_init();
    if options.subreaper && !pid1 {
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
            .map_err(|error| format!("cannot become a subreaper: {error}"))?;
    }
    let config = Config {
        max_processes: options.max_processes,
        buffer_bound: options.max_buffer_bytes,
        reaps_orphans: pid1 || options.subreaper,
        first_id: options.first_id,
        ..Config::default()
    };
    raise_fd_limit();
    let agent = Agent::new(config);
    // Registered before anything is spawned, so no child's SIGCHLD is missed.
    let mut children = signal(SignalKind::child()).map_err(|error| format!("cannot watch SIGCHLD: {error}"))?;
    let mut term = signal(SignalKind::terminate()).map_err(|error| format!("cannot watch SIGTERM: {error}"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|error| format!("cannot watch SIGINT: {error}"))?;
    let listener = listen(&options.socket)?;
    let bound = identity(&options.socket);
    let mut look = tokio::time::interval(SOCKET_LOOK);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Bound before the agent says it listens: a port in use fails the start.
    let mut forwards = Vec::with_capacity(options.forwards.len());
    for forward in &options.forwards {
        forwards.push(forward.bind().await?);
    }
    println!("envrt-agent listening on {}", options.socket.display());
    let _ = std::io::stdout().flush();
    let server = tokio::spawn(crate::server::serve(Arc::clone(&agent), listener));
    // Children that exited before the handler was in place (none, unless PID 1 inherited some).
    agent.reap();
    loop {
        tokio::select! {
            _ = children.recv() => agent.reap(),
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = look.tick(), if options.exit_when_socket_gone => {
                if identity(&options.socket) != bound {
                    break;
                }
            }
        }
    }
    agent.kill_all();
    server.abort();
    forwards.iter().for_each(tokio::task::JoinHandle::abort);
    // Another agent's socket in its place is left alone.
    if identity(&options.socket) == bound {
        let _ = std::fs::remove_file(&options.socket);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, String> {
        Options::parse(&args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn the_first_id_is_1_unless_given_and_never_0() {
        assert_eq!(parse(&["--socket", "s"]).unwrap().first_id, 1);
        assert_eq!(parse(&["--socket", "s", "--first-id", "4097"]).unwrap().first_id, 4097);
        assert_eq!(
            parse(&["--socket", "s", "--first-id", "0"]).unwrap_err(),
            "--first-id takes a number from 1"
        );
        assert_eq!(
            parse(&["--socket", "s", "--first-id", "x"]).unwrap_err(),
            "--first-id takes a whole number, not \"x\""
        );
    }
}
