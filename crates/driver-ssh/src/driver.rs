//! The SSH driver: [`SshDriver`], its constructor and accessors, the place of a lease on
//! its host, and its `EnvironmentDriver` impl (acquire, release, capabilities) with
//! resume and destroy.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use envrt_driver_api::capability::{CapabilityDeclaration, CapabilityKey, SupportSet};
use envrt_driver_api::driver::classify_driver;
use envrt_driver_api::sync::confine_to_workspace;
use envrt_driver_api::{
    AcquireInput, CapabilityInput, CapabilitySnapshot, DestroyLease, DriverError, DuplexChannels, EnvironmentDriver,
    Execute, ExecuteRequest, ExecuteResult, FileSync, JsonMap, Lease, LeaseContext, LeaseGrant, LeasePolicy,
    LeaseStatus, ProcessSessions, RealizeWorkspace, Recovery, ReleaseInput, ResumeLease,
};

use crate::connection::{self, Host};
use crate::{SshConfig, SshTarget, remote, target};

/// The registry key of this driver.
pub const DRIVER_KEY: &str = "ssh";

/// The SSH driver (key `ssh`).
pub struct SshDriver {
    pub(crate) config: SshConfig,
    pub(crate) control_dir: PathBuf,
    pub(crate) hosts: std::sync::Mutex<HashMap<SshTarget, Arc<Host>>>,
    /// The process supervisor binary of this host, once found and hashed (a failure is
    /// not remembered: a binary built later is found).
    pub(crate) agent_binary: tokio::sync::Mutex<Option<crate::processes::supervisor::Binary>>,
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
            agent_binary: tokio::sync::Mutex::new(None),
        })
    }

    pub(crate) fn host(&self, target: &SshTarget) -> Arc<Host> {
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
            if let Some(session) = host.current().await {
                // Its forwards end with it: their local ends are dead files.
                self.forget_forwards(&session);
            }
            host.close().await;
        }
    }

    /// The target a lease lives on: its environment's, or the one recorded at acquire.
    pub(crate) fn target_of_lease(
        &self,
        lease: &Lease,
        environment: Option<&envrt_driver_api::Environment>,
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
    pub(crate) async fn find(&self, context: &LeaseContext) -> Result<Option<Place>, DriverError> {
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
        let lease_dir = format!("{root}/{name}");
        host.run_ok("remove the lease", &remote::remove_lease(&lease_dir))
            .await?;
        self.drop_forwards(&host, &lease_dir).await;
        Ok(())
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
        let site = crate::execute::ExecSite {
            host: &place.host,
            workspace: &place.workspace,
            lease_dir: &place.lease_dir,
            allowlist: &self.config.env_allowlist,
            kill_grace: self.config.kill_grace,
        };
        crate::execute::run(&site, request, cwd.as_deref()).await
    }
}

#[async_trait]
impl EnvironmentDriver for SshDriver {
    fn key(&self) -> &str {
        DRIVER_KEY
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
                self.drop_forwards(&place.host, &place.lease_dir).await;
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
        let mut set = Self::support_set();
        // Granted only where the supervisor is known to run (probed once per host).
        let target = match (&input.lease, &input.environment) {
            (Some(lease), environment) => self.target_of_lease(lease, environment.as_ref()).ok(),
            (None, Some(environment)) => self.target_of(&environment.config).ok(),
            (None, None) => None,
        };
        if let Some(target) = target
            && self.serves_processes(&self.host(&target)).await
        {
            set.insert(CapabilityKey::PersistentProcessSessions);
        }
        Ok(classify_driver(self, set, Some(&Self::declaration()), input, resolved))
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
    /// `SIGSTOP` / `SIGCONT` to everything the lease runs on the remote host (`pause`).
    fn as_pause(&self) -> Option<&dyn envrt_driver_api::PauseLease> {
        Some(self)
    }
    /// A copy of the workspace on the remote host per copy (`fork`).
    fn as_fork(&self) -> Option<&dyn envrt_driver_api::ForkLease> {
        Some(self)
    }
    /// Served by one supervisor per lease on the remote host (`processes`); granted only
    /// where it can run there.
    fn as_processes(&self) -> Option<&dyn ProcessSessions> {
        Some(self)
    }
    /// Commands run on the remote host, on its network: no policy can be enforced.
    fn network_boundary(&self, _: &envrt_driver_api::Environment) -> envrt_driver_api::network::NetworkBoundary {
        envrt_driver_api::network::NetworkBoundary::HostShared
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
