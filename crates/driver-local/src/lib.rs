//! # envrt-driver-local
//!
//! The embedded default driver: commands run as real processes on this host, each lease
//! owns a private workspace directory, and files move in and out natively.
//!
//! ```
//! use std::sync::Arc;
//! use envrt_driver_local::{LocalConfig, LocalDriver};
//! use envrt_runtime_core::{AcquireRequest, Environment, EnvironmentRuntime, ExecuteRequest, LeaseStatus};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! # let root = std::env::temp_dir().join(format!("envrt-local-doc-{}", std::process::id()));
//! let driver = LocalDriver::new(LocalConfig { root: Some(root.clone()), ..Default::default() })?;
//! let runtime = EnvironmentRuntime::new();
//! runtime.register_driver(Arc::new(driver));
//! runtime.put_environment(Environment::new("env-1", "This host", "local")).await?;
//! let lease = runtime.acquire_lease(AcquireRequest::new("env-1", "acme")).await?;
//! let out = runtime.execute(&lease.id, ExecuteRequest::new("echo", ["hello"])).await?;
//! assert_eq!(out.stdout, b"hello\n");
//! runtime.release_lease(&lease.id, LeaseStatus::Released).await?; // workspace removed
//! # std::fs::remove_dir(&root).unwrap();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! ## Capabilities
//! Static support set: `reusableLeases` (only under `reuse_by_environment`, by the
//! classifier's narrowing), `nativeSyncIn`, `nativeSyncOut`, `independentControlCommands`,
//! and the opt-in keys it declares, `incrementalSessionOutput` (the sink streams) and
//! `concurrentSyncOperations` (sync in and out touch independent paths). Commands are
//! one-shot, so no `persistentProcessSessions`; no duplex channels (the facade refuses
//! with `Environment driver "local" does not support duplex channels.`); no runner ingress.
//!
//! ## Leases
//! [`acquire_lease`](EnvironmentDriver::acquire_lease) creates `{root}/lease-{lease id}`
//! with mode `0700` (`root` from [`LocalConfig::root`], default
//! `{temp dir}/envrt-local-{uid}`). The provider lease id is the directory name; lease metadata
//! carries `workspace` (the host path). On release:
//!
//! | policy | workspace |
//! |---|---|
//! | `ephemeral`, `reuse_by_execution_workspace` | removed |
//! | `reuse_by_environment` | kept; resume returns it (`None` once it has vanished) |
//! | `retain_on_failure` | kept when the lease ends `retained`, removed otherwise |
//!
//! Destroy removes it whatever the policy. Release and destroy first kill every command
//! the lease still runs; both are idempotent.
//!
//! ## Expiry
//! A requested expiry is attested as is (`expires_at` = the requested time). At acquire
//! the driver starts a detached watchdog (`/bin/sh` in a process group of its own, outside
//! the lease's cgroup, pid recorded in `{root}/.watchdog-lease-{id}`) that sleeps until
//! the expiry, then kills everything the lease runs (its cgroup, or without cgroups every
//! process whose working directory lies in the workspace or whose `HOME` is it) and removes
//! the workspace unless the policy is `reuse_by_environment`. It needs nothing from the
//! program that took the lease, so a holder that died still has its lease ended on time;
//! the store learns of it through `release_expired` (`envrt gc`). Release and destroy
//! before the expiry kill the watchdog, so none outlives its lease.
//!
//! ## Recovery
//! The driver has the recovery group ([`Recovery`]): its inventory is every lease
//! workspace under the root (kind [`KIND_WORKSPACE`], with what runs tied to it and its
//! watchdog) and every expiry watchdog whose workspace is gone ([`KIND_WATCHDOG`]),
//! whichever process made them; reaping kills what is tied to the workspace, ends the
//! watchdog and removes the directory. `kill_leftovers` kills what a dead holder's lease
//! still runs ([`kill_tied_to`]). `EnvironmentRuntime::reconcile` (`envrt gc`) reaps what
//! no lease of the store keeps, so a root belongs to one lease store.
//!
//! ## Execute
//! Every command runs in its own process group with no shell (unless you run one). Its
//! working directory is the workspace, or `cwd` resolved inside it (relative to it, or
//! absolute under it; `..` and symlinks leading out are refused with
//! [`DriverError::PathOutsideWorkspace`]). A timeout sends `SIGTERM` to the whole group,
//! then `SIGKILL` after [`LocalConfig::kill_grace`]; the partial output is kept and
//! `timed_out` is set. When the command itself exits, whatever it left in its group (a
//! background grandchild still holding stdout, say) is killed and the call returns. Each
//! stream is capped (`max_output_bytes`); the sink still sees every chunk. A program that
//! does not exist exits `127` with `envrt: command not found: NAME` on stderr (one that
//! cannot be executed, `126` with `envrt: permission denied: NAME`). Dropping the execute
//! future kills the group; so do release and destroy for every command of the lease.
//!
//! **Environment.** The host's variables are not inherited. A command sees only:
//! - the host's values of the allow-list [`LocalConfig::env_allowlist`] (default `PATH`,
//!   `LANG`, `LC_ALL`, `LC_CTYPE`, `TZ`) when they are set;
//! - `PATH` = `/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin` when the host
//!   has none;
//! - `HOME` = the lease workspace;
//! - then the request's own variables, which override all of the above.
//!
//! **Users.** A request's `user` (`NAME`, `UID`, `NAME:GROUP`, `UID:GID`) is honoured only
//! when envrt runs as root and the environment's config lists that exact text in
//! `allowedUsers` (`[environment.config] allowedUsers = ["nobody"]`); otherwise the
//! command does not run and the error is `Cannot run as user "U": REASON` with one of the
//! reasons of [`DriverError::UserRefused`]'s local texts (see `docs/contract.md`). The
//! child drops to that uid and gid (supplementary groups cleared) before `exec`, enters
//! its working directory as that user (the driver's root becomes `0711` the first time, so
//! a user can pass through it to a workspace opened up for it, without listing the
//! others; each workspace stays `0700` until a command of its lease opens it), and is contained by its process group rather than
//! a cgroup. Paths stay confined to the workspace: the local driver's
//! [`path_scope`](EnvironmentDriver::path_scope) is `workspace` unless
//! [`LocalConfig::path_scope`] opts in to the whole host (`whole-environment`: any
//! absolute `cwd` or sync path of the host is accepted; relative ones still start at the
//! workspace, and `..` is still refused).
//!
//! ## Sync
//! `sync_in` and `sync_out` follow the contract's section 6. Host-side paths must be
//! absolute; environment-side paths are confined to the workspace like `cwd` above (a
//! target may not be the workspace itself, and targets of one operation may not overlap).
//! Every check runs before anything is written (post-upload cwds included). Each entry is
//! staged beside its target (files `0600`, directories `0700` until complete, then their
//! final mode) and the operation's entries are renamed into place together only once all
//! are staged, so a failed operation leaves neither target nor temporary files; an
//! existing target, file or directory, is replaced whole by an atomic exchange.
//!
//! - The top-level source is always resolved; inside a directory, `followSymlinks: false`
//!   (the default) copies links as links, and a copied link that would resolve outside the
//!   target (`..`, an absolute path elsewhere, or through other copied links) is refused
//!   with [`DriverError::EntryEscapesTarget`]. With `followSymlinks: true`, a followed link
//!   of the workspace must stay inside it, and a link loop is refused.
//! - `mode` is the final mode of the file or top directory; everything else keeps the
//!   source's permission bits (special bits included: commands already run as the
//!   driver's user, so this grants nothing new). `access` and `writablePath` concern
//!   providers that mount; a copy ignores them.
//! - `exclude` globs follow [`ExcludeSet`](envrt_runtime_core::sync::ExcludeSet).
//! - Post-upload commands (`sync_in` only) run with `sh -c` after the files land, in order,
//!   stopping at the first failure; the default cwd is the first target (its parent for a
//!   file).
//! - Counts are regular files and their bytes. FIFOs, sockets and devices are skipped.
//! - `realize_workspace` ignores `local_path`; `remote_path` is created inside the
//!   workspace.
//!
//! ## Templates
//! [`capture_template`](envrt_runtime_core::Templates::capture_template) copies the lease's
//! workspace to `{root}/.templates/{id}/tree` (with `template.json` beside it; kind
//! `snapshot`): each file is cloned with `FICLONE` where the file system shares blocks
//! (btrfs, XFS with reflink), copied otherwise; links stay links; permission bits are kept;
//! FIFOs, sockets and devices are skipped. The copy is staged in a hidden sibling and
//! renamed into place, so a failed capture lists nothing. A lease acquired from the
//! template starts with a copy of that tree as its workspace; deleting the template
//! removes the directory and leaves such leases as they are. The metadata reports
//! `filesCloned`, `filesCopied`, `bytes` and `captureMillis`.
//!
//! ## Containment
//! Where a cgroup v2 hierarchy is mounted and writable (as root, or with a delegated
//! subtree), every command starts inside a cgroup of its own under
//! `{cgroup2 mount}/envrt-local/lease-{id}/`, so whatever it forks (a `setsid` daemon
//! included) is killed when the command exits or times out, and on release, destroy and
//! `envrt gc`. Otherwise the driver falls back to the process-group kill plus, on release
//! and destroy, a `/proc` scan for processes whose `HOME` is the workspace or whose working
//! directory lies in it; a descendant that leaves the group, the workspace and its `HOME`
//! then survives. [`LocalDriver::containment`] says which applies ([`LocalConfig::cgroups`]
//! turns cgroups off).
//!
//! ## Limits
//! Commands run as the driver's own user with no isolation beyond the working directory:
//! a command can read and write anything that user can, and every variable of a request
//! (`LD_PRELOAD` included) reaches it and whatever it starts. See `docs/security.md`.
//! Path confinement is checked on the real file system before each operation; a command
//! racing the driver to swap a directory for a symlink during a sync is not defended
//! against. Synced trees deeper than
//! [`MAX_TREE_DEPTH`](envrt_runtime_core::tree::MAX_TREE_DEPTH) levels are refused.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use envrt_runtime_core::capability::{CapabilityDeclaration, CapabilityKey, SupportSet};
use envrt_runtime_core::driver::classify_driver;
use envrt_runtime_core::{
    AcquireInput, CapabilityInput, CapabilitySnapshot, DestroyLease, DriverError, EnvironmentDriver, Execute,
    ExecuteRequest, ExecuteResult, FileSync, LeaseContext, LeaseGrant, LeasePolicy, LeaseStatus, PathScope,
    RealizeWorkspace, Recovery, ReleaseInput, ResumeLease, SyncOperation, SyncResult, Templates, Timestamp,
};

mod bulk;
mod containment;
mod copy;
mod descriptor;
mod exec;
mod expiry;
mod fds;
mod groups;
mod program;
mod recovery;
mod sync;
mod templates;
mod user;
mod workspace;

use exec::ExecSite;
use groups::ProcessTable;
use workspace::{create_private_dir, lease_dir_name, path_str, remove_tree};

/// `{temp dir}/envrt-local-{effective uid}`: one root per user, so that no user can
/// prepare another's.
fn default_root() -> PathBuf {
    std::env::temp_dir().join(format!("envrt-local-{}", nix::unistd::geteuid().as_raw()))
}

/// How a local driver with [`LocalConfig::cgroups`] = `cgroups` would contain its
/// commands on this machine: `cgroup v2 under PATH`, or `process groups and a /proc scan
/// on release` (for `envrt caps` / `envrt doctor`).
pub fn describe_containment(cgroups: bool) -> String {
    containment::Containment::detect(cgroups).describe()
}

pub use containment::kill_tied_to;
pub use descriptor::{DESCRIPTOR, LocalDescriptor};
pub use recovery::{KIND_WATCHDOG, KIND_WORKSPACE};

/// The registry key of this driver.
pub const DRIVER_KEY: &str = "local";

/// Configuration of a [`LocalDriver`].
#[derive(Clone, Debug)]
pub struct LocalConfig {
    /// Where lease workspaces live; `{temp dir}/envrt-local-{uid}` when `None`. Created
    /// (mode `0700`) if missing; must be owned by the driver's effective user.
    pub root: Option<PathBuf>,
    /// Time between `SIGTERM` and `SIGKILL` when a command times out; default 2 s.
    pub kill_grace: Duration,
    /// Host environment variables passed through to commands when set; default `PATH`,
    /// `LANG`, `LC_ALL`, `LC_CTYPE`, `TZ`.
    pub env_allowlist: Vec<String>,
    /// Contain each lease's processes in cgroups of their own where cgroup v2 is mounted
    /// and writable; default true. When false, or unavailable, the driver falls back to
    /// process groups plus a `/proc` scan on release (see [`LocalDriver::containment`]).
    pub cgroups: bool,
    /// Which paths a request may name: [`PathScope::Workspace`] (the default) confines
    /// `cwd` and sync paths to the lease workspace; [`PathScope::WholeEnvironment`] (the
    /// opt-in `paths = "host"` of `envrt.toml`) accepts any absolute path of the host,
    /// which widens the boundary to the whole host (see `docs/security.md`). Relative
    /// paths start at the workspace either way. [`PathScope::CwdAnywhere`] accepts any
    /// absolute `cwd` and confines sync paths.
    pub path_scope: PathScope,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            root: None,
            kill_grace: Duration::from_secs(2),
            env_allowlist: ["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ"]
                .into_iter()
                .map(String::from)
                .collect(),
            cgroups: true,
            path_scope: PathScope::Workspace,
        }
    }
}

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
    fn live_workspace(&self, context: &LeaseContext) -> Result<PathBuf, DriverError> {
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
        let mut metadata = envrt_runtime_core::JsonMap::new();
        metadata.insert("driver".into(), DRIVER_KEY.into());
        metadata.insert(
            envrt_runtime_core::model::WORKSPACE_METADATA_KEY.into(),
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
    async fn remove_workspace(&self, lease_id: &str) -> Result<(), DriverError> {
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

    /// Ends the lease's expiry watchdog, if any (release and destroy before expiry).
    fn stop_watchdog(&self, lease_id: &str) -> Result<(), DriverError> {
        let name = lease_dir_name(lease_id)?;
        expiry::stop(&expiry::pid_file(&self.root, &name), &self.root.join(&name));
        Ok(())
    }

    /// Kills everything the lease still runs: its process groups, then its cgroups (or,
    /// without them, every process tied to its workspace).
    async fn stop_everything(&self, lease_id: &str) -> Result<(), DriverError> {
        let dir = self.workspace_of(lease_id)?;
        self.processes.close(lease_id).await;
        self.containment.kill_lease(lease_id, &dir).await;
        Ok(())
    }
}

#[async_trait]
impl EnvironmentDriver for LocalDriver {
    fn key(&self) -> &str {
        DRIVER_KEY
    }

    /// Commands run on this host, on its network: no policy can be enforced.
    fn network_boundary(&self, _: &envrt_runtime_core::Environment) -> envrt_runtime_core::network::NetworkBoundary {
        envrt_runtime_core::network::NetworkBoundary::HostShared
    }

    async fn check_environment_config(&self, config: &envrt_runtime_core::JsonMap) -> Result<(), DriverError> {
        user::check_config(config)
    }

    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        user::check_config(&input.environment.config)?;
        let dir = self.workspace_of(&input.lease_id)?;
        self.processes.reopen(&input.lease_id);
        create_private_dir(&dir)
            .map_err(|e| DriverError::io(format!("cannot create workspace {}", dir.display()), e))?;
        if let Some(template) = &input.template
            && let Err(e) = self.seed_workspace(template, &dir)
        {
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
        match (granted, watched) {
            (Ok(grant), Ok(())) => Ok(grant),
            (Err(e), _) | (_, Err(e)) => {
                let _ = remove_tree(&dir);
                Err(e)
            }
        }
    }

    async fn release_lease(&self, input: &ReleaseInput) -> Result<(), DriverError> {
        let lease = &input.context.lease;
        lease_dir_name(&lease.id)?;
        self.stop_everything(&lease.id).await?;
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
            Self::support_set(),
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
    fn as_recovery(&self) -> Option<&dyn Recovery> {
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

#[async_trait]
impl Execute for LocalDriver {
    async fn execute(&self, context: &LeaseContext, request: ExecuteRequest) -> Result<ExecuteResult, DriverError> {
        let identity = match request.user.as_deref() {
            Some(user) => Some(user::resolve(context, user)?),
            None => None,
        };
        if identity.is_some() {
            user::open_root(&self.root)?;
        }
        let workspace = self.live_workspace(context)?;
        let cwd = match &request.cwd {
            None => workspace.clone(),
            Some(cwd) => self.resolve_cwd(&workspace, cwd)?,
        };
        if !cwd.is_dir() {
            return Err(DriverError::missing_cwd(request.cwd.as_deref().unwrap_or_default()));
        }
        if let (Some(user), Some(identity)) = (request.user.as_deref(), identity) {
            user::check_reachable(user, &cwd, identity)?;
        }
        let site = ExecSite {
            workspace: &workspace,
            cwd: &cwd,
            lease_key: &context.lease.id,
            table: &self.processes,
            kill_grace: self.config.kill_grace,
            env_allowlist: &self.config.env_allowlist,
            containment: &self.containment,
            identity,
        };
        exec::run(&site, request).await
    }
}

#[async_trait]
impl FileSync for LocalDriver {
    async fn sync_in(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        let workspace = self.live_workspace(context)?;
        sync::sync_in(self, context, &workspace, operations).await
    }

    async fn sync_out(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        let workspace = self.live_workspace(context)?;
        sync::sync_out(self, &workspace, operations).await
    }
}
