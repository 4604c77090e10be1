//! # envrt-driver-ssh
//!
//! Leases on remote machines over SSH: a lease is a private workspace directory on a
//! remote host, commands run there over SSH session channels, files move as tar streams.
//!
//! ## Why the system OpenSSH (through the `openssh` crate's native multiplexing)
//! The driver drives the host's `ssh` client: one `ControlMaster` connection per host
//! (started by `ssh -M`, which does the key exchange, host-key verification and
//! authentication), and every command a channel opened on that master through its control
//! socket by the `openssh` crate's `native-mux` implementation (no `ssh` process per
//! command). The alternative, a pure-Rust client (`russh`), was weighed and not taken:
//! - **Security record**: authentication and host-key checking stay with OpenSSH, the
//!   implementation every `sshd` is tested against, with its known-hosts format, agent,
//!   `~/.ssh/config` (jump hosts, certificates) and hardware keys working as users expect.
//! - **Performance**: a command costs one channel open over an open connection, the same
//!   as `ssh -o ControlPath=... host cmd` minus the `ssh` process, and a pure-Rust client
//!   would pay the same round trips; no crypto crates to compile (the `openssh` crates are
//!   small, on the 2-core builders too).
//! - **Maintenance**: `openssh` and `openssh-mux-client` are maintained (jonhoo,
//!   NobodyXu) and only speak the documented `PROTOCOL.mux`.
//!
//! The price, stated where it shows: OpenSSH's mux protocol relays a command's exit
//! status but not its exit-signal, so a command killed by a signal the driver did not send
//! ends with neither an exit code nor a signal (`metadata.signal = "unknown"`); timeouts,
//! which the driver sends, report theirs. The host needs the `ssh` binary.
//!
//! ## Hosts and trust
//! The environment's configuration names the host: `host` (required unless
//! [`SshConfig::target`] gives a default), `port`, `user`, `key` (a private key file;
//! otherwise the agent and OpenSSH's defaults), `knownHosts` (the file the host key must
//! be in; OpenSSH's default otherwise) and `acceptNewHostKey` (default false: a host
//! whose key is not known is refused; a key that differs from a known one is always
//! refused). Nothing of a request's variables is ever put on a command line: they travel
//! on the channel's stdin and are read by the remote prologue.
//!
//! ## Leases
//! `acquire_lease` creates `{root}/lease-{lease id}` (mode `0700`; `root` is
//! [`SshConfig::root`], relative to the remote user's home unless absolute) holding `work`
//! (the workspace: each command's cwd and `HOME`) and `run` (pid files, sync staging).
//! Release follows the policy like the local driver (removed unless `reuse_by_environment`,
//! or `retain_on_failure` ending `retained`); destroy removes it whatever the policy;
//! both first kill everything the lease runs, and both are idempotent. Resume finds the
//! directory again, from any process. A requested expiry is not supported (the facade
//! refuses such an acquire).
//!
//! ## Capabilities
//! Explicit support set: `reusableLeases` (under `reuse_by_environment`), `nativeSyncIn`,
//! `nativeSyncOut`, `duplexCommandStream`, `independentControlCommands`,
//! `incrementalSessionOutput`. No persistent sessions, no runner ingress.
//!
//! ## Execute
//! The login shell of the remote user (it must read POSIX `sh`) replaces itself with
//! `env -i` and a clean `/bin/sh` prologue, which reads the request's variables from
//! stdin, enters the cwd (confined lexically here, and on the remote side by resolving it:
//! a symlink leading out is refused with [`DriverError::PathOutsideWorkspace`]), records
//! its pid, starts a watchdog and becomes the command. `sshd` puts each channel's command
//! in a session and process group of its own; the watchdog kills that whole group when the
//! command ends (what it left holding stdout) and when the connection breaks, so nothing
//! of a command outlives its channel. A timeout sends `SIGTERM` to the group, then
//! `SIGKILL` after [`SshConfig::kill_grace`]. A missing program exits `127` with
//! `envrt: command not found: NAME`. The command sees the remote login's values of
//! [`SshConfig::env_allowlist`], `PATH` (a default when unset), `HOME` = the workspace,
//! then the request's variables (names must be `sh` identifiers). Each stream is capped;
//! the sink sees every chunk.
//!
//! ## Sync
//! Contract section 6, with the local driver's rules: every check first (sources, kinds,
//! overlapping targets, links that would escape, post-upload cwds), then the transfer;
//! sync in streams one tar archive into a staging directory of the lease and renames the
//! entries into place only after the remote side has checked every target's parent
//! resolves inside the workspace; sync out checks each source on the remote side and
//! stages on the host. An existing target is replaced by two renames (not one atomic
//! exchange: a reader may see it absent for an instant).
//!
//! ## Connections
//! One master per host (host, port, user, key, known-hosts), shared by every lease on it;
//! at most [`SshConfig::max_channels`] channels at once (`sshd`'s `MaxSessions`, 10 by
//! default, bounds a connection), further calls wait. A master that died is replaced on
//! the next call; a call whose connection broke mid-command fails with an `Unavailable`
//! error and its command is killed on the remote side by its watchdog.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use envrt_runtime_core::capability::{CapabilityDeclaration, CapabilityKey, SupportSet};
use envrt_runtime_core::driver::classify_driver;
use envrt_runtime_core::sync::confine_to_workspace;
use envrt_runtime_core::{
    AcquireInput, CapabilityInput, CapabilitySnapshot, DestroyLease, DriverError, DuplexChannels, EnvironmentDriver,
    Execute, ExecuteRequest, ExecuteResult, FileSync, JsonMap, Lease, LeaseContext, LeaseGrant, LeasePolicy,
    LeaseStatus, RealizeWorkspace, RealizedWorkspace, Recovery, ReleaseInput, ResumeLease, WorkspaceRequest,
};

mod connection;
mod descriptor;
mod duplex;
mod exec;
mod recovery;
mod remote;
mod sync;
mod sync_in;
mod sync_out;
mod target;

use connection::Host;
pub use descriptor::{DESCRIPTOR, SshDescriptor};
pub use target::SshTarget;

/// The registry key of this driver.
pub const DRIVER_KEY: &str = "ssh";

/// Configuration of an [`SshDriver`].
#[derive(Clone, Debug)]
pub struct SshConfig {
    /// The host of environments whose configuration names none (and the defaults of every
    /// field an environment leaves out).
    pub target: Option<SshTarget>,
    /// Where lease directories live on the remote side; relative to the remote user's
    /// home unless absolute. Default `.envrt/leases`.
    pub root: String,
    /// Most channels open at once on one connection; default 10 (`sshd`'s default
    /// `MaxSessions`).
    pub max_channels: usize,
    /// Remote login variables passed to commands when set; default `PATH`, `LANG`,
    /// `LC_ALL`, `LC_CTYPE`, `TZ`.
    pub env_allowlist: Vec<String>,
    /// Time between `SIGTERM` and `SIGKILL` when a command times out; default 2 s.
    pub kill_grace: Duration,
    /// Further hosts whose lease directories [`Recovery::inventory`] lists (besides the
    /// default target and every host this driver has connected to): the hosts of the
    /// configured environments, so `envrt gc` cleans them from a fresh process.
    pub known_targets: Vec<SshTarget>,
    /// Where the control sockets live (`0700`, this user's); `{temp dir}/envrt-ssh-{uid}`
    /// when `None`.
    pub control_dir: Option<PathBuf>,
}

impl Default for SshConfig {
    fn default() -> Self {
        SshConfig {
            target: None,
            root: ".envrt/leases".into(),
            max_channels: 10,
            env_allowlist: ["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ"]
                .into_iter()
                .map(String::from)
                .collect(),
            kill_grace: Duration::from_secs(2),
            known_targets: Vec::new(),
            control_dir: None,
        }
    }
}

/// The SSH driver (key `ssh`).
pub struct SshDriver {
    config: SshConfig,
    control_dir: PathBuf,
    hosts: std::sync::Mutex<HashMap<SshTarget, Arc<Host>>>,
}

impl std::fmt::Debug for SshDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshDriver").field("config", &self.config).finish()
    }
}

/// A lease's place on its host.
pub(crate) struct Place {
    pub(crate) host: Arc<Host>,
    /// `{root}/lease-{id}` (absolute, canonical).
    pub(crate) lease_dir: String,
    /// `{lease_dir}/work`.
    pub(crate) workspace: String,
}

/// `lease-{id}`, refusing ids that could leave the root.
fn lease_dir_name(lease_id: &str) -> Result<String, DriverError> {
    if lease_id.is_empty()
        || !lease_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        || lease_id.starts_with('.')
    {
        return Err(DriverError::invalid(format!("lease id {lease_id:?} is not valid")));
    }
    Ok(format!("lease-{lease_id}"))
}

impl SshDriver {
    /// A driver over `config`. Connects lazily, on the first call for a host.
    pub fn new(config: SshConfig) -> Result<SshDriver, DriverError> {
        // Created (and checked) on the first connection, so a driver that never connects
        // leaves nothing behind.
        let control_dir = config
            .control_dir
            .clone()
            .unwrap_or_else(connection::default_control_dir);
        if config.root.is_empty() || config.root.contains('\0') {
            return Err(DriverError::invalid("the ssh driver's root must be a non-empty path"));
        }
        Ok(SshDriver {
            config,
            control_dir,
            hosts: std::sync::Mutex::new(HashMap::new()),
        })
    }

    fn host(&self, target: &SshTarget) -> Arc<Host> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        hosts
            .entry(target.clone())
            .or_insert_with(|| {
                Arc::new(Host::new(
                    target.clone(),
                    self.control_dir.clone(),
                    self.config.max_channels,
                ))
            })
            .clone()
    }

    /// The target of an environment's configuration.
    pub fn target_of(&self, config: &JsonMap) -> Result<SshTarget, DriverError> {
        target::check_config(config)?;
        SshTarget::from_config(config, self.config.target.as_ref())
    }

    /// Connects to `target` (or reuses its connection) and checks it answers: for
    /// `envrt doctor`. The error says why not (unreachable, host key, authentication).
    pub async fn check(&self, target: &SshTarget) -> Result<(), DriverError> {
        let host = self.host(target);
        host.run_ok("run a command", "exit 0").await.map(|_| ())
    }

    /// How many connections the host of `target` has opened (one, while it stays up).
    pub fn connections_opened(&self, target: &SshTarget) -> u64 {
        self.host(target).connections_opened()
    }

    /// The control socket of `target`'s live connection (`ssh -o ControlPath=...`).
    pub async fn control_socket(&self, target: &SshTarget) -> Option<PathBuf> {
        self.host(target).control_socket().await
    }

    /// Closes every connection this driver opened.
    pub async fn shutdown(&self) {
        let hosts: Vec<Arc<Host>> = self
            .hosts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, h)| h)
            .collect();
        for host in hosts {
            host.close().await;
        }
    }

    /// The target a lease lives on: its environment's, or the one recorded at acquire.
    fn target_of_lease(
        &self,
        lease: &Lease,
        environment: Option<&envrt_runtime_core::Environment>,
    ) -> Result<SshTarget, DriverError> {
        if let Some(recorded) = lease.metadata.get("ssh").and_then(|v| v.as_object()) {
            return SshTarget::from_config(recorded, self.config.target.as_ref());
        }
        match environment {
            Some(env) => self.target_of(&env.config),
            None => self.target_of(&JsonMap::new()),
        }
    }

    /// Where a lease lives; `None` when its directory is gone.
    async fn find(&self, context: &LeaseContext) -> Result<Option<Place>, DriverError> {
        let name = lease_dir_name(&context.lease.id)?;
        let host = self.host(&self.target_of_lease(&context.lease, context.environment.as_ref())?);
        let out = host
            .run_ok("find the lease", &remote::find_lease(&self.config.root, &name))
            .await?;
        let workspace = String::from_utf8_lossy(&out).trim_end_matches('\n').to_owned();
        if workspace.is_empty() {
            return Ok(None);
        }
        let lease_dir = workspace.trim_end_matches("/work").to_owned();
        Ok(Some(Place {
            host,
            lease_dir,
            workspace,
        }))
    }

    /// Where a lease lives, from its metadata when recorded (no round trip).
    pub(crate) async fn place(&self, context: &LeaseContext) -> Result<Place, DriverError> {
        let gone = || DriverError::ResourceGone {
            id: context
                .lease
                .provider_lease_id
                .clone()
                .unwrap_or_else(|| context.lease.id.clone()),
        };
        if let Some(workspace) = context.lease.metadata.get("workspace").and_then(|v| v.as_str()) {
            let host = self.host(&self.target_of_lease(&context.lease, context.environment.as_ref())?);
            let name = lease_dir_name(&context.lease.id)?;
            let lease_dir = workspace.trim_end_matches("/work").to_owned();
            if lease_dir.ends_with(&format!("/{name}")) {
                return Ok(Place {
                    host,
                    lease_dir,
                    workspace: workspace.to_owned(),
                });
            }
        }
        self.find(context).await?.ok_or_else(gone)
    }

    fn grant(&self, lease_id: &str, target: &SshTarget, workspace: &str) -> Result<LeaseGrant, DriverError> {
        let mut metadata = JsonMap::new();
        metadata.insert("driver".into(), DRIVER_KEY.into());
        metadata.insert("workspace".into(), workspace.into());
        metadata.insert("ssh".into(), serde_json::Value::Object(target.to_metadata()));
        Ok(LeaseGrant {
            provider: Some(DRIVER_KEY.into()),
            provider_lease_id: Some(lease_dir_name(lease_id)?),
            metadata,
            expires_at: None,
        })
    }

    /// Kills what the lease runs and removes its directory; idempotent.
    async fn remove(&self, context: &LeaseContext) -> Result<(), DriverError> {
        let name = lease_dir_name(&context.lease.id)?;
        let host = self.host(&self.target_of_lease(&context.lease, context.environment.as_ref())?);
        let root = host
            .run_ok(
                "find the lease root",
                &format!(
                    "cd && cd -P -- {} 2>/dev/null && pwd -P; exit 0",
                    remote::quote(&self.config.root)
                ),
            )
            .await?;
        let root = String::from_utf8_lossy(&root).trim_end_matches('\n').to_owned();
        if root.is_empty() {
            return Ok(());
        }
        host.run_ok("remove the lease", &remote::remove_lease(&format!("{root}/{name}")))
            .await
            .map(|_| ())
    }

    fn support_set() -> SupportSet {
        [
            CapabilityKey::ReusableLeases,
            CapabilityKey::NativeSyncIn,
            CapabilityKey::NativeSyncOut,
            CapabilityKey::DuplexCommandStream,
            CapabilityKey::IndependentControlCommands,
            CapabilityKey::IncrementalSessionOutput,
        ]
        .into_iter()
        .collect()
    }

    fn declaration() -> CapabilityDeclaration {
        CapabilityDeclaration {
            incremental_session_output: Some(true),
            duplex_command_stream: Some(true),
            ..Default::default()
        }
    }

    pub(crate) async fn exec_at(&self, place: &Place, request: ExecuteRequest) -> Result<ExecuteResult, DriverError> {
        let cwd = match &request.cwd {
            None => None,
            Some(cwd) => Some(confine_to_workspace(&place.workspace, cwd)?),
        };
        let site = exec::ExecSite {
            host: &place.host,
            workspace: &place.workspace,
            lease_dir: &place.lease_dir,
            allowlist: &self.config.env_allowlist,
            kill_grace: self.config.kill_grace,
        };
        exec::run(&site, request, cwd.as_deref()).await
    }
}

#[async_trait]
impl EnvironmentDriver for SshDriver {
    fn key(&self) -> &str {
        DRIVER_KEY
    }

    /// Commands run on the remote host, on its network: no policy can be enforced.
    fn network_boundary(&self, _: &envrt_runtime_core::Environment) -> envrt_runtime_core::network::NetworkBoundary {
        envrt_runtime_core::network::NetworkBoundary::HostShared
    }

    async fn check_environment_config(&self, config: &JsonMap) -> Result<(), DriverError> {
        target::check_config(config)
    }

    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        let name = lease_dir_name(&input.lease_id)?;
        let target = self.target_of(&input.environment.config)?;
        let host = self.host(&target);
        let out = host
            .run_ok(
                "create the lease directory",
                &remote::create_lease(&self.config.root, &name),
            )
            .await?;
        let workspace = String::from_utf8_lossy(&out).trim_end_matches('\n').to_owned();
        if !workspace.starts_with('/') || !workspace.ends_with(&format!("/{name}/work")) {
            return Err(DriverError::other(format!(
                "the remote side answered an unexpected workspace {workspace:?}"
            )));
        }
        self.grant(&input.lease_id, &target, &workspace)
    }

    async fn release_lease(&self, input: &ReleaseInput) -> Result<(), DriverError> {
        let lease = &input.context.lease;
        lease_dir_name(&lease.id)?;
        let keep = match lease.lease_policy {
            LeasePolicy::ReuseByEnvironment => true,
            LeasePolicy::RetainOnFailure => input.status == LeaseStatus::Retained,
            LeasePolicy::Ephemeral | LeasePolicy::ReuseByExecutionWorkspace => false,
        };
        if keep {
            if let Some(place) = self.find(&input.context).await? {
                place
                    .host
                    .run_ok("stop the lease's commands", &remote::kill_lease(&place.lease_dir))
                    .await?;
            }
            Ok(())
        } else {
            self.remove(&input.context).await
        }
    }

    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        let resolved = input
            .environment
            .as_ref()
            .is_none_or(|env| self.target_of(&env.config).is_ok());
        Ok(classify_driver(
            self,
            Self::support_set(),
            Some(&Self::declaration()),
            input,
            resolved,
        ))
    }

    fn as_resume(&self) -> Option<&dyn ResumeLease> {
        Some(self)
    }
    fn as_destroy(&self) -> Option<&dyn DestroyLease> {
        Some(self)
    }
    fn as_realize(&self) -> Option<&dyn RealizeWorkspace> {
        Some(self)
    }
    fn as_execute(&self) -> Option<&dyn Execute> {
        Some(self)
    }
    fn as_sync(&self) -> Option<&dyn FileSync> {
        Some(self)
    }
    fn as_duplex(&self) -> Option<&dyn DuplexChannels> {
        Some(self)
    }
    fn as_recovery(&self) -> Option<&dyn Recovery> {
        Some(self)
    }
}

#[async_trait]
impl ResumeLease for SshDriver {
    async fn resume_lease(&self, context: &LeaseContext) -> Result<Option<LeaseGrant>, DriverError> {
        let target = self.target_of_lease(&context.lease, context.environment.as_ref())?;
        match self.find(context).await? {
            Some(place) => Ok(Some(self.grant(&context.lease.id, &target, &place.workspace)?)),
            None => Ok(None),
        }
    }
}

#[async_trait]
impl DestroyLease for SshDriver {
    async fn destroy_lease(&self, context: &LeaseContext) -> Result<(), DriverError> {
        self.remove(context).await
    }
}

#[async_trait]
impl RealizeWorkspace for SshDriver {
    async fn realize_workspace(
        &self,
        context: &LeaseContext,
        request: &WorkspaceRequest,
    ) -> Result<RealizedWorkspace, DriverError> {
        let place = self.place(context).await?;
        let cwd = match &request.remote_path {
            None => place.workspace.clone(),
            Some(remote_path) => {
                let dir = confine_to_workspace(&place.workspace, remote_path)?;
                let script = format!(
                    "w={w}; d={d}; a=$d; while [ ! -e \"$a\" ] && [ ! -L \"$a\" ]; do a=$(dirname -- \"$a\"); done\n\
                     ok() {{ case \"$(pwd -P)/\" in \"$w\"/*) return 0;; esac; return 1; }}\n\
                     (cd -P -- \"$a\" 2>/dev/null && ok) || exit 121\nmkdir -p -- \"$d\" && (cd -P -- \"$d\" && ok) || exit 121",
                    w = remote::quote(&place.workspace),
                    d = remote::quote(&dir)
                );
                let (code, _, err) = place.host.run(&script, &[]).await?;
                match code {
                    0 => dir,
                    121 => {
                        return Err(DriverError::PathOutsideWorkspace {
                            path: remote_path.clone(),
                        });
                    }
                    _ => {
                        return Err(DriverError::other(format!(
                            "cannot create {dir}: {}",
                            String::from_utf8_lossy(&err).trim()
                        )));
                    }
                }
            }
        };
        let mut metadata = JsonMap::new();
        metadata.insert("workspace".into(), place.workspace.clone().into());
        Ok(RealizedWorkspace {
            cwd,
            metadata: Some(metadata),
        })
    }
}

#[async_trait]
impl Execute for SshDriver {
    async fn execute(&self, context: &LeaseContext, request: ExecuteRequest) -> Result<ExecuteResult, DriverError> {
        let place = self.place(context).await?;
        self.exec_at(&place, request).await
    }
}
