//! The container of a new lease: its labels, hardening, mounts (a bound workspace, the
//! process supervisor) and main process (the expiry's `sleep`), made and started; and the
//! host directories a lease has beside it, removed once its container is gone.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use bollard::query_parameters::CreateContainerOptionsBuilder;
use envrt_driver_api::{AcquireInput, DriverError, LeasePolicy, Timestamp};

use crate::config::{EnvConfig, KEPT_CAPABILITIES};
use crate::driver::{
    DockerDriver, LABEL_COMPANY_ID, LABEL_ENVIRONMENT_ID, LABEL_EXPIRES_AT, LABEL_LEASE_ID, LABEL_MANAGED,
    container_name,
};
use crate::engine::is_not_found;

/// The main process of an expiring lease's container: sleeps until the epoch second `$1`
/// by the container's clock (the host's), then exits, which stops the container.
const EXPIRY_SCRIPT: &str = "exec sleep $(( $1 - $(date +%s) ))";

/// The expiry a lease's container really has for a requested one: the whole second at or
/// before it (the container's `sleep` counts whole seconds).
pub(crate) fn bounded_expiry(requested: Timestamp) -> Timestamp {
    Timestamp(requested.0 / 1000 * 1000)
}

impl DockerDriver {
    /// Creates and starts the container of the lease `input` asks for; nothing of a
    /// failed one is left behind.
    pub(crate) async fn create_and_start(
        &self,
        input: &AcquireInput,
        config: &EnvConfig,
    ) -> Result<Started, DriverError> {
        let name = container_name(&input.lease_id);
        let mut labels: HashMap<String, String> = self.config.extra_labels.clone().into_iter().collect();
        labels.insert(LABEL_LEASE_ID.into(), input.lease_id.clone());
        labels.insert(LABEL_ENVIRONMENT_ID.into(), input.environment.id.clone());
        labels.insert(LABEL_COMPANY_ID.into(), input.company_id.clone());
        labels.insert(LABEL_MANAGED.into(), "true".into());
        let expiry = input.requested_expires_at.map(bounded_expiry);
        // An expiring lease's container stops by itself at the expiry (its main process
        // ends, docker-init with it), an idle one when its idle watchdog kills its init;
        // either is removed then, unless the policy keeps containers
        // (reuse_by_environment stops them on release to resume them later).
        let (entrypoint, cmd) = match expiry {
            Some(at) => {
                labels.insert(LABEL_EXPIRES_AT.into(), at.to_rfc3339());
                let script = vec!["sh".into(), "-c".into(), EXPIRY_SCRIPT.into()];
                (script, vec!["envrt-expiry".into(), (at.0 / 1000).to_string()])
            }
            None => (vec!["sleep".into()], vec!["infinity".into()]),
        };
        let auto_remove = input.policy != LeasePolicy::ReuseByEnvironment;
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
        // A lease under a network policy: its egress sockets, resolver and proxy variables
        // (the facade names a policy only where the driver's boundary is proxied).
        let plumbing = match (&input.network, &agent) {
            (None, _) => None,
            (Some(_), Some(prepared)) => {
                match crate::egress::prepare(&prepared.dir, crate::egress_credentials::of(Some(&input.environment))) {
                    Ok(plumbing) => Some(plumbing),
                    Err(error) => {
                        crate::processes::remove_dir(&prepared.dir);
                        crate::bind::remove_made(bind_dir.as_deref());
                        return Err(error);
                    }
                }
            }
            (Some(_), None) => {
                crate::bind::remove_made(bind_dir.as_deref());
                return Err(DriverError::other(
                    "the lease's network policy needs its egress forwarder, but its process supervisor directory could not be made",
                ));
            }
        };
        mounts.extend(plumbing.iter().map(|p| p.mount.clone()));
        let mut env: Vec<String> = config.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        env.extend(plumbing.iter().flat_map(|p| p.env.iter().cloned()));
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
            env: Some(env),
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
                dns: plumbing.as_ref().map(|p| p.dns.clone()),
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
        // Created, not started: `gc` must find it by its labels.
        envrt_driver_api::fault::point("acquire");
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
            // The supervisor runs as the command user, who must own its run directory; a
            // driver that cannot hand it over serves no processes on this lease (and no
            // network: its forwarder needs the directory).
            let handed = match &agent {
                Some(prepared) => match crate::processes::give(prepared, owner) {
                    Ok(()) => true,
                    Err(error) if input.network.is_some() => return Err(error),
                    Err(error) => {
                        tracing::warn!(%error, "the lease gets no process supervisor");
                        false
                    }
                },
                None => false,
            };
            if let Some(policy) = &input.network {
                let credentials = crate::egress_credentials::of(Some(&input.environment));
                self.start_egress(&input.lease_id, &id, policy, credentials).await?;
            }
            Ok((owner, handed))
        }
        .await;
        match ready {
            Ok((owner, agent)) => Ok(Started {
                id,
                name,
                owner,
                bound: bind_dir.is_some(),
                agent,
                egress: plumbing.is_some(),
            }),
            Err(error) => {
                // Nothing of a failed acquire is left behind.
                let _ = self.remove(&id).await;
                crate::egress::stop(&input.lease_id);
                undo_dirs();
                Err(error)
            }
        }
    }
}

/// A started container of a new lease.
pub(crate) struct Started {
    pub(crate) id: String,
    pub(crate) name: String,
    /// The command user's uid and gid.
    pub(crate) owner: (u64, u64),
    /// Whether its workspace is a bind-mounted host directory.
    pub(crate) bound: bool,
    /// Whether it has the process supervisor mounted.
    pub(crate) agent: bool,
    /// Whether it runs under a network policy, through its egress proxy.
    pub(crate) egress: bool,
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
        crate::egress::stop(lease_id);
        crate::processes::remove_lease(lease_id);
    }
}
