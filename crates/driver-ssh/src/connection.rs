//! One OpenSSH master connection per host, shared by every lease on it: each command is a
//! session channel multiplexed over the master's control socket. A master that died (the
//! connection broke, `ControlPersist` ran out) is replaced on the next call.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use envrt_driver_api::DriverError;
use openssh::{ControlPersist, KnownHosts, Session, SessionBuilder, Stdio};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};

use crate::target::SshTarget;

/// A live master connection and the permits of its channels.
pub(crate) struct Host {
    target: SshTarget,
    control_dir: PathBuf,
    session: Mutex<Option<Arc<Session>>>,
    channels: Arc<Semaphore>,
    opened: AtomicU64,
    /// Where the process supervisor of this host's leases runs from, once probed.
    pub(crate) site: crate::processes::SiteSlot,
    /// The runs (`{lease dir}/run/{id}`) of commands whose connection broke under them: the
    /// remote `sshd` may not notice for a long time (no `ClientAliveInterval`, a network
    /// that dropped every packet), so the next master kills them ([`Host::session`]).
    orphaned: std::sync::Mutex<Vec<String>>,
}

/// How long killing the commands a broken connection left may hold up a new master.
const ORPHAN_KILL_BOUND: Duration = Duration::from_secs(10);

/// A spawned remote command, holding one channel permit.
pub(crate) struct Remote {
    /// The child.
    pub(crate) child: openssh::Child<Arc<Session>>,
    /// The session it runs on (to tell a broken connection from a killed command).
    pub(crate) session: Arc<Session>,
    _permit: OwnedSemaphorePermit,
}

impl Host {
    pub(crate) fn new(target: SshTarget, control_dir: PathBuf, max_channels: usize) -> Host {
        Host {
            target,
            control_dir,
            session: Mutex::new(None),
            channels: Arc::new(Semaphore::new(max_channels.max(1))),
            opened: AtomicU64::new(0),
            site: crate::processes::SiteSlot::default(),
            orphaned: std::sync::Mutex::default(),
        }
    }

    /// Notes that the command of `run` lost its connection while it ran: the next master
    /// this host makes kills what is left of it.
    pub(crate) fn orphan(&self, run: String) {
        self.orphaned.lock().unwrap_or_else(|p| p.into_inner()).push(run);
    }

    /// How many master connections this host has opened so far.
    pub(crate) fn connections_opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// The control socket of the live master, if there is one.
    pub(crate) async fn control_socket(&self) -> Option<PathBuf> {
        self.session
            .lock()
            .await
            .as_ref()
            .map(|s| s.control_socket().to_path_buf())
    }

    /// The current master, if there is one (no connection is made).
    pub(crate) async fn current(&self) -> Option<Arc<Session>> {
        self.session.lock().await.clone()
    }

    /// The current master, connecting when there is none.
    pub(crate) async fn session(&self) -> Result<Arc<Session>, DriverError> {
        let mut slot = self.session.lock().await;
        if let Some(session) = slot.as_ref() {
            return Ok(session.clone());
        }
        let session = Arc::new(self.connect().await?);
        self.opened.fetch_add(1, Ordering::Relaxed);
        *slot = Some(session.clone());
        // What a broken connection left running goes first, through the new master.
        let orphaned = std::mem::take(&mut *self.orphaned.lock().unwrap_or_else(|p| p.into_inner()));
        for run in orphaned {
            let script = crate::remote::signal_run(&run, "KILL");
            let mut kill = Session::to_raw_command(session.clone(), &script);
            kill.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            let _ = tokio::time::timeout(ORPHAN_KILL_BOUND, kill.status()).await;
        }
        Ok(session)
    }

    /// Forgets `dead` (if it is still the current master), so the next call reconnects.
    pub(crate) async fn forget(&self, dead: &Arc<Session>) {
        let mut slot = self.session.lock().await;
        if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, dead)) {
            *slot = None;
            // The host may have rebooted (its boot time moved, its supervisors are gone):
            // the process supervisor's site is probed again. Not while a probe runs (it
            // holds the slot, and may be what found the master dead).
            if let Ok(mut site) = self.site.try_lock() {
                *site = None;
            }
        }
    }

    /// Whether the master of `session` still answers.
    pub(crate) async fn alive(&self, session: &Arc<Session>) -> bool {
        session.check().await.is_ok()
    }

    async fn connect(&self) -> Result<Session, DriverError> {
        prepare_control_dir(&self.control_dir)?;
        end_orphaned_masters(&self.control_dir).await;
        let own = own_master_dir(&self.control_dir);
        prepare_control_dir(&own)?;
        let t = &self.target;
        let mut builder = SessionBuilder::default();
        builder
            .known_hosts_check(if t.accept_new_host_key {
                KnownHosts::Add
            } else {
                KnownHosts::Strict
            })
            .control_directory(&own)
            // A master orphaned by a crashed host program goes away by itself, or sooner
            // at the next connection any program of this user makes
            // ([`end_orphaned_masters`]).
            .control_persist(ControlPersist::IdleFor(
                std::num::NonZeroUsize::new(60).expect("non-zero"),
            ))
            .connect_timeout(t.connect_timeout)
            .server_alive_interval(Duration::from_secs(5));
        if let Some(port) = t.port {
            builder.port(port);
        }
        if let Some(user) = &t.user {
            builder.user(user.clone());
        }
        if let Some(key) = &t.key {
            builder.keyfile(key);
        }
        if let Some(file) = &t.known_hosts {
            builder.user_known_hosts_file(file);
        }
        // A failure that may pass (the host restarting, the network flapping) is tried
        // again within `connect_retry`, pausing 100 ms, then twice as long each time (at
        // most 1 s); the last failure is the one reported.
        let deadline = tokio::time::Instant::now() + t.connect_retry;
        let mut pause = Duration::from_millis(100);
        loop {
            match builder.connect_mux(&t.host).await {
                Ok(session) => return Ok(session),
                Err(error) => {
                    let retry = transient(&error) && tokio::time::Instant::now() + pause <= deadline;
                    if !retry {
                        return Err(connect_error(t, &error));
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// Spawns `script` on a channel (stdin, stdout and stderr piped). A master that cannot
    /// open a channel is replaced once: the command never started, so nothing runs twice.
    pub(crate) async fn spawn(&self, script: &str) -> Result<Remote, DriverError> {
        let permit = self
            .channels
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| DriverError::other("the SSH driver is shutting down"))?;
        let mut last = None;
        for _ in 0..2 {
            let session = self.session().await?;
            let spawned = Session::to_raw_command(session.clone(), script)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .await;
            match spawned {
                Ok(child) => {
                    return Ok(Remote {
                        child,
                        session,
                        _permit: permit,
                    });
                }
                Err(error) => {
                    self.forget(&session).await;
                    last = Some(error);
                }
            }
        }
        Err(self.unavailable("cannot open a channel", last.map(|e| e.to_string()).unwrap_or_default()))
    }

    /// Runs `script` to completion with `input` on stdin; returns the exit code and the
    /// two outputs. For the driver's own short scripts.
    pub(crate) async fn run(&self, script: &str, input: &[u8]) -> Result<(i32, Vec<u8>, Vec<u8>), DriverError> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut remote = self.spawn(script).await?;
        let mut stdin = remote.child.stdin().take();
        let mut stdout = remote.child.stdout().take();
        let mut stderr = remote.child.stderr().take();
        let feed = async {
            if let Some(mut pipe) = stdin.take() {
                let _ = pipe.write_all(input).await;
                let _ = pipe.shutdown().await;
            }
        };
        let mut out = Vec::new();
        let mut err = Vec::new();
        let read_out = async {
            if let Some(pipe) = stdout.as_mut() {
                let _ = pipe.read_to_end(&mut out).await;
            }
        };
        let read_err = async {
            if let Some(pipe) = stderr.as_mut() {
                let _ = pipe.read_to_end(&mut err).await;
            }
        };
        tokio::join!(feed, read_out, read_err);
        let code = exit_code(remote.child.wait().await);
        match code {
            Some(code) => Ok((code, out, err)),
            None => {
                if !self.alive(&remote.session).await {
                    self.forget(&remote.session).await;
                }
                Err(self.unavailable("a driver command ended without a status", String::from_utf8_lossy(&err)))
            }
        }
    }

    /// [`run`](Self::run), failing unless the script exits 0; returns its stdout.
    pub(crate) async fn run_ok(&self, what: &str, script: &str) -> Result<Vec<u8>, DriverError> {
        let (code, out, err) = self.run(script, &[]).await?;
        if code == 0 {
            Ok(out)
        } else {
            Err(DriverError::other(format!(
                "cannot {what} on {}: exit code {code}: {}",
                self.target.shown(),
                String::from_utf8_lossy(&err).trim()
            )))
        }
    }

    pub(crate) fn unavailable(&self, what: &str, detail: impl std::fmt::Display) -> DriverError {
        DriverError::Unavailable {
            message: format!("SSH host {}: {what}: {detail}", self.target.shown()),
            source: None,
        }
    }

    /// Closes the master (when this driver made it).
    pub(crate) async fn close(&self) {
        if let Some(session) = self.session.lock().await.take() {
            if let Ok(session) = Arc::try_unwrap(session) {
                let _ = session.close().await;
            }
        }
    }

    pub(crate) fn target(&self) -> &SshTarget {
        &self.target
    }
}

/// The exit code of a finished channel: `None` when it ended without one (a signal, or the
/// connection broke). OpenSSH's crate reports exit code 127 as an error; it is a code.
pub(crate) fn exit_code(status: Result<std::process::ExitStatus, openssh::Error>) -> Option<i32> {
    match status {
        Ok(status) => status.code(),
        Err(openssh::Error::Remote(e)) if e.kind() == std::io::ErrorKind::NotFound => Some(127),
        Err(_) => None,
    }
}

/// Whether a connection failure may pass by itself (refused, timed out, unreachable,
/// reset or closed before the handshake): a host key or login refusal does not.
fn transient(error: &openssh::Error) -> bool {
    let detail = match error {
        openssh::Error::Connect(e) | openssh::Error::Master(e) => e.to_string(),
        other => other.to_string(),
    };
    [
        "Connection refused",
        "Connection timed out",
        "No route to host",
        "Network is unreachable",
        "Connection reset",
        "Connection closed by",
        "kex_exchange_identification",
    ]
    .iter()
    .any(|what| detail.contains(what))
}

/// The refusal of a connection attempt, saying what the log of `ssh` said (host key
/// verification, authentication, reachability).
fn connect_error(target: &SshTarget, error: &openssh::Error) -> DriverError {
    let detail = match error {
        openssh::Error::Connect(e) | openssh::Error::Master(e) => e.to_string(),
        other => other.to_string(),
    };
    let why = if detail.contains("host key is known") {
        "the host key is not in the known-hosts file".to_owned()
    } else if detail.contains("Host key verification failed") || detail.contains("REMOTE HOST IDENTIFICATION") {
        "the host key does not match the known-hosts file".to_owned()
    } else {
        detail.trim().trim_end_matches('.').to_owned()
    };
    DriverError::Unavailable {
        message: format!("Cannot connect to SSH host {}: {why}.", target.shown()),
        source: None,
    }
}

/// The start of the name of a program's own directory of master control sockets inside
/// the control directory: `m-{pid}-{nonce}`.
const MASTER_DIR_PREFIX: &str = "m-";

/// How long ending one orphaned master may take.
const END_MASTER_BOUND: Duration = Duration::from_secs(5);

/// This program's directory of master control sockets in `control_dir`, named by its pid
/// (and a nonce of this run), so that a later program can tell the masters a killed one
/// left from those of a program still running.
fn own_master_dir(control_dir: &Path) -> PathBuf {
    static NONCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let nonce = NONCE.get_or_init(|| uuid::Uuid::new_v4().simple().to_string()[..8].to_owned());
    control_dir.join(format!("{MASTER_DIR_PREFIX}{}-{nonce}", std::process::id()))
}

/// Ends the masters that programs now gone left in `control_dir` (a host program killed
/// with its master up: `ControlPersist` would keep the master, its TCP connection and the
/// remote session for up to a minute each, and a crash loop adds one per crash), then
/// removes their directories. Each is asked to exit through its control socket (`ssh -O
/// exit`), bounded by [`END_MASTER_BOUND`]; best effort. A program whose pid names a live
/// process keeps its masters (a reused pid only delays the clean-up).
async fn end_orphaned_masters(control_dir: &Path) {
    for dir in envrt_driver_files::stale::entries_of_dead_pids(control_dir, MASTER_DIR_PREFIX) {
        for connection in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let socket = connection.path().join("master");
            if socket.exists() {
                let exit = tokio::process::Command::new("ssh")
                    .arg("-S")
                    .arg(&socket)
                    .args(["-O", "exit", "envrt-orphaned-master"])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .status();
                let _ = tokio::time::timeout(END_MASTER_BOUND, exit).await;
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// This user's uid (the owner of `/proc/self`), when it can be told.
fn own_uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// The directory holding control sockets: `{temp dir}/envrt-ssh-{uid}`, one per user
/// (each connection gets a fresh directory inside it, removed when it closes).
pub(crate) fn default_control_dir() -> PathBuf {
    let uid = own_uid().map_or_else(|| "user".to_owned(), |u| u.to_string());
    std::env::temp_dir().join(format!("envrt-ssh-{uid}"))
}

/// Creates `dir` (`0700`) when missing; refuses one another user owns or others may
/// enter (a prepared directory would let them reach the control sockets).
pub(crate) fn prepare_control_dir(dir: &Path) -> Result<(), DriverError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(dir)
        .map_err(|e| DriverError::io(format!("cannot create {}", dir.display()), e))?;
    let meta =
        std::fs::symlink_metadata(dir).map_err(|e| DriverError::io(format!("cannot inspect {}", dir.display()), e))?;
    if !meta.is_dir() || own_uid().is_some_and(|u| u != meta.uid()) || meta.mode() & 0o077 != 0 {
        return Err(DriverError::invalid(format!(
            "the control directory {} must be a directory of this user with mode 0700",
            dir.display()
        )));
    }
    Ok(())
}
