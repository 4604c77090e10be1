//! [`DockerDriver`]: connection, the lease life cycle (a container per lease, made in
//! `container.rs`), capabilities, and the accessors of the optional groups (each group's
//! impl lives in its concern's file).

use async_trait::async_trait;
use bollard::query_parameters::StopContainerOptionsBuilder;
use envrt_driver_api::capability::{CapabilityKey, SupportSet};
use envrt_driver_api::driver::classify_driver;
use envrt_driver_api::{
    AcquireInput, CapabilityDeclaration, CapabilityInput, CapabilitySnapshot, DestroyLease, DriverError,
    DuplexChannels, EnvironmentDriver, Execute, FileSync, JsonMap, LeaseContext, LeaseGrant, LeasePolicy, LeaseStatus,
    RealizeWorkspace, ReleaseInput, ResumeLease, Timestamp,
};

use crate::config::{DockerConfig, EnvConfig, META_WORKSPACE_DIR, lease_workspace};
use crate::container::bounded_expiry;
use crate::engine::{Engine, has_status, is_not_found};
use crate::owner::OwnerCache;
use crate::process::run_script;

/// The driver's registry key.
pub const DRIVER_KEY: &str = "docker";
/// Label: the lease that owns the container.
pub const LABEL_LEASE_ID: &str = "envrt.lease-id";
/// Label: the lease's environment.
pub const LABEL_ENVIRONMENT_ID: &str = "envrt.environment-id";
/// Label: the lease's tenant.
pub const LABEL_COMPANY_ID: &str = "envrt.company-id";
/// Label: `true` on every container this driver creates.
pub const LABEL_MANAGED: &str = "envrt.managed";
/// Label: when the lease expires (RFC 3339), on the containers of expiring leases.
pub const LABEL_EXPIRES_AT: &str = "envrt.expires-at";

/// Lease-metadata key: `bind` when the lease's workspace is a bind-mounted host directory.
pub(crate) const META_WORKSPACE_MOUNT: &str = "workspaceMount";

/// The Docker driver: one container per lease, commands through the exec API, files
/// through the archive API, duplex channels over exec attach.
#[derive(Debug)]
pub struct DockerDriver {
    pub(crate) engine: Engine,
    pub(crate) config: DockerConfig,
    /// The container user's ids per image id and user spec.
    pub(crate) owners: OwnerCache,
    /// The process supervisor mounted into every lease's container, or why none is.
    pub(crate) agent: Result<std::path::PathBuf, String>,
    /// What the driver runs each lease's egress with, or why it has none.
    pub(crate) egress: Result<crate::egress::EgressSetup, String>,
    /// Whether this host sees the containers' processes (a local engine), once looked at.
    pub(crate) host_sees: std::sync::OnceLock<bool>,
}

impl DockerDriver {
    /// Connects to the engine (see [`DockerConfig::host`]); fails within
    /// `connect_timeout` with [`DriverError::Unavailable`] naming the address when no
    /// engine answers.
    pub async fn connect(config: DockerConfig) -> Result<DockerDriver, DriverError> {
        let engine = Engine::connect(&config).await?;
        let agent = crate::processes::resolve(config.agent.as_deref(), &engine.address);
        let egress = crate::egress::resolve(config.egress.as_deref(), config.egress_dns, &agent);
        Ok(DockerDriver {
            engine,
            config,
            owners: OwnerCache::default(),
            agent,
            egress,
            host_sees: std::sync::OnceLock::new(),
        })
    }

    /// The engine address in use.
    pub fn address(&self) -> &str {
        &self.engine.address
    }

    /// Whether `image` is present on the engine (the driver never pulls).
    pub async fn image_exists(&self, image: &str) -> Result<bool, DriverError> {
        match self.engine.retry(|| self.engine.docker.inspect_image(image)).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(self.engine.error("inspecting an image", e)),
        }
    }

    /// The lease's container id, when the container exists and carries the lease's label.
    pub(crate) async fn owned_container(&self, context: &LeaseContext) -> Result<Option<(String, bool)>, DriverError> {
        let Some(id) = context.lease.provider_lease_id.as_deref() else {
            return Ok(None);
        };
        let inspected = match self
            .engine
            .retry(|| self.engine.docker.inspect_container(id, None))
            .await
        {
            Ok(inspected) => inspected,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(self.engine.error("inspecting a container", e)),
        };
        let owner = inspected
            .config
            .as_ref()
            .and_then(|c| c.labels.as_ref())
            .and_then(|l| l.get(LABEL_LEASE_ID))
            .cloned();
        if owner.as_deref() != Some(context.lease.id.as_str()) {
            return Ok(None);
        }
        let running = inspected.state.and_then(|s| s.running).unwrap_or(false);
        Ok(Some((inspected.id.unwrap_or_else(|| id.to_owned()), running)))
    }

    /// The engine's inspection of the lease's `container`: gone (the lease's resource) when
    /// the engine no longer has it, else the engine's error.
    pub(crate) async fn inspect_leased(
        &self,
        container: &str,
    ) -> Result<bollard::models::ContainerInspectResponse, DriverError> {
        match self
            .engine
            .retry(|| self.engine.docker.inspect_container(container, None))
            .await
        {
            Ok(inspected) => Ok(inspected),
            Err(e) if is_not_found(&e) => Err(DriverError::ResourceGone {
                id: container.to_owned(),
            }),
            Err(e) => Err(self.engine.error("inspecting a container", e)),
        }
    }

    pub(crate) fn container_of(context: &LeaseContext) -> Result<&str, DriverError> {
        context
            .lease
            .provider_lease_id
            .as_deref()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| DriverError::ResourceGone {
                id: context.lease.id.clone(),
            })
    }

    /// The numeric uid and gid of the container's user (recorded at acquire; asked of
    /// the container otherwise).
    pub(crate) async fn owner_of(&self, context: &LeaseContext) -> Result<(u64, u64), DriverError> {
        let meta = &context.lease.metadata;
        if let (Some(uid), Some(gid)) = (
            meta.get("uid").and_then(|v| v.as_u64()),
            meta.get("gid").and_then(|v| v.as_u64()),
        ) {
            return Ok((uid, gid));
        }
        self.ask_owner(Self::container_of(context)?).await
    }

    pub(crate) async fn ask_owner(&self, container: &str) -> Result<(u64, u64), DriverError> {
        let (stdout, stderr, code) = run_script(
            &self.engine,
            container,
            None,
            "id -u && id -g",
            &[],
            "reading the container user",
        )
        .await?;
        let text = String::from_utf8_lossy(&stdout);
        let mut ids = text.split_whitespace().map(|s| s.parse::<u64>());
        match (code, ids.next(), ids.next()) {
            (Some(0), Some(Ok(uid)), Some(Ok(gid))) => Ok((uid, gid)),
            _ => Err(DriverError::other(format!(
                "Could not read the container user's ids: {}",
                String::from_utf8_lossy(&stderr).trim()
            ))),
        }
    }

    pub(crate) fn workspace_of(context: &LeaseContext) -> String {
        lease_workspace(&context.lease, context.environment.as_ref())
    }

    fn grant(&self, container_id: &str, name: &str, config: Option<&EnvConfig>, workspace: &str) -> LeaseGrant {
        let mut metadata = JsonMap::new();
        metadata.insert("containerId".into(), container_id.into());
        metadata.insert("containerName".into(), name.into());
        metadata.insert("dockerHost".into(), self.engine.address.clone().into());
        metadata.insert(META_WORKSPACE_DIR.into(), workspace.into());
        metadata.insert(envrt_driver_api::model::WORKSPACE_METADATA_KEY.into(), workspace.into());
        if let Some(config) = config {
            metadata.insert("image".into(), config.image.clone().into());
        }
        LeaseGrant {
            provider: Some(DRIVER_KEY.to_owned()),
            provider_lease_id: Some(container_id.to_owned()),
            metadata,
            expires_at: None,
        }
    }
}

/// A container name for a lease: `envrt-` plus the id's safe characters.
pub(crate) fn container_name(lease_id: &str) -> String {
    let safe: String = lease_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("envrt-{safe}")
}

/// The static support set, written out key by key so that a key added to the model is
/// not granted here until somebody decides Docker supports it. Not here:
/// `runnerWebSocketIngress` (the driver serves no ingress endpoint) and
/// `persistentProcessSessions`, which [`crate::processes::with_sessions`] adds where a
/// supervisor is mounted.
fn support_set() -> SupportSet {
    [
        CapabilityKey::ReusableLeases,
        CapabilityKey::NativeSyncIn,
        CapabilityKey::NativeSyncOut,
        CapabilityKey::IndependentControlCommands,
        CapabilityKey::IncrementalSessionOutput,
        CapabilityKey::ConcurrentSyncOperations,
        CapabilityKey::DuplexCommandStream,
    ]
    .into_iter()
    .collect()
}

#[async_trait]
impl EnvironmentDriver for DockerDriver {
    fn key(&self) -> &str {
        DRIVER_KEY
    }

    fn brokers_credentials(&self) -> bool {
        // Its egress proxy terminates TLS for credentialed hosts (`egress_credentials`).
        true
    }

    fn network_boundary(
        &self,
        environment: &envrt_driver_api::Environment,
    ) -> envrt_driver_api::network::NetworkBoundary {
        crate::network::boundary(environment, crate::egress::none_boundary(self))
    }

    async fn update_network_policy(
        &self,
        context: &LeaseContext,
        policy: &envrt_driver_api::network::Policy,
    ) -> Result<(), DriverError> {
        self.update_egress(context, policy).await
    }

    async fn check_environment_config(&self, config: &envrt_driver_api::JsonMap) -> Result<(), DriverError> {
        crate::config::check_keys(config)
    }

    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        let config = EnvConfig::of(&input.environment)?;
        if let Some(requested) = input.requested_expires_at
            && bounded_expiry(requested) <= Timestamp::now()
        {
            return Err(DriverError::invalid(format!(
                "the requested expiry {requested} leaves the container no whole second to run"
            )));
        }
        let started = self.create_and_start(input, &config).await?;
        let mut grant = self.grant(&started.id, &started.name, Some(&config), &config.working_dir);
        grant.expires_at = input.requested_expires_at.map(bounded_expiry);
        grant.metadata.insert("uid".into(), started.owner.0.into());
        grant.metadata.insert("gid".into(), started.owner.1.into());
        if started.bound {
            grant.metadata.insert(META_WORKSPACE_MOUNT.into(), "bind".into());
        }
        if started.agent {
            grant.metadata.insert(crate::processes::META_AGENT.into(), true.into());
        }
        if started.egress {
            grant.metadata.insert(crate::egress::META_EGRESS.into(), true.into());
        }
        Ok(grant)
    }

    async fn release_lease(&self, input: &ReleaseInput) -> Result<(), DriverError> {
        let context = &input.context;
        let keep = match context.lease.lease_policy {
            LeasePolicy::ReuseByEnvironment => Some(false),
            LeasePolicy::RetainOnFailure if input.status == LeaseStatus::Retained => Some(true),
            _ => None,
        };
        let Some((id, running)) = self.owned_container(context).await? else {
            // An expired lease's container removed itself; its directory remains.
            if keep.is_none() {
                self.remove_lease_dirs(&context.lease.id);
            }
            return Ok(());
        };
        // A released lease has no idle timeout (the facade drops it): end its watchdog.
        crate::idle::stop(&id);
        match keep {
            // Kept running for inspection.
            Some(true) => Ok(()),
            // Kept, stopped; resume starts it again. A paused container is unpaused first,
            // so that the stop's signal reaches it.
            Some(false) if running => {
                self.unpause(&id).await?;
                let options = StopContainerOptionsBuilder::default().t(1).build();
                match self
                    .engine
                    .retry(|| self.engine.docker.stop_container(&id, Some(options.clone())))
                    .await
                {
                    Ok(()) => Ok(()),
                    Err(e) if is_not_found(&e) || has_status(&e, 304) => Ok(()),
                    Err(e) => Err(self.engine.error("stopping a container", e)),
                }
            }
            Some(false) => Ok(()),
            None => {
                self.remove(&id).await?;
                envrt_driver_api::fault::point("release");
                self.remove_lease_dirs(&context.lease.id);
                self.prune_after(context).await;
                Ok(())
            }
        }
    }

    /// A lease is a whole container: any absolute path in it.
    fn path_scope(&self) -> envrt_driver_api::PathScope {
        envrt_driver_api::PathScope::WholeEnvironment
    }

    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        let parsed = input.environment.as_ref().map(EnvConfig::of);
        let config_resolved = matches!(parsed, Some(Ok(_)));
        let duplex = match &parsed {
            Some(Ok(config)) => config.duplex,
            _ => true,
        };
        let declaration = CapabilityDeclaration {
            incremental_session_output: Some(true),
            concurrent_sync_operations: Some(true),
            duplex_command_stream: Some(duplex),
            ..Default::default()
        };
        Ok(classify_driver(
            self,
            crate::processes::with_sessions(support_set(), self, input.lease.as_ref()),
            Some(&declaration),
            input,
            config_resolved,
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
    fn as_recovery(&self) -> Option<&dyn envrt_driver_api::Recovery> {
        Some(self)
    }
    fn as_duplex(&self) -> Option<&dyn DuplexChannels> {
        Some(self)
    }
    fn as_fork(&self) -> Option<&dyn envrt_driver_api::ForkLease> {
        Some(self)
    }
    fn as_templates(&self) -> Option<&dyn envrt_driver_api::Templates> {
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
    fn as_processes(&self) -> Option<&dyn envrt_driver_api::ProcessSessions> {
        self.agent
            .is_ok()
            .then_some(self as &dyn envrt_driver_api::ProcessSessions)
    }

    fn as_expose(&self) -> Option<&dyn envrt_driver_api::ExposePorts> {
        self.agent.is_ok().then_some(self as &dyn envrt_driver_api::ExposePorts)
    }
}

#[async_trait]
impl ResumeLease for DockerDriver {
    async fn resume_lease(&self, context: &LeaseContext) -> Result<Option<LeaseGrant>, DriverError> {
        let Some((id, running)) = self.owned_container(context).await? else {
            return Ok(None);
        };
        if !running {
            match self.engine.call(self.engine.docker.start_container(&id, None)).await {
                Ok(()) => {}
                Err(e) if has_status(&e, 304) => {}
                Err(e) if is_not_found(&e) => return Ok(None),
                Err(e) => return Err(self.engine.error("starting a container", e)),
            }
        }
        // Started again (a new init), or resumed by a driver that never watched it.
        if let Some(at) = context.lease.expires_at.filter(|at| *at > Timestamp::now()) {
            crate::expiry::watch(&self.engine, &id, at).await;
        }
        let name = context
            .lease
            .metadata
            .get("containerName")
            .and_then(|v| v.as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| container_name(&context.lease.id));
        let config = context.environment.as_ref().and_then(|e| EnvConfig::of(e).ok());
        let mut grant = self.grant(&id, &name, config.as_ref(), &Self::workspace_of(context));
        // A bound lease stays bound (its container keeps the mount): templates refuse it.
        if let Some(mount) = context.lease.metadata.get(META_WORKSPACE_MOUNT) {
            grant.metadata.insert(META_WORKSPACE_MOUNT.into(), mount.clone());
        }
        // So does one with a process supervisor (the container keeps its mounts).
        if let Some(agent) = context.lease.metadata.get(crate::processes::META_AGENT) {
            grant
                .metadata
                .insert(crate::processes::META_AGENT.into(), agent.clone());
        }
        Ok(Some(grant))
    }
}

#[async_trait]
impl DestroyLease for DockerDriver {
    async fn destroy_lease(&self, context: &LeaseContext) -> Result<(), DriverError> {
        match self.owned_container(context).await? {
            Some((id, _)) => {
                self.remove(&id).await?;
                envrt_driver_api::fault::point("destroy");
                self.remove_lease_dirs(&context.lease.id);
                self.prune_after(context).await;
                Ok(())
            }
            None => {
                self.remove_lease_dirs(&context.lease.id);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_names_are_safe() {
        assert_eq!(container_name("ab-12_x.y"), "envrt-ab-12_x.y");
        assert_eq!(container_name("a/b c"), "envrt-a-b-c");
    }
}
