//! Starting a worker process: minimal environment, `PR_SET_PDEATHSIG`, a cgroup of its own
//! (where cgroup v2 is writable) whose leftovers are killed when the worker ends, a reaper
//! that never lets a signal reach a recycled pid, and the stderr tail. Its stdout is read
//! with the protocol's bounded line reader (`envrt_plugin_protocol::reader`).

use std::collections::VecDeque;
use std::io;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, OnceLock};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::Pid;
use rustix::fd::OwnedFd;
use tokio::io::{AsyncRead, AsyncReadExt as _, BufReader};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::oneshot;

use crate::host::manifest::WorkerCommand;

/// How many bytes of stderr are kept for crash reports.
pub(crate) const STDERR_TAIL_BYTES: usize = 8 * 1024;

/// Default `PATH` when the host has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A running worker process. Signals are sent only while the child is not yet reaped, so
/// a recycled pid is never hit.
#[derive(Debug)]
pub(crate) struct WorkerProcess {
    pid: i32,
    reaped: Mutex<bool>,
}

impl WorkerProcess {
    /// The pid.
    pub(crate) fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Sends `signal` unless the process was already reaped.
    pub(crate) fn signal(&self, signal: Signal) {
        let reaped = self.reaped.lock().unwrap_or_else(|e| e.into_inner());
        if !*reaped {
            let _ = kill(Pid::from_raw(self.pid), signal);
        }
    }
}

/// How a worker ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WorkerExit {
    pub(crate) code: Option<i32>,
    pub(crate) signal: Option<i32>,
}

impl From<ExitStatus> for WorkerExit {
    fn from(status: ExitStatus) -> Self {
        WorkerExit {
            code: status.code(),
            signal: status.signal(),
        }
    }
}

/// The pieces of a freshly started worker.
pub(crate) struct Spawned {
    pub(crate) process: Arc<WorkerProcess>,
    pub(crate) stdin: ChildStdin,
    pub(crate) stdout: ChildStdout,
    pub(crate) stderr: ChildStderr,
    pub(crate) exit: oneshot::Receiver<WorkerExit>,
    /// The host's end of the data plane socket and the worker's descriptor number of its end.
    pub(crate) plane: Option<(OwnedFd, i32)>,
}

type SpawnJob = (Command, std_mpsc::Sender<io::Result<Child>>);

/// Children are forked from one thread that lives as long as the process:
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child ends, so forking from
/// a runtime thread that may be retired would kill healthy workers.
fn spawner() -> &'static Mutex<std_mpsc::Sender<SpawnJob>> {
    static SPAWNER: OnceLock<Mutex<std_mpsc::Sender<SpawnJob>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = std_mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("envrt-worker-spawner".into())
            .spawn(move || {
                while let Ok((mut command, reply)) = rx.recv() {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("spawn the worker spawner thread");
        Mutex::new(tx)
    })
}

/// Makes the child die with its parent: `PR_SET_PDEATHSIG(signal)`, then a check that the
/// parent did not already die before the flag was set. With `cgroup`, the child first
/// moves itself into that cgroup (writing `0` to its `cgroup.procs`), so everything it
/// ever starts is in there too; a failed move is not an error (checked after the spawn).
#[allow(unsafe_code)]
fn die_with_parent(command: &mut Command, signal: Signal, cgroup: Option<Arc<OwnedFd>>) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec. It only makes
    // async-signal-safe system calls (write, prctl, getppid) on values prepared before
    // the fork and allocates nothing; an error is returned as a raw OS error without
    // allocating a message.
    unsafe {
        command.pre_exec(move || {
            if let Some(procs) = &cgroup {
                let _ = rustix::io::write(procs, b"0");
            }
            nix::sys::prctl::set_pdeathsig(signal).map_err(|e| io::Error::from_raw_os_error(e as i32))?;
            if nix::unistd::getppid().as_raw() as u32 != parent {
                return Err(io::Error::from_raw_os_error(nix::libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Name prefix of the worker cgroups.
const CGROUP_PREFIX: &str = "envrt-worker-";

/// How old an empty worker cgroup must be before another host removes it (one younger may
/// be another host's, created but not joined yet).
const STALE_CGROUP_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// Removes the empty worker cgroups a killed host left behind. The kernel refuses to
/// remove a cgroup that still has processes, so a live worker's is never touched, and
/// only cgroups older than a minute are tried.
fn remove_empty_worker_cgroups(parent: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age >= STALE_CGROUP_AGE));
        if old && entry.file_name().to_string_lossy().starts_with(CGROUP_PREFIX) {
            // fails (EBUSY) while it holds processes
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// A cgroup (v2) of one worker: the worker and everything it starts, however detached,
/// live in it, and all of it is killed when the worker ends (see [`WorkerCgroup::kill`]).
#[derive(Debug)]
pub(crate) struct WorkerCgroup {
    dir: PathBuf,
    procs: Arc<OwnedFd>,
}

impl WorkerCgroup {
    /// Creates `envrt-worker-<uuid>` below the host's own cgroup, where cgroup v2 is
    /// mounted and writable; `None` otherwise.
    pub(crate) fn create() -> Option<WorkerCgroup> {
        let mount = std::fs::read_to_string("/proc/self/mountinfo")
            .ok()?
            .lines()
            .find_map(|line| {
                let (fields, tail) = line.split_once(" - ")?;
                (tail.split_whitespace().next()? == "cgroup2")
                    .then(|| fields.split_whitespace().nth(4).map(PathBuf::from))?
            })?;
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("0::").map(|p| p.trim_start_matches('/').to_owned()))?;
        let parent = mount.join(own);
        remove_empty_worker_cgroups(&parent);
        let dir = parent.join(format!("{CGROUP_PREFIX}{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&dir).ok()?;
        let procs = rustix::fs::open(
            dir.join("cgroup.procs"),
            rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        );
        match procs {
            Ok(procs) => Some(WorkerCgroup {
                dir,
                procs: Arc::new(procs),
            }),
            Err(_) => {
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }

    /// The pids in the cgroup.
    fn members(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// Whether `pid` is in the cgroup.
    fn holds(&self, pid: i32) -> bool {
        self.members().contains(&pid)
    }

    /// Kills everything left in the cgroup (`cgroup.kill`, or SIGKILL to each member on
    /// kernels without it), waits (bounded, 2 s) until it is empty and removes it.
    pub(crate) fn kill(&self) {
        let killed = std::fs::write(self.dir.join("cgroup.kill"), b"1").is_ok();
        for _ in 0..200 {
            let members = self.members();
            if members.is_empty() {
                break;
            }
            if !killed {
                for pid in members {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Starts a worker with a minimal environment: `PATH`, `TZ` (when the host has them) and
/// the manifest's variables. Nothing else of the host's environment is passed. With
/// `data_plane`, the worker also inherits its end of a socket pair (see `dataplane`).
pub(crate) async fn spawn_worker(spec: &WorkerCommand, death_signal: Signal, data_plane: bool) -> io::Result<Spawned> {
    let program = spec
        .command
        .first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty worker command"))?;
    let mut command = Command::new(program);
    command
        .args(&spec.command[1..])
        .env_clear()
        .env(
            "PATH",
            std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.to_owned()),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Ok(tz) = std::env::var("TZ") {
        command.env("TZ", tz);
    }
    command.envs(&spec.env);
    // The fault-injection test hook reaches the worker too (it has sync points of its
    // own); it can only make the worker end itself, which it may do anyway.
    if let Ok(hook) = std::env::var(envrt_driver_api::fault::ABORT_VAR) {
        command.env(envrt_driver_api::fault::ABORT_VAR, hook);
    }
    let cgroup = WorkerCgroup::create();
    die_with_parent(&mut command, death_signal, cgroup.as_ref().map(|c| c.procs.clone()));
    let plane = match data_plane {
        true => Some(crate::host::duplex::dataplane::pass_to_child(&mut command)?),
        false => None,
    };
    // after the data plane's hook: its socket is the one descriptor passed on purpose
    let keep: Vec<i32> = plane.iter().map(|(_, number)| *number).collect();
    // the worker is inside the boundary, as untrusted as its commands: it gets its stdio
    // and its data plane socket, nothing else the host holds
    envrt_driver_files::fds::inherit_only(&mut command, &keep);

    let (reply_tx, reply_rx) = std_mpsc::channel();
    spawner()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((command, reply_tx))
        .map_err(|_| io::Error::other("worker spawner thread is gone"))?;
    let mut child = tokio::task::spawn_blocking(move || reply_rx.recv())
        .await
        .map_err(io::Error::other)?
        .map_err(|_| io::Error::other("worker spawner thread is gone"))??;

    let stdin = ChildStdin::from_std(child.stdin.take().expect("piped stdin"))?;
    let stdout = ChildStdout::from_std(child.stdout.take().expect("piped stdout"))?;
    let stderr = ChildStderr::from_std(child.stderr.take().expect("piped stderr"))?;
    let pid = child.id() as i32;
    // a worker that could not move itself in is not tracked by the cgroup
    let cgroup = cgroup.filter(|c| {
        c.holds(pid) || {
            c.kill();
            false
        }
    });
    let process = Arc::new(WorkerProcess {
        pid,
        reaped: Mutex::new(false),
    });
    let (exit_tx, exit_rx) = oneshot::channel();
    let reaper_process = process.clone();
    std::thread::Builder::new()
        .name(format!("envrt-worker-reaper-{}", process.pid))
        .spawn(move || reap(child, reaper_process, cgroup, exit_tx))?;
    Ok(Spawned {
        process,
        stdin,
        stdout,
        stderr,
        exit: exit_rx,
        plane,
    })
}

/// Waits for the child without reaping it, then reaps it under the signal lock; then
/// kills whatever the worker left in its cgroup before the exit is reported, so nothing
/// a worker started outlives it (retired, crashed or shut down alike), but for what it
/// moved out on purpose (the reference worker's lease supervisors, see `docs/security.md`).
fn reap(
    mut child: Child,
    process: Arc<WorkerProcess>,
    cgroup: Option<WorkerCgroup>,
    exit: oneshot::Sender<WorkerExit>,
) {
    let pid = Pid::from_raw(process.pid);
    // EINTR: wait again
    while let Err(nix::errno::Errno::EINTR) = waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {}
    let mut reaped = process.reaped.lock().unwrap_or_else(|e| e.into_inner());
    let status = child.wait();
    *reaped = true;
    drop(reaped);
    if let Some(cgroup) = cgroup {
        cgroup.kill();
    }
    let result = match status {
        Ok(status) => WorkerExit::from(status),
        Err(_) => WorkerExit {
            code: None,
            signal: None,
        },
    };
    let _ = exit.send(result);
}

/// The last [`STDERR_TAIL_BYTES`] of a worker's stderr.
#[derive(Clone, Debug, Default)]
pub(crate) struct StderrTail {
    inner: Arc<Mutex<StderrState>>,
}

#[derive(Debug, Default)]
struct StderrState {
    bytes: VecDeque<u8>,
    ended: bool,
}

impl StderrTail {
    /// Reads `stderr` to its end, keeping the tail and logging each line.
    pub(crate) fn collect(&self, plugin_id: String, stderr: impl AsyncRead + Unpin + Send + 'static) {
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr);
            let mut chunk = vec![0u8; 4096];
            loop {
                match reader.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        tracing::debug!(plugin = %plugin_id, "worker stderr: {}", String::from_utf8_lossy(&chunk[..n]).trim_end());
                        let mut state = inner.lock().unwrap_or_else(|e| e.into_inner());
                        state.bytes.extend(&chunk[..n]);
                        let excess = state.bytes.len().saturating_sub(STDERR_TAIL_BYTES);
                        state.bytes.drain(..excess);
                    }
                }
            }
            inner.lock().unwrap_or_else(|e| e.into_inner()).ended = true;
        });
    }

    /// Whether stderr reached its end.
    pub(crate) fn ended(&self) -> bool {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).ended
    }

    /// The kept tail as text.
    pub(crate) fn excerpt(&self) -> String {
        let state = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let bytes: Vec<u8> = state.bytes.iter().copied().collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}
