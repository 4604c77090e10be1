//! Persistent process sessions (contract section 9) on the Docker driver: one supervisor
//! (`envrt-agent`) per lease, inside the lease's container, holds its processes, their
//! replay buffers and exit statuses; every verb is one request to it over its unix socket
//! (the bridge of `envrt-driver-agent`).
//!
//! - **Where it comes from.** The driver resolves the supervisor once, when it connects
//!   ([`DockerConfig::agent`], else where the local driver looks). It must be a static
//!   binary, since it runs in images that have no C library of their own (the busybox test
//!   image), and the engine must be on this host (`unix://`), since the container reaches
//!   it and its socket through bind mounts of host files. Otherwise nothing is mounted and
//!   no lease grants `persistentProcessSessions` ([`DockerDriver::process_sessions`] says
//!   why).
//! - **What a lease's container gets.** The binary, read-only, at [`AGENT_PATH`], and the
//!   lease's run directory at [`RUN_DIR`]: `{temp}/`[`DEFAULT_AGENT_DIR`]`/{container
//!   name}/run` on the host (the base made 0700 and checked as the bind root is, the run
//!   directory 0700 and handed to the container's user). The lease's metadata says so
//!   ([`META_AGENT`]); only such a lease grants the key.
//! - **Starting it.** Nothing runs until the lease's first spawn, which starts the
//!   supervisor with one detached exec as the container's user (`--subreaper`, so it reaps
//!   what its processes leave behind), under a host lock (`flock` on a file beside the run
//!   directory, out of the container's reach) so that two programs spawning at once start
//!   one, and waits until its socket answers. Every later verb connects straight to the
//!   socket: no exec.
//! - **Lifetime.** The supervisor and all it started are processes of the container:
//!   release, destroy, expiry and `gc` stop or remove the container, which ends them
//!   (`setsid` escapees included), and remove the lease's host directory. A reused lease's
//!   container, stopped at release, has no supervisor after its resume until it spawns;
//!   the new one numbers its processes after every id the earlier ones could give.
//! - **Untrusted.** The container's user owns the run directory and may put anything at
//!   the socket's path: the host opens it without following a link (`O_PATH |
//!   O_NOFOLLOW`), connects only when it is a socket, and then through the descriptor, so
//!   no link made inside the container makes the driver connect to a socket of the host.
//!   Every frame from the supervisor is bounded and checked by the bridge.

use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use bollard::exec::StartExecOptions;
use bollard::models::{ExecConfig, Mount, MountType};
use envrt_driver_agent::{AgentHost, AgentSpawnRequest, Client, ClientError, lift, request_of};
use envrt_driver_api::process::SpawnRequest;
use envrt_driver_api::{DriverError, LeaseContext, PathScope};

#[cfg(doc)]
use crate::config::DockerConfig;
use crate::driver::{DockerDriver, container_name};

/// Where the supervisor's binary is mounted in a lease's container (read-only).
pub const AGENT_PATH: &str = "/.envrt/agent";
/// Where the lease's run directory (the supervisor's socket) is mounted in its container.
pub const RUN_DIR: &str = "/.envrt/run";
/// The base of the lease directories on the host, in the system temp directory.
pub const DEFAULT_AGENT_DIR: &str = "envrt-docker-agents";
/// Lease-metadata key: `true` when the lease's container has the supervisor mounted.
pub const META_AGENT: &str = "processAgent";
/// The socket's name in the run directory.
const SOCKET: &str = "sock";
/// What the base of the lease directories is called in a refusal.
const AGENT_ROOT: &str = "Docker process supervisor root";
/// How long a starting supervisor has to answer on its socket.
const START_BOUND: Duration = Duration::from_secs(10);
/// The pause between two looks at a starting supervisor's socket.
const START_POLL: Duration = Duration::from_millis(5);
/// The most ids one supervisor gives: the next one of the lease starts that far on.
const IDS_PER_START: u64 = envrt_driver_agent::IDS_PER_SUPERVISOR;
/// The file of the lease directory holding the first id of the next supervisor.
const NEXT_ID: &str = "next-id";

/// The supervisor a driver mounts, or why it mounts none: `configured` (else the one the
/// local driver would run), when it is static and the engine at `address` is on this host.
pub(crate) fn resolve(configured: Option<&Path>, address: &str) -> Result<PathBuf, String> {
    if !address.starts_with("unix://") {
        return Err(format!(
            "the Docker engine at {address} is not on this host, so no supervisor can be mounted into its containers"
        ));
    }
    let path = match configured {
        Some(path) if envrt_driver_api::descriptor::is_executable(path) => path.to_owned(),
        Some(path) => {
            return Err(format!(
                "the process supervisor \"{}\" is not an executable file",
                path.display()
            ));
        }
        None => envrt_driver_agent::locate()?,
    };
    match envrt_driver_agent::is_static(&path) {
        Ok(true) => Ok(path),
        Ok(false) => Err(format!(
            "the process supervisor \"{}\" is not a static binary, so it cannot run in an image without a C library of its own; \
             build one with RUSTFLAGS='-C target-feature=+crt-static' cargo build -p envrt-agent --release --target x86_64-unknown-linux-gnu \
             and name it in [docker] agent or ENVRT_AGENT",
            path.display()
        )),
        Err(error) => Err(format!(
            "cannot read the process supervisor \"{}\": {error}",
            path.display()
        )),
    }
}

/// The host directory of the lease whose container is named `name`.
pub(crate) fn lease_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(DEFAULT_AGENT_DIR).join(name)
}

/// The run directory (the one the container sees) in a lease directory.
pub(crate) fn run_dir(lease_dir: &Path) -> PathBuf {
    lease_dir.join("run")
}

/// A lease's supervisor mounts, made before its container: the lease directory with its
/// run directory, and the two mounts.
pub(crate) struct Prepared {
    pub(crate) dir: PathBuf,
    pub(crate) mounts: Vec<Mount>,
}

/// Makes the lease directory of the container named `name` and the mounts of `agent`.
pub(crate) fn prepare(agent: &Path, name: &str) -> Result<Prepared, DriverError> {
    let dir = lease_dir(name);
    crate::bind::create(&dir, AGENT_ROOT)?;
    let run = run_dir(&dir);
    let made = std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&run)
        .map_err(|e| DriverError::io(format!("cannot create {}", run.display()), e));
    if let Err(error) = made {
        remove_dir(&dir);
        return Err(error);
    }
    let mount = |source: &Path, target: &str, read_only: bool| Mount {
        target: Some(target.to_owned()),
        source: Some(source.display().to_string()),
        typ: Some(MountType::BIND),
        read_only: Some(read_only),
        ..Default::default()
    };
    let mounts = vec![mount(agent, AGENT_PATH, true), mount(&run, RUN_DIR, false)];
    Ok(Prepared { dir, mounts })
}

/// Hands the run directory to the container's command user (the supervisor runs as it and
/// makes its socket there).
pub(crate) fn give(prepared: &Prepared, owner: (u64, u64)) -> Result<(), DriverError> {
    crate::bind::give(&run_dir(&prepared.dir), owner)
}

/// Removes a lease directory; a failure is only logged.
pub(crate) fn remove_dir(dir: &Path) {
    if let Err(error) = crate::bind::remove(dir) {
        tracing::warn!(%error, "removing a lease's process supervisor directory failed");
    }
}

/// Removes the lease directory of `lease_id`, once its container is gone.
pub(crate) fn remove_lease(lease_id: &str) {
    remove_dir(&lease_dir(&container_name(lease_id)));
}

/// Whether a lease's container has the supervisor mounted.
pub(crate) fn mounted(lease: &envrt_driver_api::Lease) -> bool {
    lease.metadata.get(META_AGENT).and_then(|v| v.as_bool()) == Some(true)
}

/// Why connecting failed.
enum Unanswered {
    /// No socket, or nobody listens on it: no supervisor runs.
    Absent,
    /// Something else (not a socket, a refused greeting).
    Failed(ClientError),
}

/// Connects to the supervisor's socket at host path `path` without following a link there:
/// the path is opened `O_PATH | O_NOFOLLOW`, must be a socket, and is connected through
/// `/proc/self/fd`. Failures name the socket as the container sees it, not the host path.
async fn connect(path: &Path) -> Result<Client, Unanswered> {
    use rustix::fs::{FileType, Mode, OFlags};
    let fd = match rustix::fs::open(path, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Err(Unanswered::Absent),
        Err(error) => {
            return Err(Unanswered::Failed(ClientError::Broken(format!(
                "cannot open its socket {RUN_DIR}/{SOCKET}: {error}"
            ))));
        }
    };
    let kind = rustix::fs::fstat(&fd).map(|stat| FileType::from_raw_mode(stat.st_mode));
    if !matches!(kind, Ok(FileType::Socket)) {
        return Err(Unanswered::Failed(ClientError::Broken(format!(
            "{RUN_DIR}/{SOCKET} is not a socket (the container put something else there)"
        ))));
    }
    let through = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    let connected = Client::connect(&through).await;
    drop(fd);
    connected.map_err(|error| match &error {
        ClientError::Broken(text) if text.contains("Connection refused") => Unanswered::Absent,
        _ => Unanswered::Failed(error),
    })
}

/// Whether a supervisor (or forwarder) answers on the socket at host path `path`.
pub(crate) async fn answers(path: &Path) -> bool {
    connect(path).await.is_ok()
}

impl DockerDriver {
    /// Whether this driver's leases can have persistent process sessions, and why not.
    pub fn process_sessions(&self) -> Result<&Path, &str> {
        self.agent.as_deref().map_err(String::as_str)
    }

    /// Starts the lease's supervisor with a detached exec and waits until its socket
    /// answers; the caller holds the lease's start lock. A lease's container that was
    /// stopped and started again (a reused lease) lost its supervisor: the next one numbers
    /// its processes past every id the earlier ones could give, so that an id never names
    /// two processes of one lease (the count lives in the lease directory, which the
    /// container does not see).
    async fn start_agent(&self, context: &LeaseContext, dir: &Path, socket: &Path) -> Result<Client, DriverError> {
        let lease = &context.lease.id;
        let container = Self::container_of(context)?;
        let counter = dir.join(NEXT_ID);
        let first = std::fs::read_to_string(&counter)
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .unwrap_or(1);
        std::fs::write(&counter, first.saturating_add(IDS_PER_START).to_string())
            .map_err(|e| DriverError::io("cannot record the process supervisor's ids", e))?;
        let cmd = vec![
            AGENT_PATH.to_owned(),
            "--socket".to_owned(),
            format!("{RUN_DIR}/{SOCKET}"),
            "--subreaper".to_owned(),
            "--max-processes".to_owned(),
            envrt_driver_agent::HELD_PROCESSES.to_string(),
            "--first-id".to_owned(),
            first.to_string(),
        ];
        self.start_detached(lease, container, cmd, socket, "process supervisor")
            .await
    }

    /// Runs the supervisor binary as `cmd` with one detached exec as the container's user,
    /// and waits until it answers on `socket` (host path); `who` names it in the refusals:
    /// `the {who} of lease {lease} did not start: it exited with code {code}`, `... did not
    /// answer on its socket within 10 s`.
    pub(crate) async fn start_detached(
        &self,
        lease: &str,
        container: &str,
        cmd: Vec<String>,
        socket: &Path,
        who: &str,
    ) -> Result<Client, DriverError> {
        let config = ExecConfig {
            cmd: Some(cmd),
            working_dir: Some("/".to_owned()),
            attach_stdin: Some(false),
            attach_stdout: Some(false),
            attach_stderr: Some(false),
            tty: Some(false),
            ..Default::default()
        };
        let engine = &self.engine;
        let what = format!("starting the {who}");
        let created = engine
            .call(engine.docker.create_exec(container, config))
            .await
            .map_err(|e| crate::process::exec_error(engine, container, &what, e))?;
        let options = StartExecOptions {
            detach: true,
            tty: false,
            output_capacity: None,
        };
        engine
            .call(engine.docker.start_exec(&created.id, Some(options)))
            .await
            .map_err(|e| crate::process::exec_error(engine, container, &what, e))?;
        let deadline = tokio::time::Instant::now() + START_BOUND;
        let mut looks = 0u32;
        loop {
            match connect(socket).await {
                Ok(client) => return Ok(client),
                Err(Unanswered::Failed(error)) => return Err(lift(lease, None, error)),
                Err(Unanswered::Absent) => {}
            }
            looks += 1;
            // Now and then: has it ended (a binary that cannot run there, a full pids limit)?
            if looks % 20 == 0
                && let Ok(inspected) = engine.call(engine.docker.inspect_exec(&created.id)).await
                && inspected.running == Some(false)
            {
                return Err(DriverError::other(format!(
                    "the {who} of lease {lease} did not start: it exited with code {}",
                    inspected
                        .exit_code
                        .map_or_else(|| "unknown".to_owned(), |c| c.to_string())
                )));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(DriverError::other(format!(
                    "the {who} of lease {lease} did not answer on its socket within {} s",
                    START_BOUND.as_secs()
                )));
            }
            tokio::time::sleep(START_POLL).await;
        }
    }
}

envrt_driver_agent::process_sessions!(DockerDriver);

#[async_trait]
impl AgentHost for DockerDriver {
    async fn agent(&self, context: &LeaseContext, start: bool) -> Result<Option<Client>, DriverError> {
        let lease = &context.lease.id;
        let dir = lease_dir(&container_name(lease));
        let socket = run_dir(&dir).join(SOCKET);
        match connect(&socket).await {
            Ok(client) => return Ok(Some(client)),
            // Not started yet, or ended with its container (a reused lease's, resumed).
            Err(Unanswered::Absent) if !start => return Ok(None),
            Err(Unanswered::Absent) => {}
            Err(Unanswered::Failed(error)) => return Err(lift(lease, Some(0), error)),
        }
        if !dir.is_dir() {
            return Err(DriverError::ResourceGone { id: lease.clone() });
        }
        // In the lease directory, which the container does not see.
        let _lock = envrt_driver_agent::start_lock(dir.join("start.lock")).await?;
        match connect(&socket).await {
            Ok(client) => Ok(Some(client)),
            Err(Unanswered::Failed(error)) => Err(lift(lease, Some(0), error)),
            Err(Unanswered::Absent) => self.start_agent(context, &dir, &socket).await.map(Some),
        }
    }

    async fn spawn_request(
        &self,
        context: &LeaseContext,
        request: SpawnRequest,
    ) -> Result<AgentSpawnRequest, DriverError> {
        // As an execute's: the configured `user` or one `allowedUsers` lists, as written;
        // the supervisor (the container's PID 1) resolves it in the container.
        if let Some(user) = request.user.as_deref() {
            match context.environment.as_ref() {
                Some(environment) => crate::config::EnvConfig::of(environment)?.check_user(user)?,
                None => {
                    return Err(DriverError::UserRefused {
                        user: user.to_owned(),
                        reason: crate::config::USER_NOT_ALLOWED.to_owned(),
                    });
                }
            }
        }
        let workspace = Self::workspace_of(context);
        // The container is the boundary: any absolute path in it, relative ones from the
        // workspace; the supervisor refuses one that is no directory.
        let cwd = PathScope::WholeEnvironment.resolve(&workspace, request.cwd.as_deref().unwrap_or(&workspace))?;
        // The supervisor has the container's environment (an exec's), which every process
        // inherits under its own variables.
        Ok(request_of(request, Some(cwd), Vec::new(), false))
    }

    fn user_site(&self) -> (&'static str, &'static str) {
        ("container", "in the container")
    }
}

/// The driver's support set with `persistentProcessSessions` where it is served: the
/// driver mounts a supervisor, and the lease (when there is one) has it mounted.
pub(crate) fn with_sessions(
    mut set: envrt_driver_api::capability::SupportSet,
    driver: &DockerDriver,
    lease: Option<&envrt_driver_api::Lease>,
) -> envrt_driver_api::capability::SupportSet {
    if driver.agent.is_ok() && lease.is_none_or(mounted) {
        set.insert(envrt_driver_api::capability::CapabilityKey::PersistentProcessSessions);
    }
    set
}

#[async_trait]
impl envrt_driver_api::ExposePorts for DockerDriver {
    /// Through the lease's supervisor (started when none runs): its `connect` verb.
    async fn connect_port(
        &self,
        context: &LeaseContext,
        port: u16,
    ) -> Result<std::os::unix::net::UnixStream, DriverError> {
        self.agent(context, true).await?;
        let socket = run_dir(&lease_dir(&container_name(&context.lease.id))).join(SOCKET);
        envrt_driver_agent::expose::tunnel(&socket, &format!("{RUN_DIR}/{SOCKET}"), port).await
    }
}
