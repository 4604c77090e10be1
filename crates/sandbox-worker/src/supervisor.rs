//! The extension `envrtStartProcessSupervisor`: one process supervisor (`envrt-agent`)
//! per lease, which holds the lease's persistent processes (contract section 9).
//!
//! The host makes a private directory for the lease's socket and names it; the worker
//! checks it (absolute, a directory and not a link, the worker's own user's, mode 0700),
//! hands it to the lease's host user, and starts
//! `envrt-agent --socket /.envrt-agent/sock --subreaper` in a sandbox of the lease built
//! exactly as a command's (the lease's host uid, no network, its own pid namespace, the
//! same mounts, limits and environment, under the sandbox init), with that directory bound
//! read-write at `/.envrt-agent` and the agent's binary read-only at `/.envrt-agent-bin`.
//! Both are bound from descriptors the worker opened (`bwrap --bind-fd`), so no path
//! above them has to be reachable by the lease's user. It answers once the agent says it
//! listens (10 s at most; else the agent's sandbox is killed and the call refused with
//! `The process supervisor of lease {id} did not start: {why}`).
//!
//! The supervisor's sandbox belongs to no command: it lives until the lease is released,
//! destroyed or expires (each kills every sandbox of the lease, whose pid namespace takes
//! every process the agent started, `setsid` escapees included), or until the worker
//! itself ends (`bwrap --die-with-parent`, as every sandbox of the worker). A second call
//! for a lease whose supervisor runs answers at once (`started: false`).
//!
//! The agent binary is found as every driver finds it (`ENVRT_AGENT`, beside the worker's
//! own executable or one directory up, `PATH`); a worker that finds none does not
//! advertise the extension, and the host then does not grant `persistentProcessSessions`.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use envrt_driver_api::DriverError;
use envrt_plugin_protocol::environment::{StartProcessSupervisorParams, StartProcessSupervisorResult};
use envrt_plugin_protocol::methods::SUPERVISOR_SOCKET;
use rustix::fs::{Mode, OFlags};
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

use super::exec::{FdBind, SpawnAs};
use super::rpc::RpcError;
use super::sandbox::{Sandbox, WORKSPACE};
use super::uids::Owner;

/// Where the socket directory appears inside the supervisor's sandbox.
pub(crate) const SOCKET_DIR_INSIDE: &str = "/.envrt-agent";
/// Where the agent's binary appears inside the supervisor's sandbox.
pub(crate) const AGENT_INSIDE: &str = "/.envrt-agent-bin";
/// How long a starting agent has to say it listens.
const START_BOUND: Duration = Duration::from_secs(10);
/// How much of the agent's stderr a refusal quotes.
const WHY_BYTES: usize = 2048;
/// How much of a running agent's stderr is logged.
const LOG_BYTES: u64 = 64 * 1024;

/// The supervisors this worker runs, by lease directory.
#[derive(Default)]
pub(crate) struct Supervisors {
    /// Held while one starts, so two calls for a lease start one agent.
    starting: tokio::sync::Mutex<()>,
    running: std::sync::Mutex<HashMap<PathBuf, Running>>,
}

/// A running supervisor: the socket directory it listens in, and its watcher (the task
/// that owns its `bwrap` and ends when it exits).
struct Running {
    socket_dir: PathBuf,
    /// The directory's (device, inode): a directory the host made anew at the same path
    /// (it could not reach the supervisor in the old one) is another.
    dir_id: (u64, u64),
    watcher: tokio::task::JoinHandle<()>,
}

impl Supervisors {
    /// Drops the record of the lease's supervisor (release, destroy, expiry: killing the
    /// lease's sandboxes ended it).
    pub(crate) fn forget(&self, lease_dir: &Path) {
        let gone = self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(lease_dir);
        if let Some(gone) = gone {
            gone.watcher.abort();
        }
    }

    /// Whether the lease at `lease_dir` has a live supervisor listening in the directory
    /// `socket_dir` whose (device, inode) is `dir_id`.
    fn live_in(&self, lease_dir: &Path, socket_dir: &Path, dir_id: (u64, u64)) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running
            .get(lease_dir)
            .is_some_and(|r| r.socket_dir == socket_dir && r.dir_id == dir_id && !r.watcher.is_finished())
    }

    /// Starts the lease's supervisor (see the module docs).
    pub(crate) async fn start(
        &self,
        sandbox: &Sandbox,
        agent: &Path,
        lease_dir: &Path,
        owner: Owner,
        params: StartProcessSupervisorParams,
    ) -> Result<serde_json::Value, RpcError> {
        let lease = lease_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let socket_dir = PathBuf::from(&params.socket_dir);
        let (dir, dir_id) = open_socket_dir(&socket_dir, owner)?;
        let _starting = self.starting.lock().await;
        if self.live_in(lease_dir, &socket_dir, dir_id) {
            return Ok(envrt_plugin_protocol::to_value(&StartProcessSupervisorResult {
                started: false,
            }));
        }
        // One listening elsewhere (the host made a new directory, as it could not reach
        // it there): it ends first, with what it held.
        if let Some(old) = self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(lease_dir) {
            old.watcher.abort();
        }
        if let Some((uid, gid)) = owner.0 {
            // AT_EMPTY_PATH: the opened directory itself, whatever its path now leads to
            rustix::fs::chownat(
                &dir,
                "",
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
                rustix::fs::AtFlags::EMPTY_PATH,
            )
            .map_err(|e| {
                DriverError::io(
                    format!("Handing {} to the lease's user", socket_dir.display()),
                    std::io::Error::from(e),
                )
            })?;
        }
        let binary = rustix::fs::open(agent, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| DriverError::io(format!("Opening {}", agent.display()), std::io::Error::from(e)))?;
        let binds = [
            FdBind {
                fd: dir.as_raw_fd(),
                dest: SOCKET_DIR_INSIDE,
                read_only: false,
            },
            FdBind {
                fd: binary.as_raw_fd(),
                dest: AGENT_INSIDE,
                read_only: true,
            },
        ];
        let socket = format!("{SOCKET_DIR_INSIDE}/{SUPERVISOR_SOCKET}");
        let argv = [
            AGENT_INSIDE.to_owned(),
            "--socket".into(),
            socket.clone(),
            "--subreaper".into(),
        ];
        let (mut child, tracked) = sandbox
            .spawn_as(
                lease_dir,
                WORKSPACE,
                &[],
                &argv,
                [Stdio::null(), Stdio::piped(), Stdio::piped()],
                SpawnAs {
                    user: None,
                    bind: None,
                    fd_binds: &binds,
                },
            )
            .map_err(|e| DriverError::io("Starting bwrap", e))?;
        drop((dir, binary));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let mut lines = tokio::io::BufReader::new(stdout);
        let mut line = String::new();
        let said = tokio::time::timeout(START_BOUND, (&mut lines).take(4096).read_line(&mut line)).await;
        let expected = format!("envrt-agent listening on {socket}");
        if !matches!(said, Ok(Ok(_)) if line.trim_end() == expected) {
            let _ = sandbox.terminate(&mut child).await;
            let mut why = Vec::new();
            let _ = tokio::time::timeout(
                Duration::from_secs(1),
                (&mut stderr).take(WHY_BYTES as u64).read_to_end(&mut why),
            )
            .await;
            let why = String::from_utf8_lossy(&why).trim().to_owned();
            let why = match (said, why.is_empty()) {
                (_, false) => why,
                (Err(_), true) => format!("it did not listen within {} s", START_BOUND.as_secs()),
                (Ok(_), true) => format!("it said {:?}", line.trim_end()),
            };
            return Err(RpcError::worker(format!(
                "The process supervisor of lease {lease} did not start: {why}"
            )));
        }
        let tag = lease.clone();
        let watcher = tokio::spawn(async move {
            // Its output is read (so it never blocks on a full pipe): stdout dropped,
            // stderr logged as the worker's own up to LOG_BYTES (it is as untrusted as a
            // command: no line it writes is held whole), the rest dropped.
            let drain_out = tokio::spawn(async move {
                let _ = tokio::io::copy(&mut lines, &mut tokio::io::sink()).await;
            });
            let drain_err = tokio::spawn(async move {
                let mut logged = tokio::io::BufReader::new((&mut stderr).take(LOG_BYTES)).split(b'\n');
                while let Ok(Some(line)) = logged.next_segment().await {
                    eprintln!(
                        "envrt-sandbox-worker: supervisor of {tag}: {}",
                        String::from_utf8_lossy(&line)
                    );
                }
                drop(logged);
                let _ = tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await;
            });
            let _ = child.wait().await;
            drop(tracked);
            drain_out.abort();
            drain_err.abort();
        });
        self.running.lock().unwrap_or_else(|p| p.into_inner()).insert(
            lease_dir.to_path_buf(),
            Running {
                socket_dir,
                dir_id,
                watcher,
            },
        );
        Ok(envrt_plugin_protocol::to_value(&StartProcessSupervisorResult {
            started: true,
        }))
    }
}

/// Opens the host's socket directory, refusing anything but an absolute path to a
/// directory (not a link) with mode 0700 of the worker's own user (or of the lease's,
/// which a start before this one handed it to).
fn open_socket_dir(dir: &Path, owner: Owner) -> Result<(OwnedFd, (u64, u64)), RpcError> {
    let refuse = |why: &str| RpcError::invalid_params(format!("socketDir {:?} {why}", dir.to_string_lossy()));
    if !dir.is_absolute() {
        return Err(refuse("is not an absolute path"));
    }
    let fd = rustix::fs::open(
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| refuse(&format!("cannot be opened as a directory: {}", std::io::Error::from(e))))?;
    let meta = std::fs::metadata(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()))
        .map_err(|e| refuse(&format!("cannot be read: {e}")))?;
    let ours = meta.uid() == rustix::process::geteuid().as_raw() || owner.0.is_some_and(|(uid, _)| uid == meta.uid());
    if !ours || meta.mode() & 0o7777 != 0o700 {
        return Err(refuse("must be a directory of the worker's user with mode 0700"));
    }
    Ok((fd, (meta.dev(), meta.ino())))
}
