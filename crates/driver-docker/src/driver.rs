//! [`DockerDriver`]: connection, the lease life cycle (a container per lease), capabilities,
//! and the accessors of the optional groups (each group's impl lives in its concern's file).

use std::collections::HashMap;

use async_trait::async_trait;
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use bollard::query_parameters::{CreateContainerOptionsBuilder, StopContainerOptionsBuilder};
use envrt_driver_api::capability::{CapabilityKey, SupportSet};
use envrt_driver_api::driver::classify_driver;
use envrt_driver_api::{
    AcquireInput, CapabilityDeclaration, CapabilityInput, CapabilitySnapshot, DestroyLease, DriverError,
    DuplexChannels, EnvironmentDriver, Execute, FileSync, JsonMap, LeaseContext, LeaseGrant, LeasePolicy, LeaseStatus,
    RealizeWorkspace, ReleaseInput, ResumeLease, Timestamp,
};

use crate::config::{DockerConfig, EnvConfig, KEPT_CAPABILITIES, META_WORKSPACE_DIR, lease_workspace};
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

/// The main process of an expiring lease's container: sleeps until the epoch second `$1`
/// by the container's clock (the host's), then exits, which stops the container.
const EXPIRY_SCRIPT: &str = "exec sleep $(( $1 - $(date +%s) ))";

/// The expiry a lease's container really has for a requested one: the whole second at or
/// before it (the container's `sleep` counts whole seconds).
fn bounded_expiry(requested: Timestamp) -> Timestamp {
    Timestamp(requested.0 / 1000 * 1000)
}

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
}

impl DockerDriver {
    /// Connects to the engine (see [`DockerConfig::host`]); fails within
    /// `connect_timeout` with [`DriverError::Unavailable`] naming the address when no
    /// engine answers.
    pub async fn connect(config: DockerConfig) -> Result<DockerDriver, DriverError> {
        let engine = Engine::connect(&config).await?;
        let agent = crate::processes::resolve(config.agent.as_deref(), &engine.address);
        Ok(DockerDriver {
            engine,
            config,
            owners: OwnerCache::default(),
            agent,
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
    async fn owned_container(&self, context: &LeaseContext) -> Result<Option<(String, bool)>, DriverError> {
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

    async fn create_and_start(&self, input: &AcquireInput, config: &EnvConfig) -> Result<Started, DriverError> {
        let name = container_name(&input.lease_id);
        let mut labels: HashMap<String, String> = self.config.extra_labels.clone().into_iter().collect();
        labels.insert(LABEL_LEASE_ID.into(), input.lease_id.clone());
        labels.insert(LABEL_ENVIRONMENT_ID.into(), input.environment.id.clone());
        labels.insert(LABEL_COMPANY_ID.into(), input.company_id.clone());
        labels.insert(LABEL_MANAGED.into(), "true".into());
        let expiry = input.requested_expires_at.map(bounded_expiry);
        // An expiring lease's container stops by itself at the expiry (its main process
        // ends, docker-init with it) and is removed then, unless the policy keeps
        // containers (reuse_by_environment stops them on release to resume them later).
        let (entrypoint, cmd) = match expiry {
            Some(at) => {
                labels.insert(LABEL_EXPIRES_AT.into(), at.to_rfc3339());
                let script = vec!["sh".into(), "-c".into(), EXPIRY_SCRIPT.into()];
                (script, vec!["envrt-expiry".into(), (at.0 / 1000).to_string()])
            }
            None => (vec!["sleep".into()], vec!["infinity".into()]),
        };
        let auto_remove = expiry.is_some() && input.policy != LeasePolicy::ReuseByEnvironment;
        let image = match &input.template {
            Some(template) => crate::templates::template_image(&template.id),
            None => config.image.clone(),
        };
        // The opt-in bind: the lease's host directory, made before the container.
        // A lease started from a template keeps the image's workspace (a bind would hide it).
        let bind_dir = match input.template {
            Some(_) => None,
            None => crate::bind::lease_dir(&self.config, &name),
        };
        if let Some(dir) = &bind_dir {
            crate::bind::create(dir, crate::bind::WORKSPACE_ROOT)?;
        }
        // The process supervisor and the lease's run directory, where the driver has one;
        // a lease whose directory cannot be made is served without (and grants no processes).
        let agent = self.agent.as_ref().ok().and_then(|binary| {
            crate::processes::prepare(binary, &name)
                .inspect_err(|error| tracing::warn!(%error, "the lease gets no process supervisor"))
                .ok()
        });
        let mut mounts: Vec<Mount> = bind_dir
            .iter()
            .map(|dir| Mount {
                target: Some(config.working_dir.clone()),
                source: Some(dir.display().to_string()),
                typ: Some(MountType::BIND),
                ..Default::default()
            })
            .collect();
        mounts.extend(agent.iter().flat_map(|prepared| prepared.mounts.iter().cloned()));
        // Nothing of a failed acquire is left on the host.
        let undo_dirs = || {
            crate::bind::remove_made(bind_dir.as_deref());
            if let Some(prepared) = &agent {
                crate::processes::remove_dir(&prepared.dir);
            }
        };
        let mut volumes = config
            .read_only_root_fs
            .then(|| vec![config.working_dir.clone(), "/tmp".to_owned()]);
        if let (Some(list), Some(_)) = (&mut volumes, &bind_dir) {
            list.retain(|v| *v != config.working_dir);
        }
        let body = ContainerCreateBody {
            image: Some(image.clone()),
            entrypoint: Some(entrypoint),
            cmd: Some(cmd),
            user: config.user.clone(),
            working_dir: Some(config.working_dir.clone()),
            env: Some(config.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            labels: Some(labels),
            // With a read-only root, the workspace and /tmp are anonymous volumes (removed
            // with the container), which the archive API writes into like the root.
            volumes,
            host_config: Some(HostConfig {
                // docker-init as PID 1 reaps every orphan of every exec.
                init: Some(true),
                auto_remove: Some(auto_remove),
                network_mode: Some(config.network.clone()),
                memory: Some(config.memory_bytes),
                memory_swap: Some(config.memory_bytes),
                nano_cpus: config.nano_cpus,
                pids_limit: Some(config.pids_limit),
                cap_drop: Some(vec!["ALL".to_owned()]),
                cap_add: Some(KEPT_CAPABILITIES.iter().map(|c| (*c).to_owned()).collect()),
                security_opt: Some(vec!["no-new-privileges".to_owned()]),
                readonly_rootfs: Some(config.read_only_root_fs),
                mounts: (!mounts.is_empty()).then_some(mounts),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default().name(&name).build();
        // The image's id and user are asked beside the create (the owner's cache key).
        let (created, image_info) = tokio::join!(
            self.engine
                .call(self.engine.docker.create_container(Some(options), body)),
            self.engine.call(self.engine.docker.inspect_image(&image)),
        );
        let created = match created {
            Ok(created) => created,
            Err(e) if is_not_found(&e) => {
                undo_dirs();
                return Err(DriverError::invalid(format!(
                    "Docker image \"{}\" is not present on the engine at {} (the driver never pulls images).",
                    image, self.engine.address
                )));
            }
            Err(e) => {
                undo_dirs();
                return Err(self.engine.error("creating a container", e));
            }
        };
        let image_info = image_info.ok();
        let id = created.id;
        let ready = async {
            // The engine makes the workspace, the container's working directory, when it
            // creates the container (owned by root, mode 0755, like `mkdir -p` as root).
            self.engine
                .call(self.engine.docker.start_container(&id, None))
                .await
                .map_err(|e| self.engine.error("starting a container", e))?;
            if let Some(at) = expiry {
                crate::expiry::watch(&self.engine, &id, at).await;
            }
            let owner = self.container_owner(&id, config, image_info.as_ref()).await?;
            // The workspace belongs to the configured user. With no-new-privileges, root
            // in an exec of a container whose user is not root has no capabilities, so
            // the ownership comes from the engine instead: a one-entry archive whose
            // header names the user's ids.
            if let Some(dir) = &bind_dir {
                crate::bind::give(dir, owner)?;
            } else if config.user.is_some() {
                self.give_workspace(&id, &config.working_dir, config.read_only_root_fs, owner)
                    .await?;
            }
            Ok(owner)
        }
        .await;
        match ready {
            Ok(owner) => {
                // The supervisor runs as the command user, who must own its run directory;
                // a driver that cannot hand it over serves no processes on this lease.
                let agent = agent.is_some_and(|prepared| match crate::processes::give(&prepared, owner) {
                    Ok(()) => true,
                    Err(error) => {
                        tracing::warn!(%error, "the lease gets no process supervisor");
                        false
                    }
                });
                Ok(Started {
                    id,
                    name,
                    owner,
                    bound: bind_dir.is_some(),
                    agent,
                })
            }
            Err(error) => {
                // Nothing of a failed acquire is left behind.
                let _ = self.remove(&id).await;
                undo_dirs();
                Err(error)
            }
        }
    }
}

/// A started container of a new lease.
struct Started {
    id: String,
    name: String,
    /// The command user's uid and gid.
    owner: (u64, u64),
    /// Whether its workspace is a bind-mounted host directory.
    bound: bool,
    /// Whether it has the process supervisor mounted.
    agent: bool,
}

impl DockerDriver {
    /// Removes the host directories of `lease_id` (its bind-mounted workspace, when the
    /// driver binds workspaces, and its process supervisor's), after its container is
    /// gone; a failure is only logged.
    pub(crate) fn remove_lease_dirs(&self, lease_id: &str) {
        if let Some(dir) = crate::bind::lease_dir(&self.config, &container_name(lease_id))
            && let Err(error) = crate::bind::remove(&dir)
        {
            tracing::warn!(%error, "removing a lease's workspace directory failed");
        }
        crate::processes::remove_lease(lease_id);
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

    fn network_boundary(
        &self,
        environment: &envrt_driver_api::Environment,
    ) -> envrt_driver_api::network::NetworkBoundary {
        crate::network::boundary(environment)
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
        match keep {
            // Kept running for inspection.
            Some(true) => Ok(()),
            // Kept, stopped; resume starts it again.
            Some(false) if running => {
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
    fn as_templates(&self) -> Option<&dyn envrt_driver_api::Templates> {
        Some(self)
    }
    fn as_processes(&self) -> Option<&dyn envrt_driver_api::ProcessSessions> {
        self.agent
            .is_ok()
            .then_some(self as &dyn envrt_driver_api::ProcessSessions)
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
