//! Persistent process sessions (contract section 9) on the sandbox driver: one supervisor
//! (`envrt-agent`) per lease, started by the worker inside the lease's own isolation
//! through the extension `envrtStartProcessSupervisor`, and reached by the host directly
//! on its unix socket (the worker is the host's child, on the same machine). Every verb
//! is then one request to the supervisor ([`envrt_driver_agent`]).
//!
//! The host chooses where the socket lives, never the worker: one directory per lease,
//! named by envrt's lease id, in the host user's directory of supervisor sockets in the
//! temp directory (`envrt-sbx-supervisors-{euid}`, `0711`, refused unless it is that
//! user's own directory with that mode and no link), made `0700` before each start (the
//! worker hands it to the lease's own host user, so the agent can make its socket there).
//! The place follows from the lease's record alone, so every program on this machine
//! over the same store finds a lease's supervisor there again. The socket is opened
//! without following a link (`O_PATH | O_NOFOLLOW`, then checked to be a socket) and
//! connected through that descriptor, so nothing the lease puts in its directory can make
//! the host connect elsewhere. Release and destroy remove the lease's directory (the
//! worker ended the supervisor from its record); one whose lease ended without its host
//! (an expiry a later worker fired) goes when a later host finds no supervisor answering
//! there ten minutes after it last changed.
//!
//! The supervisor lives as long as the lease, not as long as the worker or the program:
//! a worker that exits (crash, restart, the host's end) leaves it running (see the
//! worker's `supervisor` module), and the next program, or the next worker, reaches it
//! again in the lease's directory; only a supervisor that no longer answers is replaced,
//! by one whose process ids start past every id the earlier ones could give.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use std::time::Duration;

use envrt_driver_agent::{
    AgentHost, AgentSpawnRequest, Client, Offsets, ProcessInfo, ProcessOutput, ProcessSessions, ProcessStatus,
    SpawnRequest, request_of,
};
use envrt_driver_api::{DriverError, Execute, LeaseContext};
use rustix::fs::{FileType, Mode, OFlags};

use super::SandboxDriver;
use crate::protocol::environment::StartProcessSupervisorParams;
use crate::protocol::methods;

/// The longest path a unix socket may have (`sun_path` less its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Name prefix of the per-host directories earlier versions made in the temp directory
/// (`{prefix}{host pid}-{random}`), removed once their host is gone.
const OLD_DIR_PREFIX: &str = "envrt-sbx-agents-";

/// Name prefix of the host user's directory of supervisor sockets in the temp directory
/// (`{prefix}{euid}`).
const DIR_PREFIX: &str = "envrt-sbx-supervisors-";

/// How long a lease's socket directory with no supervisor answering in it is kept: one
/// whose lease ended without its host (an expiry a later worker fired, a host killed
/// before a release) is removed by the next host after that. A live lease whose
/// supervisor died loses nothing by it: its next spawn makes the directory again.
const UNANSWERED_AGE: Duration = Duration::from_secs(600);

/// Removes the lease directories in `base` that changed more than [`UNANSWERED_AGE`] ago
/// and where no supervisor answers (best effort).
fn remove_unanswered(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .ok()
            .filter(std::fs::Metadata::is_dir)
            .and_then(|m| m.modified().ok())
            .is_some_and(|t| t.elapsed().is_ok_and(|age| age >= UNANSWERED_AGE));
        if old && !answers(&entry.path()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Whether a supervisor accepts a connection on the socket in `dir` (opened as
/// [`connect`] opens it).
fn answers(dir: &Path) -> bool {
    let Ok(fd) = rustix::fs::open(
        dir.join(methods::SUPERVISOR_SOCKET),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let socket = rustix::fs::fstat(&fd).is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Socket);
    socket && std::os::unix::net::UnixStream::connect(format!("/proc/self/fd/{}", fd.as_raw_fd())).is_ok()
}

/// The host user's directory of supervisor sockets (whether or not it exists).
pub(crate) fn base_dir() -> PathBuf {
    std::env::temp_dir().join(format!("{DIR_PREFIX}{}", rustix::process::geteuid().as_raw()))
}

/// The host's directories for its leases' supervisor sockets.
#[derive(Debug)]
pub(crate) struct SocketDirs {
    /// Where the host user's directory is ([`base_dir`]).
    base: PathBuf,
    /// The host user's directory, once made or found and checked.
    root: OnceLock<PathBuf>,
    /// One start at a time per lease.
    starts: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Default for SocketDirs {
    fn default() -> Self {
        SocketDirs::at(base_dir())
    }
}

impl SocketDirs {
    /// The directories with the host user's directory at `base`.
    fn at(base: PathBuf) -> SocketDirs {
        SocketDirs {
            base,
            root: OnceLock::new(),
            starts: Mutex::default(),
        }
    }

    /// The host user's directory: made (`0711`) when missing and `create` is set, `None`
    /// when missing otherwise; refused unless it is a directory (not a link) of this user
    /// with mode `0711`.
    fn root(&self, create: bool) -> Result<Option<&Path>, DriverError> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        if let Some(root) = self.root.get() {
            return Ok(Some(root));
        }
        let dir = self.base.clone();
        if create {
            // the directories of hosts of earlier versions that are gone (a killed host could
            // not remove its own)
            envrt_driver_files::stale::remove_dirs_of_dead_pids(&std::env::temp_dir(), OLD_DIR_PREFIX);
            match std::fs::DirBuilder::new().mode(0o711).create(&dir) {
                Ok(()) => std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))
                    .map_err(|e| DriverError::io(format!("cannot create {}", dir.display()), e))?,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(DriverError::io(format!("cannot create {}", dir.display()), e)),
            }
        }
        let meta = match std::fs::symlink_metadata(&dir) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) => return Err(DriverError::io(format!("cannot read {}", dir.display()), e)),
        };
        if !meta.is_dir() || meta.uid() != rustix::process::geteuid().as_raw() || meta.mode() & 0o7777 != 0o711 {
            return Err(DriverError::Unavailable {
                message: format!(
                    "the process supervisors' directory {} is not a directory of this user with mode 0711",
                    dir.display()
                ),
                source: None,
            });
        }
        if create {
            remove_unanswered(&dir);
        }
        let _ = self.root.set(dir);
        Ok(self.root.get().map(PathBuf::as_path))
    }

    /// The socket directory of the lease `lease` (envrt's lease id); `None` while the
    /// host user's directory does not exist and `create` is not set.
    fn of(&self, lease: &str, create: bool) -> Result<Option<PathBuf>, DriverError> {
        let plain = !lease.is_empty()
            && lease.len() <= 64
            && !lease.starts_with('.')
            && lease
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !plain {
            return Err(DriverError::invalid(format!(
                "lease id {lease:?} cannot name a process supervisor's directory"
            )));
        }
        let Some(root) = self.root(create)? else {
            return Ok(None);
        };
        let dir = root.join(lease);
        let socket = dir.join(methods::SUPERVISOR_SOCKET);
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(DriverError::Unavailable {
                message: format!(
                    "the process supervisor's socket {} is longer than a unix socket path may be ({MAX_SOCKET_PATH} bytes): set TMPDIR to a shorter directory",
                    socket.display()
                ),
                source: None,
            });
        }
        Ok(Some(dir))
    }

    /// The socket directory of the lease `lease`, if the host user's directory exists.
    pub(super) fn dir_of(&self, lease: &str) -> Result<Option<PathBuf>, DriverError> {
        self.of(lease, false)
    }

    /// The lease's start lock.
    fn start_lock(&self, lease: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut starts = self.starts.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(starts.entry(lease.to_owned()).or_default())
    }

    /// Removes the lease's directory (its lease ended).
    pub(crate) fn remove(&self, lease: &str) {
        self.starts.lock().unwrap_or_else(|p| p.into_inner()).remove(lease);
        if let Ok(Some(dir)) = self.of(lease, false) {
            // `remove_dir_all` follows no link the lease may have put there.
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A fresh, empty `0700` directory at `dir` (one left by an earlier supervisor goes).
fn fresh_dir(dir: &Path) -> Result<(), DriverError> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(DriverError::io(format!("cannot remove {}", dir.display()), e)),
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(|e| DriverError::io(format!("cannot create {}", dir.display()), e))
}

/// Connects to the supervisor's socket in `dir`: `None` when there is no socket there, or
/// nobody answers on it. The socket is opened without following a link and connected
/// through its descriptor, so a link the lease planted leads nowhere.
async fn connect(dir: &Path) -> Option<Client> {
    let socket = dir.join(methods::SUPERVISOR_SOCKET);
    let fd = rustix::fs::open(
        &socket,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let stat = rustix::fs::fstat(&fd).ok()?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Socket {
        return None;
    }
    let through = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    Client::connect(&through).await.ok()
}

/// Each verb is the bridge's ([`envrt_driver_agent`]); `spawn` also tells a missing `cwd`
/// from a missing program, which the supervisor reports alike (`cannot start "{argv0}": No
/// such file or directory`), by asking the lease whether the directory is there (only
/// when a spawn with a `cwd` failed so).
#[async_trait]
impl ProcessSessions for SandboxDriver {
    async fn spawn(&self, context: &LeaseContext, request: SpawnRequest) -> Result<ProcessInfo, DriverError> {
        let given = request.cwd.clone();
        let error = match envrt_driver_agent::spawn(self, context, request).await {
            Ok(info) => return Ok(info),
            Err(error) => error,
        };
        let Some(given) = given else { return Err(error) };
        if !error.to_string().ends_with("No such file or directory (os error 2)") {
            return Err(error);
        }
        let cwd = self.resolved_cwd(context, Some(&given))?;
        let probe = envrt_driver_api::ExecuteRequest::new("test", ["-d", cwd.as_str()]);
        match Execute::execute(self, context, probe).await {
            Ok(result) if result.exit_code != Some(0) => Err(DriverError::missing_cwd(&given)),
            _ => Err(error),
        }
    }

    async fn processes(&self, context: &LeaseContext) -> Result<Vec<ProcessInfo>, DriverError> {
        envrt_driver_agent::processes(self, context).await
    }

    async fn process(&self, context: &LeaseContext, number: u64) -> Result<Option<ProcessInfo>, DriverError> {
        envrt_driver_agent::process(self, context, number).await
    }

    async fn output(
        &self,
        context: &LeaseContext,
        number: u64,
        from: &Offsets,
    ) -> Result<Box<dyn ProcessOutput>, DriverError> {
        envrt_driver_agent::output(self, context, number, from).await
    }

    async fn write_stdin(&self, context: &LeaseContext, number: u64, bytes: &[u8]) -> Result<(), DriverError> {
        envrt_driver_agent::write_stdin(self, context, number, bytes).await
    }

    async fn close_stdin(&self, context: &LeaseContext, number: u64) -> Result<(), DriverError> {
        envrt_driver_agent::close_stdin(self, context, number).await
    }

    async fn signal(&self, context: &LeaseContext, number: u64, signal: &str) -> Result<ProcessInfo, DriverError> {
        envrt_driver_agent::signal(self, context, number, signal).await
    }

    async fn resize(&self, context: &LeaseContext, number: u64, rows: u16, cols: u16) -> Result<(), DriverError> {
        envrt_driver_agent::resize(self, context, number, rows, cols).await
    }

    async fn wait(
        &self,
        context: &LeaseContext,
        number: u64,
        timeout: Option<Duration>,
    ) -> Result<ProcessStatus, DriverError> {
        envrt_driver_agent::wait(self, context, number, timeout).await
    }
}

impl SandboxDriver {
    /// A spawn's working directory inside the lease: the lease's `remoteCwd` (else
    /// `/workspace`) when none is given, else the given one resolved against it under the
    /// driver's path scope.
    fn resolved_cwd(&self, context: &LeaseContext, given: Option<&str>) -> Result<String, DriverError> {
        use envrt_driver_api::EnvironmentDriver;
        let root = context
            .lease
            .metadata
            .get("remoteCwd")
            .and_then(|v| v.as_str())
            .unwrap_or(WORKSPACE);
        match given {
            None => Ok(root.to_owned()),
            Some(cwd) => self.path_scope().resolve_cwd(root, cwd),
        }
    }
}

#[async_trait]
impl AgentHost for SandboxDriver {
    async fn agent(&self, context: &LeaseContext, start: bool) -> Result<Option<Client>, DriverError> {
        let lease = context.lease.id.as_str();
        if !start {
            // None answers: the lease spawned nothing yet, or its worker (and the
            // supervisor with it) ended.
            return match self.socket_dirs.of(lease, false)? {
                Some(dir) => Ok(connect(&dir).await),
                None => Ok(None),
            };
        }
        let Some(dir) = self.socket_dirs.of(lease, true)? else {
            return Err(DriverError::other("the process supervisors' directory was not made"));
        };
        if let Some(client) = connect(&dir).await {
            return Ok(Some(client));
        }
        self.require(methods::START_PROCESS_SUPERVISOR)?;
        let lock = self.socket_dirs.start_lock(lease);
        let _start = lock.lock().await;
        if let Some(client) = connect(&dir).await {
            return Ok(Some(client));
        }
        fresh_dir(&dir)?;
        let params = StartProcessSupervisorParams {
            base: self.base(context),
            lease: Self::lease(context),
            socket_dir: dir.to_string_lossy().into_owned(),
        };
        self.rpc(methods::START_PROCESS_SUPERVISOR, &params, &context.lease.company_id)
            .await?;
        match connect(&dir).await {
            Some(client) => Ok(Some(client)),
            None => Err(DriverError::other(format!(
                "the process supervisor of lease {lease} does not answer on its socket"
            ))),
        }
    }

    async fn spawn_request(
        &self,
        context: &LeaseContext,
        request: SpawnRequest,
    ) -> Result<AgentSpawnRequest, DriverError> {
        let cwd = self.resolved_cwd(context, request.cwd.as_deref())?;
        // The supervisor's environment is a command's (`PATH`, `HOME`): inherited under
        // the request's own variables. A `user` is resolved by the supervisor in the
        // sandbox's `/etc/passwd` and `/etc/group`; it runs as the sandbox's one user, so
        // it starts processes only as that user (another is refused).
        Ok(request_of(request, Some(cwd), Vec::new(), false))
    }

    fn user_site(&self) -> (&'static str, &'static str) {
        ("sandbox", "in the sandbox")
    }
}

/// The workspace of a lease whose worker named none (`remoteCwd`).
const WORKSPACE: &str = "/workspace";

#[async_trait]
impl envrt_driver_api::ExposePorts for SandboxDriver {
    /// Through the lease's supervisor (started when none runs): its `connect` verb, in the
    /// supervisor's network namespace (the lease's own under a network policy; otherwise
    /// the supervisor's sandbox's, so only what it spawned is reached).
    async fn connect_port(
        &self,
        context: &LeaseContext,
        port: u16,
    ) -> Result<std::os::unix::net::UnixStream, DriverError> {
        self.agent(context, true).await?;
        let Some(dir) = self.socket_dirs.of(&context.lease.id, false)? else {
            return Err(DriverError::other("the process supervisors' directory was not made"));
        };
        let socket = dir.join(methods::SUPERVISOR_SOCKET);
        envrt_driver_agent::expose::tunnel(&socket, "/.envrt-agent/sock", port).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_users_directory_is_made_0711_and_refused_unless_it_is_one() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("envrt-sbx-supervisors-test");
        let dirs = SocketDirs::at(base.clone());
        // Missing and not to be made: no lease has a supervisor.
        assert_eq!(dirs.of("lease-1", false).unwrap(), None);
        assert!(!base.exists());
        assert_eq!(dirs.of("lease-1", true).unwrap(), Some(base.join("lease-1")));
        let mode = std::fs::metadata(&base).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o711);
        // A lease directory where nobody answers goes once it is old, not before.
        let listener_dir = base.join("answering");
        std::fs::create_dir(&listener_dir).unwrap();
        let _listener = std::os::unix::net::UnixListener::bind(listener_dir.join(methods::SUPERVISOR_SOCKET)).unwrap();
        std::fs::create_dir(base.join("fresh")).unwrap();
        std::fs::create_dir(base.join("stale")).unwrap();
        let long_ago = std::time::SystemTime::now() - UNANSWERED_AGE * 2;
        for name in ["answering", "stale"] {
            std::fs::File::open(base.join(name))
                .unwrap()
                .set_modified(long_ago)
                .unwrap();
        }
        assert!(SocketDirs::at(base.clone()).of("lease-2", true).is_ok());
        let mut left: Vec<String> = std::fs::read_dir(&base)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["answering", "fresh"]);
        // Another program finds the same directory again.
        assert_eq!(
            SocketDirs::at(base.clone()).of("lease-1", false).unwrap(),
            Some(base.join("lease-1"))
        );
        // One with another mode, or a link to one, is refused with its exact text.
        let refusal = |dir: &Path| {
            format!(
                "the process supervisors' directory {} is not a directory of this user with mode 0711",
                dir.display()
            )
        };
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        for create in [false, true] {
            let error = SocketDirs::at(base.clone()).of("lease-1", create).unwrap_err();
            assert_eq!(error.to_string(), refusal(&base));
        }
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o711)).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&base, &link).unwrap();
        let error = SocketDirs::at(link.clone()).of("lease-1", true).unwrap_err();
        assert_eq!(error.to_string(), refusal(&link));
        assert_eq!(
            dirs.of("../x", false).unwrap_err().to_string(),
            "Invalid input: lease id \"../x\" cannot name a process supervisor's directory"
        );
    }
}
