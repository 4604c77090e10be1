//! The local driver: [`LocalDriver`], its constructor and accessors, and its
//! `EnvironmentDriver` impl (acquire, release, capabilities) with resume and destroy.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use envrt_driver_api::capability::{CapabilityDeclaration, CapabilityKey, SupportSet};
use envrt_driver_api::driver::classify_driver;
use envrt_driver_api::{
    AcquireInput, CapabilityInput, CapabilitySnapshot, DestroyLease, DriverError, EnvironmentDriver, Execute, FileSync,
    LeaseContext, LeaseGrant, LeasePolicy, LeaseStatus, PathScope, RealizeWorkspace, Recovery, ReleaseInput,
    ResumeLease, Templates, Timestamp,
};

use crate::config::default_root;
use crate::process::groups::ProcessTable;
use crate::process::{containment, user};
use crate::workspace::{create_private_dir, lease_dir_name, path_str, remove_tree};
use crate::{LocalConfig, expiry};

/// The registry key of this driver.
pub const DRIVER_KEY: &str = "local";

/// The local driver (key `local`): real processes and a private workspace per lease.
#[derive(Debug)]
pub struct LocalDriver {
    root: PathBuf,
    config: LocalConfig,
    processes: Arc<ProcessTable>,
    containment: containment::Containment,
}

impl LocalDriver {
    /// A driver over `config`; creates the root directory (mode `0700`) when missing. The
    /// root must be a directory owned by the driver's effective user.
    pub fn new(config: LocalConfig) -> Result<LocalDriver, DriverError> {
        let root = config.root.clone().unwrap_or_else(default_root);
        let cannot = |what: &str, e| DriverError::io(format!("cannot {what} workspace root {}", root.display()), e);
        match create_private_dir(&root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&root).map_err(|e| cannot("create", e))?;
            }
            Err(e) => return Err(cannot("create", e)),
        }
        let root = std::fs::canonicalize(&root).map_err(|e| cannot("resolve", e))?;
        let meta = std::fs::metadata(&root).map_err(|e| cannot("inspect", e))?;
        if !meta.is_dir() {
            return Err(DriverError::invalid(format!(
                "workspace root {} is not a directory",
                root.display()
            )));
        }
        if meta.uid() != nix::unistd::geteuid().as_raw() {
            return Err(DriverError::invalid(format!(
                "workspace root {} is owned by another user",
                root.display()
            )));
        }
        path_str(&root)?;
        let containment = containment::Containment::detect(config.cgroups);
        Ok(LocalDriver {
            root,
            config,
            processes: Arc::new(ProcessTable::default()),
            containment,
        })
    }

    /// The (canonical) directory under which lease workspaces live.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The workspace directory of a lease (whether or not it exists).
    pub fn workspace_of(&self, lease_id: &str) -> Result<PathBuf, DriverError> {
        Ok(self.root.join(lease_dir_name(lease_id)?))
    }

    /// How this driver contains what a lease's commands start: `cgroup v2 under PATH`, or
    /// `process groups and a /proc scan on release`.
    pub fn containment(&self) -> String {
        self.containment.describe()
    }

    /// How many commands a lease is running right now.
    pub fn running_commands(&self, lease_id: &str) -> usize {
        self.processes.running(lease_id)
    }

    /// The static support set: everything but persistent sessions, duplex and ingress.
    fn support_set() -> SupportSet {
        [
            CapabilityKey::ReusableLeases,
            CapabilityKey::NativeSyncIn,
            CapabilityKey::NativeSyncOut,
            CapabilityKey::IndependentControlCommands,
            CapabilityKey::IncrementalSessionOutput,
            CapabilityKey::ConcurrentSyncOperations,
        ]
        .into_iter()
        .collect()
    }

    /// The opt-in keys this driver declares: output streams to the sink as it arrives,
    /// and sync in and out touch independent paths.
    fn declaration() -> CapabilityDeclaration {
        CapabilityDeclaration {
            incremental_session_output: Some(true),
            concurrent_sync_operations: Some(true),
            ..Default::default()
        }
    }

    /// The existing workspace of a lease, or [`DriverError::ResourceGone`].
    pub(crate) fn live_workspace(&self, context: &LeaseContext) -> Result<PathBuf, DriverError> {
        let dir = self.workspace_of(&context.lease.id)?;
        if dir.is_dir() {
            Ok(dir)
        } else {
            Err(DriverError::ResourceGone {
                id: context
                    .lease
                    .provider_lease_id
                    .clone()
                    .unwrap_or_else(|| lease_dir_name(&context.lease.id).unwrap_or_default()),
            })
        }
    }

    fn grant(&self, lease_id: &str, dir: &Path, expires_at: Option<Timestamp>) -> Result<LeaseGrant, DriverError> {
        let mut metadata = envrt_driver_api::JsonMap::new();
        metadata.insert("driver".into(), DRIVER_KEY.into());
        metadata.insert(
            envrt_driver_api::model::WORKSPACE_METADATA_KEY.into(),
            path_str(dir)?.into(),
        );
        Ok(LeaseGrant {
            provider: Some(DRIVER_KEY.into()),
            provider_lease_id: Some(lease_dir_name(lease_id)?),
            metadata,
            expires_at,
        })
    }

    /// Kills the lease's commands and removes its workspace.
    pub(crate) async fn remove_workspace(&self, lease_id: &str) -> Result<(), DriverError> {
        let dir = self.workspace_of(lease_id)?;
        self.stop_everything(lease_id).await?;
        self.stop_watchdog(lease_id)?;
        let mut attempt = 0;
        loop {
            match remove_tree(&dir) {
                Ok(()) => break,
                // Something dying may still have added an entry; try again shortly.
                Err(_) if attempt < 3 => {
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(e) => return Err(DriverError::io(format!("cannot remove workspace {}", dir.display()), e)),
            }
        }
        self.processes.reopen(lease_id);
        Ok(())
    }

    pub(crate) fn processes(&self) -> &Arc<ProcessTable> {
        &self.processes
    }

    pub(crate) fn config(&self) -> &LocalConfig {
        &self.config
    }

    pub(crate) fn containment_mode(&self) -> &containment::Containment {
        &self.containment
    }

    /// Ends the lease's expiry and idle watchdogs, if any (release and destroy before
    /// expiry).
    pub(crate) fn stop_watchdog(&self, lease_id: &str) -> Result<(), DriverError> {
        let name = lease_dir_name(lease_id)?;
        expiry::stop(&expiry::pid_file(&self.root, &name), &self.root.join(&name));
        self.stop_idle(&name);
        Ok(())
    }

    /// Acquires a lease whose workspace starts as a copy of `seed` (a fork), else of the
    /// input's template, else empty. Nothing is left when it fails.
    pub(crate) fn acquire_seeded(&self, input: &AcquireInput, seed: Option<&Path>) -> Result<LeaseGrant, DriverError> {
        user::check_config(&input.environment.config)?;
        let dir = self.workspace_of(&input.lease_id)?;
        self.processes.reopen(&input.lease_id);
        create_private_dir(&dir)
            .map_err(|e| DriverError::io(format!("cannot create workspace {}", dir.display()), e))?;
        envrt_driver_api::fault::point("acquire");
        let seeded = match (seed, &input.template) {
            (Some(seed), _) => crate::templates::copy_tree(seed, &dir).map(drop),
            (None, Some(template)) => self.seed_workspace(template, &dir).map(drop),
            (None, None) => Ok(()),
        };
        if let Err(e) = seeded {
            let _ = remove_tree(&dir);
            return Err(e);
        }
        let granted = self.grant(&input.lease_id, &dir, input.requested_expires_at);
        let watched = match (&granted, input.requested_expires_at) {
            (Ok(_), Some(at)) => {
                let cgroup = self.containment.lease_dir(&input.lease_id);
                expiry::start(&expiry::Watch {
                    at,
                    cgroup: cgroup.as_deref(),
                    workspace: &dir,
                    remove: input.policy != LeasePolicy::ReuseByEnvironment,
                    pid_file: &expiry::pid_file(&self.root, &lease_dir_name(&input.lease_id)?),
                })
            }
            _ => Ok(()),
        };
        envrt_driver_api::fault::point("acquire");
        match (granted, watched) {
            (Ok(grant), Ok(())) => Ok(grant),
            (Err(e), _) | (_, Err(e)) => {
                let _ = remove_tree(&dir);
                Err(e)
            }
        }
    }

    /// Kills everything the lease still runs: its process groups, then its cgroups (or,
    /// without them, every process tied to its workspace).
    async fn stop_everything(&self, lease_id: &str) -> Result<(), DriverError> {
        let dir = self.workspace_of(lease_id)?;
        self.processes.close(lease_id).await;
        crate::processes::agent::stop(&self.root, lease_id);
        self.containment.kill_lease(lease_id, &dir).await;
        Ok(())
    }
}

#[async_trait]
impl EnvironmentDriver for LocalDriver {
    fn key(&self) -> &str {
        DRIVER_KEY
    }

    async fn check_environment_config(&self, config: &envrt_driver_api::JsonMap) -> Result<(), DriverError> {
        user::check_config(config)
    }

    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        self.acquire_seeded(input, None)
    }

    async fn release_lease(&self, input: &ReleaseInput) -> Result<(), DriverError> {
        let lease = &input.context.lease;
        lease_dir_name(&lease.id)?;
        self.stop_everything(&lease.id).await?;
        envrt_driver_api::fault::point("release");
        self.stop_watchdog(&lease.id)?;
        let keep = match lease.lease_policy {
            LeasePolicy::ReuseByEnvironment => true,
            LeasePolicy::RetainOnFailure => input.status == LeaseStatus::Retained,
            LeasePolicy::Ephemeral | LeasePolicy::ReuseByExecutionWorkspace => false,
        };
        if keep {
            Ok(())
        } else {
            self.remove_workspace(&lease.id).await
        }
    }

    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        Ok(classify_driver(
            self,
            crate::processes::with_sessions(Self::support_set()),
            Some(&Self::declaration()),
            input,
            true,
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
    fn as_templates(&self) -> Option<&dyn Templates> {
        Some(self)
    }
    fn as_fork(&self) -> Option<&dyn envrt_driver_api::ForkLease> {
        Some(self)
    }
    /// Commands run on this host, on its network: no policy can be enforced.
    fn network_boundary(&self, _: &envrt_driver_api::Environment) -> envrt_driver_api::network::NetworkBoundary {
        envrt_driver_api::network::NetworkBoundary::HostShared
    }

    fn as_recovery(&self) -> Option<&dyn Recovery> {
        Some(self)
    }

    fn as_processes(&self) -> Option<&dyn envrt_driver_api::ProcessSessions> {
        Some(self)
    }

    fn as_pause(&self) -> Option<&dyn envrt_driver_api::PauseLease> {
        Some(self)
    }

    fn as_idle(&self) -> Option<&dyn envrt_driver_api::IdleTimeout> {
        Some(self)
    }
    fn as_extend(&self) -> Option<&dyn envrt_driver_api::ExtendLease> {
        Some(self)
    }

    fn path_scope(&self) -> PathScope {
        self.config.path_scope
    }
}

#[async_trait]
impl ResumeLease for LocalDriver {
    async fn resume_lease(&self, context: &LeaseContext) -> Result<Option<LeaseGrant>, DriverError> {
        let dir = self.workspace_of(&context.lease.id)?;
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => {
                self.processes.reopen(&context.lease.id);
                Ok(Some(self.grant(&context.lease.id, &dir, context.lease.expires_at)?))
            }
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(DriverError::io(
                format!("cannot inspect workspace {}", dir.display()),
                e,
            )),
        }
    }
}

#[async_trait]
impl DestroyLease for LocalDriver {
    async fn destroy_lease(&self, context: &LeaseContext) -> Result<(), DriverError> {
        self.remove_workspace(&context.lease.id).await
    }
}
