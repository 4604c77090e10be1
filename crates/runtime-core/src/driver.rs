//! The driver trait of the contract's section 2: four required operations, and optional
//! groups reached through accessors that return `Option`, so a driver that lacks a group
//! cannot be called for it by accident and its absence is visible at run time.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::capability::{CapabilitySnapshot, VerbSet, verbs};
use crate::error::DriverError;
use crate::execute::{ExecuteRequest, ExecuteResult};
use crate::model::{Environment, JsonMap, Lease, LeasePolicy, LeaseStatus, Timestamp};
use crate::sync::{SyncOperation, SyncResult};
use crate::template::{TemplateRef, Templates};

/// Everything a driver needs to acquire a lease.
#[derive(Clone, Debug)]
pub struct AcquireInput {
    /// The id the runtime minted for the new lease.
    pub lease_id: String,
    /// The (active) environment.
    pub environment: Environment,
    /// Tenant scope.
    pub company_id: String,
    /// Run scope; `None` for an ad-hoc probe.
    pub run_id: Option<String>,
    /// Issue scope.
    pub issue_id: Option<String>,
    /// Execution-workspace scope.
    pub execution_workspace_id: Option<String>,
    /// Clean-up policy.
    pub policy: LeasePolicy,
    /// A working directory the caller would like, if the driver can honour it.
    pub requested_cwd: Option<String>,
    /// Caller metadata, merged into the lease metadata.
    pub metadata: JsonMap,
    /// The latest time the lease may live until (Paperclip's `requestedExpiresAt`). A
    /// driver that can bound its resource MUST end it at or before this time, even when
    /// the program that acquired it is gone, and MUST return the real expiry in
    /// [`LeaseGrant::expires_at`]; a driver that cannot MUST return none, and the facade
    /// then releases the lease and refuses the acquire.
    pub requested_expires_at: Option<Timestamp>,
    /// The template the lease starts from (one of the driver's own
    /// [`list_templates`](crate::Templates::list_templates) for this environment, looked up
    /// by the facade). A driver MUST seed the new lease with it or fail the acquire; it
    /// is only ever set for a driver with the [`Templates`] group.
    pub template: Option<TemplateRef>,
}

/// What a driver returns from acquire or resume.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LeaseGrant {
    /// The provider key (`local`, `docker`, ...).
    pub provider: Option<String>,
    /// The provider's handle.
    pub provider_lease_id: Option<String>,
    /// Metadata to store on the lease (merged over the caller's; `driver` is set by the
    /// runtime when absent).
    pub metadata: JsonMap,
    /// Expiry the provider attests.
    pub expires_at: Option<Timestamp>,
}

/// The lease (and its environment) an operation acts on.
#[derive(Clone, Debug)]
pub struct LeaseContext {
    /// The lease record.
    pub lease: Lease,
    /// Its environment, when it still exists.
    pub environment: Option<Environment>,
}

/// What a driver needs to release a lease.
#[derive(Clone, Debug)]
pub struct ReleaseInput {
    /// The lease and its environment.
    pub context: LeaseContext,
    /// The status the lease will end with (`retained` under `retain_on_failure` after a
    /// failure: keep the resource).
    pub status: LeaseStatus,
}

/// Input to capability resolution: an environment before any lease, or a lease.
#[derive(Clone, Debug, Default)]
pub struct CapabilityInput {
    /// The environment.
    pub environment: Option<Environment>,
    /// The lease, when resolving for one.
    pub lease: Option<Lease>,
}

/// A workspace to realize on a lease.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceRequest {
    /// Host-side path of the workspace, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_path: Option<String>,
    /// Environment-side path wanted, confined to the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_path: Option<String>,
    /// Provider-specific mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonMap>,
}

/// A realized workspace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RealizedWorkspace {
    /// The environment-side working directory.
    pub cwd: String,
    /// Provider facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonMap>,
}

/// Which environment-side paths (`cwd`, sync targets and sources) a driver accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathScope {
    /// Only paths inside the lease workspace: the lease shares its machine with others
    /// (the host itself, for `local`), so the workspace is the boundary. Anything else is
    /// refused with `Path "{path}" is outside the lease workspace.`
    #[default]
    Workspace,
    /// Any absolute path of the environment: the lease is a whole isolated environment
    /// (a container, a sandbox), which is itself the boundary. Relative paths still start
    /// at the workspace, and a `..` component, an empty path or a NUL byte are still
    /// refused with the text above.
    WholeEnvironment,
    /// Commands may start in any directory of the environment (`cwd` as under
    /// [`PathScope::WholeEnvironment`]), while file transfer stays within the workspace (as
    /// under [`PathScope::Workspace`]): a driver that can enter any directory of its
    /// isolated environment but moves files only through the workspace it owns on the host.
    CwdAnywhere,
}

impl PathScope {
    /// `workspace` or `whole-environment`.
    pub fn as_str(self) -> &'static str {
        match self {
            PathScope::Workspace => "workspace",
            PathScope::WholeEnvironment => "whole-environment",
            PathScope::CwdAnywhere => "cwd-anywhere",
        }
    }

    /// Whether a command's `cwd` may be any absolute directory of the environment.
    pub fn any_cwd(self) -> bool {
        self != PathScope::Workspace
    }

    /// Whether sync sources and targets may be any absolute path of the environment.
    pub fn any_file_path(self) -> bool {
        self == PathScope::WholeEnvironment
    }

    /// Resolves a command's `cwd` under this scope ([`PathScope::resolve`] with the cwd
    /// rule).
    pub fn resolve_cwd(self, workspace_root: &str, cwd: &str) -> Result<String, DriverError> {
        if self.any_cwd() {
            PathScope::WholeEnvironment.resolve(workspace_root, cwd)
        } else {
            PathScope::Workspace.resolve(workspace_root, cwd)
        }
    }

    /// Resolves an environment-side file `path` (a sync source or target) against
    /// `workspace_root` under this scope; the normalized absolute path, or
    /// [`DriverError::PathOutsideWorkspace`].
    pub fn resolve(self, workspace_root: &str, path: &str) -> Result<String, DriverError> {
        match self {
            PathScope::Workspace | PathScope::CwdAnywhere => crate::sync::confine_to_workspace(workspace_root, path),
            PathScope::WholeEnvironment => crate::sync::confine_to_workspace("/", &relative_to(workspace_root, path))
                .map_err(|_| DriverError::PathOutsideWorkspace { path: path.to_owned() }),
        }
    }
}

/// `path` made absolute against `root` (lexically; no check).
fn relative_to(root: &str, path: &str) -> String {
    if path.starts_with('/') || path.is_empty() {
        path.to_owned()
    } else {
        format!("{}/{path}", root.trim_end_matches('/'))
    }
}

/// How a duplex channel ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DuplexExit {
    /// The command's exit code; `None` when the host ended the channel.
    pub exit_code: Option<i32>,
    /// The provider's transport closed without an exit.
    pub transport_closed: bool,
}

/// A live two-way byte channel to a running command. Methods take `&self`, so one task
/// may read while another writes.
#[async_trait]
pub trait DuplexChannel: Send + Sync {
    /// Writes bytes to the command's stdin.
    async fn write(&self, data: &[u8]) -> Result<(), DriverError>;
    /// The next chunk of output in order; `None` once output has ended. Output produced
    /// before the first read is held, not lost.
    async fn read(&self) -> Result<Option<Vec<u8>>, DriverError>;
    /// Closes the command's stdin (EOF).
    async fn close_input(&self) -> Result<(), DriverError>;
    /// Stops the command.
    async fn stop(&self) -> Result<(), DriverError>;
    /// Closes the channel and frees everything; idempotent.
    async fn close(&self) -> Result<(), DriverError>;
    /// Waits for the end: the exit code, or `None` when the host ended the channel.
    async fn wait(&self) -> Result<DuplexExit, DriverError>;
}

/// An environment driver. Required: [`key`](Self::key), [`acquire_lease`](Self::acquire_lease),
/// [`release_lease`](Self::release_lease), [`resolve_capabilities`](Self::resolve_capabilities).
/// Every optional group is reached through an `as_*` accessor that returns `None` unless
/// the driver implements it.
#[async_trait]
pub trait EnvironmentDriver: Send + Sync + 'static {
    /// The registry key (`local`, `docker`, `sandbox`, ...).
    fn key(&self) -> &str;

    /// Acquires a lease on an active environment. MUST write nothing the runtime cannot
    /// release if it fails.
    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError>;

    /// Releases a lease according to its policy and `input.status`. MUST be idempotent,
    /// and succeed when the resource is already gone.
    async fn release_lease(&self, input: &ReleaseInput) -> Result<(), DriverError>;

    /// The full nine-key snapshot for an environment or a lease (never partial).
    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError>;

    /// Checks an environment's `config` before it is stored
    /// ([`EnvironmentRuntime::put_environment`](crate::EnvironmentRuntime::put_environment)):
    /// a driver refuses a key it does not know (see [`crate::config_keys`]) so that a
    /// misspelled setting is never silently ignored. The default accepts everything.
    async fn check_environment_config(&self, _config: &JsonMap) -> Result<(), DriverError> {
        Ok(())
    }

    /// Lease resume, if the driver has it.
    fn as_resume(&self) -> Option<&dyn ResumeLease> {
        None
    }
    /// Lease destroy, if the driver has it.
    fn as_destroy(&self) -> Option<&dyn DestroyLease> {
        None
    }
    /// Workspace realization, if the driver has it.
    fn as_realize(&self) -> Option<&dyn RealizeWorkspace> {
        None
    }
    /// Command execution, if the driver has it.
    fn as_execute(&self) -> Option<&dyn Execute> {
        None
    }
    /// Native file sync, if the driver has it.
    fn as_sync(&self) -> Option<&dyn FileSync> {
        None
    }
    /// Duplex channels, if the driver has them.
    fn as_duplex(&self) -> Option<&dyn DuplexChannels> {
        None
    }
    /// Recovery (inventory and reap), if the driver has it. Not a contract verb: it never
    /// enters the capability snapshot; `envrt gc` and
    /// [`EnvironmentRuntime::reconcile`](crate::EnvironmentRuntime) loop over it.
    fn as_recovery(&self) -> Option<&dyn Recovery> {
        None
    }
    /// Templates (capture, list, delete, and acquire from one), if the driver has them.
    /// Not a capability key: the snapshot stays the contract's nine keys; a driver that
    /// has the group but cannot serve it on a given backend (a plugin worker that does not
    /// advertise the verbs) refuses in its own words.
    fn as_templates(&self) -> Option<&dyn Templates> {
        None
    }

    /// Which environment-side paths the driver accepts. The default, [`PathScope::Workspace`],
    /// confines every path to the lease workspace; a driver whose lease is a whole
    /// isolated environment declares [`PathScope::WholeEnvironment`] and MUST then make
    /// sure that no such path reaches anything outside that environment (the host's own
    /// files above all).
    fn path_scope(&self) -> PathScope {
        PathScope::Workspace
    }

    /// The verbs this driver verifiably implements, fed to the classifier. The default
    /// derives them from the accessors; a plugin driver answers with its live worker's
    /// `supportedMethods`.
    fn verified_verbs(&self) -> VerbSet {
        let mut set = VerbSet::new();
        set.insert(verbs::RELEASE_LEASE.to_owned());
        let groups: [(bool, &[&str]); 6] = [
            (self.as_resume().is_some(), &[verbs::RESUME_LEASE]),
            (self.as_destroy().is_some(), &[verbs::DESTROY_LEASE]),
            (self.as_realize().is_some(), &[verbs::REALIZE_WORKSPACE]),
            (self.as_execute().is_some(), &[verbs::EXECUTE]),
            (self.as_sync().is_some(), &[verbs::SYNC_IN, verbs::SYNC_OUT]),
            (self.as_duplex().is_some(), &[verbs::DUPLEX_OPEN]),
        ];
        for (present, names) in groups {
            if present {
                set.extend(names.iter().map(|s| s.to_string()));
            }
        }
        set
    }
}

/// Resuming a retained lease.
#[async_trait]
pub trait ResumeLease: Send + Sync {
    /// Resumes the lease; `Ok(None)` when its resource is gone. Needs `reusableLeases`.
    async fn resume_lease(&self, context: &LeaseContext) -> Result<Option<LeaseGrant>, DriverError>;
}

/// Destroying a lease's resource outright.
#[async_trait]
pub trait DestroyLease: Send + Sync {
    /// Removes everything of the lease. MUST be idempotent.
    async fn destroy_lease(&self, context: &LeaseContext) -> Result<(), DriverError>;
}

/// Realizing a workspace on a lease.
#[async_trait]
pub trait RealizeWorkspace: Send + Sync {
    /// Returns the working directory, confined to the lease.
    async fn realize_workspace(
        &self,
        context: &LeaseContext,
        request: &WorkspaceRequest,
    ) -> Result<RealizedWorkspace, DriverError>;
}

/// Running commands (contract section 5).
#[async_trait]
pub trait Execute: Send + Sync {
    /// Runs one command to completion (or timeout).
    async fn execute(&self, context: &LeaseContext, request: ExecuteRequest) -> Result<ExecuteResult, DriverError>;
}

/// Native file sync (contract section 6).
#[async_trait]
pub trait FileSync: Send + Sync {
    /// Host → environment. Needs `nativeSyncIn`.
    async fn sync_in(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError>;
    /// Environment → host. Needs `nativeSyncOut`.
    async fn sync_out(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError>;
    /// Whether sync works on this lease; default true.
    fn supports_sync(&self, _context: &LeaseContext) -> bool {
        true
    }
}

/// Duplex channels (contract section 7).
#[async_trait]
pub trait DuplexChannels: Send + Sync {
    /// Starts `command` (argv; element 0 is the program) and connects a channel to it.
    /// Needs `duplexCommandStream`.
    async fn open_duplex_channel(
        &self,
        context: &LeaseContext,
        command: &[String],
    ) -> Result<Box<dyn DuplexChannel>, DriverError>;
}

/// One backend resource a driver made for a lease, as its [`Recovery::inventory`] finds it
/// in the real backend (not in the store).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryItem {
    /// What it is, in the driver's words: `container`, `workspace`, `sandbox`, `process`.
    pub kind: String,
    /// The driver's handle for it: a container id, a path, a sandbox id, a pid.
    pub id: String,
    /// The lease it was made for, when the resource records it. An item with none is
    /// never reaped by reconciliation (nothing proves it is the driver's to remove).
    pub lease_id: Option<String>,
}

/// The recovery group: what a driver really holds in its backend, and removing what no
/// lease keeps. Reconciliation keeps every item whose lease is active, retained, pending
/// clean-up, or released but reusable; it reaps the rest.
#[async_trait]
pub trait Recovery: Send + Sync {
    /// Every resource this driver instance made (scoped by its own configuration: a state
    /// directory, a label set, a worker), whichever process made it.
    async fn inventory(&self) -> Result<Vec<InventoryItem>, DriverError>;
    /// Removes one item of [`inventory`](Self::inventory). MUST be idempotent: an item
    /// already gone is success.
    async fn reap(&self, item: &InventoryItem) -> Result<(), DriverError>;
    /// Kills what an active lease whose holder died left running, before the runtime
    /// releases it (the holder's process table died with it). Returns how many processes
    /// were killed. The default has nothing to kill.
    async fn kill_leftovers(&self, _lease: &Lease) -> Result<usize, DriverError> {
        Ok(0)
    }
}

/// The classifier as an in-process driver uses it: its own verbs as the verified set, the
/// given static support set and declaration, and the lease's narrowing (policy and
/// metadata; `config_resolved` says whether the provider configuration resolved).
pub fn classify_driver(
    driver: &dyn EnvironmentDriver,
    supported: crate::capability::SupportSet,
    declaration: Option<&crate::capability::CapabilityDeclaration>,
    input: &CapabilityInput,
    config_resolved: bool,
) -> CapabilitySnapshot {
    let verified = driver.verified_verbs();
    let narrowing = crate::capability::narrow_for_lease(
        input.lease.as_ref().map(|l| l.lease_policy),
        input.lease.as_ref().map(|l| &l.metadata),
        config_resolved,
    );
    crate::capability::classify(&crate::capability::ClassifierInput {
        supported,
        verified: Some(&verified),
        declaration,
        narrowing: Some(&narrowing),
    })
}
