//! One supervisor (`envrt-agent`) per lease: where its binary is, where its socket lives,
//! starting it inside the lease's containment and ending it with the lease.
//!
//! The agent's directory is `{root}/.agent-{id}` (mode 0700, beside the workspace so
//! that no sync or command in the workspace can remove it by accident), its socket
//! `sock` in it (0600, made by the agent; the names are short because a unix socket's
//! path is bounded to 107 bytes). The agent is started through the same
//! join script as a command, so it runs inside a cgroup of the lease's and everything it
//! starts stays there; its environment is a command's (the allow-listed host variables,
//! `HOME` = the workspace) and its working directory the workspace, so without cgroups
//! the `/proc` scan of release, expiry and `gc` finds it and all it started. It runs in a
//! process group of its own with `--subreaper`, so it does not die with the program that
//! started it, and reaps what its processes leave behind.
//!
//! Each supervisor of a lease numbers its processes above every id an earlier one could
//! have given (a generation counted in `generation` in the agent's directory, see
//! [`envrt_driver_agent::next_generation`]), so a supervisor killed by a command and
//! started again by the next spawn never gives an id that named another process.

use std::path::{Path, PathBuf};
use std::time::Duration;

use envrt_driver_agent::{id_args, locate, next_generation};
use envrt_driver_api::DriverError;
use tokio::io::AsyncBufReadExt;

use crate::process::containment::{Containment, JOIN_SCRIPT};
use crate::workspace::{create_private_dir, lease_dir_name};

/// How long a starting agent has to say it listens.
const START_BOUND: Duration = Duration::from_secs(10);

/// The agent directory of a lease.
pub(crate) fn dir(root: &Path, lease: &str) -> Result<PathBuf, DriverError> {
    lease_dir_name(lease)?;
    Ok(root.join(format!(".agent-{lease}")))
}

/// The socket of a lease's agent.
pub(crate) fn socket(root: &Path, lease: &str) -> Result<PathBuf, DriverError> {
    Ok(dir(root, lease)?.join("sock"))
}

/// What the agent needs to start.
pub(crate) struct Start<'a> {
    pub(crate) root: &'a Path,
    pub(crate) lease: &'a str,
    pub(crate) workspace: &'a Path,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) containment: &'a Containment,
}

/// Starts the lease's agent and waits until it listens. The caller holds the lease's
/// start lock, so one agent starts per lease.
pub(crate) async fn start(site: &Start<'_>) -> Result<(), DriverError> {
    let binary = locate().map_err(|message| DriverError::Unavailable { message, source: None })?;
    let dir = dir(site.root, site.lease)?;
    match create_private_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(DriverError::io(format!("cannot create {}", dir.display()), e)),
    }
    let socket = socket(site.root, site.lease)?;
    // A socket left by an agent that died: nobody answers on it.
    let _ = std::fs::remove_file(&socket);
    let procs = match site.containment.prepare(site.lease) {
        Some(cgroup) => cgroup.join("cgroup.procs"),
        None => PathBuf::from("/dev/null"),
    };
    let generation = next_generation(&dir.join("generation"))
        .map_err(|e| DriverError::io("cannot record the process supervisor's generation", e))?;
    let log = std::fs::File::create(dir.join("agent.log"))
        .map_err(|e| DriverError::io(format!("cannot create {}", dir.join("agent.log").display()), e))?;
    let mut command = tokio::process::Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(JOIN_SCRIPT)
        .arg("sh")
        .arg(&procs)
        .arg("drop")
        .arg(&binary)
        .arg("--socket")
        .arg(&socket)
        .arg("--subreaper")
        // A lease directory removed without a release (its state deleted with it) must
        // not leave the supervisor and its processes running for ever.
        .arg("--exit-when-socket-gone")
        .args(id_args(generation))
        .env_clear()
        .envs(site.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(site.workspace)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        .process_group(0);
    // Nothing of the host program's but stdio reaches the agent, and so none of the
    // processes it starts (as for a command of the driver's own execute path).
    crate::process::fds::exec_with_stdio_only(command.as_std_mut(), std::ffi::OsStr::new("sh"))
        .map_err(|e| DriverError::io(format!("cannot start {}", binary.display()), e))?;
    let mut child = command
        .spawn()
        .map_err(|e| DriverError::io(format!("cannot start {}", binary.display()), e))?;
    let stdout = child.stdout.take().expect("piped");
    let mut line = String::new();
    let mut reader = tokio::io::BufReader::new(stdout);
    let said = tokio::time::timeout(START_BOUND, reader.read_line(&mut line)).await;
    let expected = format!("envrt-agent listening on {}", socket.display());
    match said {
        Ok(Ok(_)) if line.trim_end() == expected => {
            std::fs::write(dir.join("agent.pid"), child.id().unwrap_or(0).to_string())
                .map_err(|e| DriverError::io("cannot record the supervisor's pid", e))?;
            Ok(())
        }
        _ => {
            let _ = child.start_kill();
            let why = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
            Err(DriverError::other(format!(
                "the process supervisor of lease {} did not start: {}",
                site.lease,
                why.trim()
            )))
        }
    }
}

/// Ends the lease's agent (SIGKILL, when its pid still runs the agent of this socket) and
/// removes its directory; the lease's containment kills what it started.
pub(crate) fn stop(root: &Path, lease: &str) {
    let Ok(dir) = dir(root, lease) else { return };
    if let Ok(pid) = std::fs::read_to_string(dir.join("agent.pid"))
        && let Ok(pid) = pid.trim().parse::<i32>()
        && pid > 0
    {
        let socket = dir.join("sock");
        let ours = std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
            cmdline
                .split(|b| *b == 0)
                .any(|arg| arg == socket.as_os_str().as_encoded_bytes())
        });
        if ours {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
