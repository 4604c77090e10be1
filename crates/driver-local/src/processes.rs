//! Persistent process sessions on the local driver: one supervisor (`envrt-agent`) per
//! lease, started on the lease's first `spawn` (see [`agent`]), holds the lease's
//! processes, their replay buffers and exit statuses; every verb is one request to it
//! over its unix socket. A process lives until it exits or the lease ends: release,
//! destroy, expiry and `gc` kill the lease's containment (the agent and everything it
//! started, `setsid` escapees included) and remove the agent's directory.
//!
//! Everything the agent says is untrusted: the client bounds frames and checks every
//! chunk's offset; this module maps its refusals onto the contract's typed ones and
//! rebuilds each process's id from the lease it asked.

use std::path::Path;

use async_trait::async_trait;
use envrt_agent::proto;
use envrt_driver_agent::{AgentHost, Client, lift, request_of};
use envrt_driver_api::capability::{CapabilityKey, SupportSet};
use envrt_driver_api::process::SpawnRequest;
use envrt_driver_api::{DriverError, LeaseContext};

use crate::LocalDriver;

pub(crate) mod agent;

/// `set` with `persistentProcessSessions` when the supervisor's binary is found: the
/// capability is granted only where a spawn can work.
pub(crate) fn with_sessions(mut set: SupportSet) -> SupportSet {
    if envrt_driver_agent::locate().is_ok() {
        set.insert(CapabilityKey::PersistentProcessSessions);
    }
    set
}

envrt_driver_agent::process_sessions!(LocalDriver);

#[async_trait]
impl AgentHost for LocalDriver {
    async fn agent(&self, context: &LeaseContext, start: bool) -> Result<Option<Client>, DriverError> {
        let lease = context.lease.id.as_str();
        let socket = agent::socket(self.root(), lease)?;
        if !start {
            // No supervisor yet: the lease has spawned nothing.
            if !socket.exists() {
                return Ok(None);
            }
            return Client::connect(&socket)
                .await
                .map(Some)
                .map_err(|e| lift(lease, Some(0), e));
        }
        if let Ok(client) = Client::connect(&socket).await {
            return Ok(Some(client));
        }
        let workspace = self.workspace_of(lease)?;
        if !workspace.is_dir() {
            return Err(DriverError::ResourceGone {
                id: crate::workspace::lease_dir_name(lease)?,
            });
        }
        let _lock = lock(self.root(), lease).await?;
        if let Ok(client) = Client::connect(&socket).await {
            return Ok(Some(client));
        }
        agent::start(&agent::Start {
            root: self.root(),
            lease,
            workspace: &workspace,
            env: self.agent_env(&workspace),
            containment: self.containment_mode(),
        })
        .await?;
        Client::connect(&socket)
            .await
            .map(Some)
            .map_err(|e| lift(lease, Some(0), e))
    }

    async fn spawn_request(
        &self,
        context: &LeaseContext,
        request: SpawnRequest,
    ) -> Result<proto::SpawnRequest, DriverError> {
        // As an execute's: only as root, only a user `allowedUsers` lists, resolved on
        // this host; the supervisor (root, in the lease's cgroup) starts it as that uid
        // and gid, so it stays in the cgroup.
        let identity = match request.user.as_deref() {
            Some(user) => Some(crate::process::user::resolve(context, user)?),
            None => None,
        };
        if identity.is_some() {
            crate::process::user::open_root(self.root())?;
        }
        // A workspace deleted behind envrt's back is a lost lease, not a bad cwd.
        let workspace = self.live_workspace(context)?;
        let cwd = match &request.cwd {
            None => workspace.clone(),
            Some(cwd) => self.resolve_cwd(&workspace, cwd)?,
        };
        if !cwd.is_dir() {
            return Err(DriverError::missing_cwd(request.cwd.as_deref().unwrap_or_default()));
        }
        if let (Some(user), Some(identity)) = (request.user.as_deref(), identity) {
            crate::process::user::check_reachable(user, &cwd, identity)?;
        }
        let cwd = crate::workspace::path_str(&cwd)?.to_owned();
        // The agent's own environment (a command's) is inherited under the request's.
        let mut spawn = request_of(request, Some(cwd), Vec::new(), false);
        spawn.user = identity.map(|(uid, gid)| format!("{uid}:{gid}"));
        Ok(spawn)
    }

    fn user_site(&self) -> (&'static str, &'static str) {
        ("host", "on this host")
    }
}

impl LocalDriver {
    /// The agent's environment, which every process inherits under its own variables.
    fn agent_env(&self, workspace: &Path) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = self
            .config()
            .env_allowlist
            .iter()
            .filter_map(|name| std::env::var(name).ok().map(|value| (name.clone(), value)))
            .collect();
        if !env.iter().any(|(name, _)| name == "PATH") {
            env.push(("PATH".into(), crate::execute::DEFAULT_PATH.into()));
        }
        env.push(("HOME".into(), workspace.to_string_lossy().into_owned()));
        env
    }
}

/// The lease's start lock (`flock` on a file in the agent's directory), so that two
/// programs spawning at once start one agent.
async fn lock(root: &Path, lease: &str) -> Result<std::fs::File, DriverError> {
    let dir = agent::dir(root, lease)?;
    match crate::workspace::create_private_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(DriverError::io(format!("cannot create {}", dir.display()), e)),
    }
    envrt_driver_agent::start_lock(dir.join("start.lock")).await
}
