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

mod duplex;
mod extend;
mod fork;
mod idle;
mod ingress;
mod path_scope;
mod pause;
mod processes;
mod recovery;
pub use duplex::{DuplexChannel, DuplexChannels, DuplexExit};
pub use extend::ExtendLease;
pub use fork::{FORKED_FROM_KEY, ForkLease, MAX_FORK_COUNT};
pub use idle::{IDLE_PAUSED_STAMP, IdleClock, IdleTimeout, OnIdle, touch_stamp};
pub use ingress::{IngressHeader, MAX_INGRESS_PATH, RunnerIngress, RunnerIngressEndpoint, check_ingress_request};
pub use path_scope::PathScope;
pub use pause::PauseLease;
pub use processes::{ProcessOutput, ProcessSessions};
pub use recovery::{InventoryItem, Recovery};

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
    /// The network policy in force for the lease (the one it asked for, granted within
    /// the environment's, or the environment's own), set only when the driver's
    /// [`network_boundary`](EnvironmentDriver::network_boundary) is
    /// [`Proxied`](crate::network::NetworkBoundary::Proxied) and the environment or the
    /// lease names a policy; the facade has checked it. The driver MUST enforce it from
    /// the lease's first command on.
    pub network: Option<crate::network::Policy>,
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

/// A provider's answer to [`EnvironmentDriver::probe_environment`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeAnswer {
    /// Whether the provider says the environment is usable.
    pub ok: bool,
    /// What it says, on one line.
    pub summary: String,
}

/// An environment driver (contract section 2). Required: [`key`](Self::key),
/// [`acquire_lease`](Self::acquire_lease), [`release_lease`](Self::release_lease),
/// [`resolve_capabilities`](Self::resolve_capabilities). Every optional group is reached
/// through an `as_*` accessor that returns `None` unless the driver implements it.
///
/// Each method's doc is its contract: one line, the capability key it needs (if any), what
/// the facade (envrt-runtime-core's `EnvironmentRuntime`) has already checked
/// before it calls, then the MUST / SHOULD rules, citing `docs/contract.md` by section.
/// Every lease operation reaches a driver only after the facade found the lease's driver
/// key (section 1) registered, else `Environment driver "{key}" is not registered in the
/// environment runtime yet.`; a runtime bound to a tenant also refuses another tenant's
/// lease first (section 3, "Tenancy of leases").
#[async_trait]
pub trait EnvironmentDriver: Send + Sync + 'static {
    /// The registry key (`local`, `docker`, `sandbox`, ...).
    ///
    /// - MUST be the key the driver's descriptor registers it under and constant for the
    ///   driver's life: the facade files the driver under it, and every lease the driver
    ///   acquires records it as `metadata.driver` (section 1).
    fn key(&self) -> &str;

    /// Acquires a lease on an active environment.
    ///
    /// Needs no capability. Before the call the facade has checked that the environment is
    /// known (`Environment "{id}" was not found.`), its driver registered and the
    /// environment active (`Environment "{name}" is not active.`), that a requested expiry
    /// has not passed (`Invalid input: the requested expiry {time} has already passed`),
    /// and, for [`AcquireInput::template`], that the driver has the templates group and the
    /// template (section 3; section 8, "Templates").
    ///
    /// - MUST write nothing the runtime cannot release if it fails.
    /// - MUST bound the resource by [`AcquireInput::requested_expires_at`] and return the
    ///   real expiry, or return none; the facade then ends the resource at once (destroy
    ///   where the driver has it, else release) and refuses with `Environment driver
    ///   "{key}" does not support lease expiry.` (section 8, "Expiry").
    /// - MUST seed the lease from [`AcquireInput::template`] when it is set, or fail.
    /// - SHOULD put `workspace` (the environment-side path where a command without a `cwd`
    ///   runs) into [`LeaseGrant::metadata`] (section 1); the facade writes `driver` when
    ///   the grant leaves it out.
    /// - SHOULD refuse an environment `config` key it does not know, as
    ///   [`check_environment_config`](Self::check_environment_config) does, for an
    ///   environment stored before (section 3, "Environment configurations are strict").
    /// - If the facade cannot store the lease afterwards, it releases the grant with status
    ///   `released`: nothing of it may outlive that release.
    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError>;

    /// Releases a lease according to its policy and `input.status`.
    ///
    /// Needs no capability and passes no gate: it is clean-up, called for an expired lease
    /// too. The facade calls it only for a lease that is `active` or `pending_cleanup` (or
    /// `retained`, when it is not ending as `retained` again); a lease already ended is
    /// answered without the driver. `input.status` is `retained` under `retain_on_failure`
    /// after a failure: keep the resource.
    ///
    /// - MUST be idempotent, and succeed when the resource is already gone (section 1).
    /// - MUST free the resource of an ephemeral lease by itself, before any destroy, and
    ///   keep the resource of a `reuse_by_environment` lease for a resume (the kit's
    ///   `lifecycle_ephemeral_release_frees_resource`, `..._reusable_release_keeps_resource`).
    /// - MUST NOT disturb another lease when handed one it never issued
    ///   (`lifecycle_driver_unknown_lease`).
    /// - An error leaves the lease `pending_cleanup` with `cleanup_status = failed`; a later
    ///   release (or `envrt gc`) calls again.
    async fn release_lease(&self, input: &ReleaseInput) -> Result<(), DriverError>;

    /// The capability snapshot of an environment (no lease yet) or of a lease.
    ///
    /// - MUST return all nine keys, never part of them (section 2, section 4), and SHOULD
    ///   build them with [`classify_driver`] rather than by hand.
    /// - MUST be honest: a key is true exactly when its operation works on that lease
    ///   (section 4, "Honesty"). The facade gates resume, sync and duplex on it; a failure
    ///   here refuses them (fail closed) and never reaches the operation.
    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError>;

    /// Checks an environment's `config` before it is stored
    /// (`EnvironmentRuntime::put_environment`).
    ///
    /// Called only when the environment's driver is registered; an error stores nothing.
    ///
    /// - SHOULD refuse a key it does not know (see [`crate::config_keys`]) with
    ///   `Invalid input: {what}: unknown field `{key}`, expected one of ...`, so that a
    ///   misspelled setting is never silently ignored (section 3, "Environment
    ///   configurations are strict"). The default accepts everything.
    async fn check_environment_config(&self, _config: &JsonMap) -> Result<(), DriverError> {
        Ok(())
    }

    /// Asks the environment's provider whether it is usable, within `timeout`, for
    /// `envrt doctor`: `None` when the driver has no such probe (the default, or a plugin
    /// worker that does not advertise `environmentProbe`); else the
    /// provider's answer, or why there is none (a refusal, a timeout: exact texts of the
    /// driver's).
    async fn probe_environment(
        &self,
        _environment: &Environment,
        _timeout: std::time::Duration,
    ) -> Option<Result<ProbeAnswer, String>> {
        None
    }

    /// What the driver does with its leases' network; the facade refuses every network
    /// setting the boundary cannot enforce ([`crate::network`]). The default, undeclared,
    /// accepts only environments that say nothing about the network.
    fn network_boundary(&self, _environment: &Environment) -> crate::network::NetworkBoundary {
        crate::network::NetworkBoundary::Undeclared
    }

    /// Whether the driver's egress proxy brokers `[[environment.network.credential]]`: puts
    /// each secret on the requests to its host and keeps it out of the lease (the lease
    /// trusts a CA of the proxy's, and sees only placeholders). The facade refuses an
    /// environment with credentials on a driver that does not (default: it does not).
    fn brokers_credentials(&self) -> bool {
        false
    }

    /// Replaces the network policy of an active lease (the facade checked it against the
    /// environment and the boundary first). Called only for a driver whose boundary is
    /// [`Proxied`](crate::network::NetworkBoundary::Proxied), which MUST apply it to new
    /// connections within a second and cut open ones it denies. The default refuses: a
    /// driver that declares a proxy must say how it updates it.
    async fn update_network_policy(
        &self,
        _context: &LeaseContext,
        _policy: &crate::network::Policy,
    ) -> Result<(), DriverError> {
        Err(DriverError::other(format!(
            "driver \"{}\" declares an egress proxy but cannot update a lease's policy",
            self.key()
        )))
    }

    /// Lease resume, if the driver has it. Without it the facade refuses with
    /// `Environment driver "{key}" does not support lease resume.` (section 3).
    fn as_resume(&self) -> Option<&dyn ResumeLease> {
        None
    }
    /// Lease destroy, if the driver has it. Without it: `Environment driver "{key}" does
    /// not support lease destroy.`
    fn as_destroy(&self) -> Option<&dyn DestroyLease> {
        None
    }
    /// Workspace realization, if the driver has it. Without it: `Environment driver
    /// "{key}" does not support workspace realization.`
    fn as_realize(&self) -> Option<&dyn RealizeWorkspace> {
        None
    }
    /// Command execution, if the driver has it. Without it: `Environment driver "{key}"
    /// does not support command execution.`
    fn as_execute(&self) -> Option<&dyn Execute> {
        None
    }
    /// Native file sync, if the driver has it. Without it: `Environment driver "{key}"
    /// does not support native file sync.`
    fn as_sync(&self) -> Option<&dyn FileSync> {
        None
    }
    /// Duplex channels, if the driver has them. Without them: `Environment driver "{key}"
    /// does not support duplex channels.`
    fn as_duplex(&self) -> Option<&dyn DuplexChannels> {
        None
    }
    /// Recovery (inventory and reap), if the driver has it. Not a contract verb: it never
    /// enters the capability snapshot; `envrt gc` and
    /// `EnvironmentRuntime::reconcile` loop over it.
    fn as_recovery(&self) -> Option<&dyn Recovery> {
        None
    }
    /// Templates (capture, list, delete, and acquire from one), if the driver has them.
    /// Not a capability key: the snapshot stays the contract's nine keys; a driver that
    /// has the group but cannot serve it on a given backend (a plugin worker that does not
    /// advertise the verbs) refuses in its own words. Without the group: `Environment
    /// driver "{key}" does not support template capture.` (capture), `... does not support
    /// templates.` (listing, and an acquire from a template), `... does not support
    /// template deletion.` (delete).
    fn as_templates(&self) -> Option<&dyn Templates> {
        None
    }
    /// Pause and unpause (contract section 8). Without it: `Environment driver "{key}"
    /// does not support pause.`
    fn as_pause(&self) -> Option<&dyn PauseLease> {
        None
    }
    /// Idle timeouts and keep-alive (contract section 8). Without it: `Environment
    /// driver "{key}" does not support idle timeouts.`
    fn as_idle(&self) -> Option<&dyn IdleTimeout> {
        None
    }
    /// Moving a lease's expiry (contract section 8). Without it: `Environment driver
    /// "{key}" does not support moving a lease's expiry.`
    fn as_extend(&self) -> Option<&dyn ExtendLease> {
        None
    }
    /// Persistent process sessions, if the driver has them. Without them, or on a lease
    /// whose snapshot denies `persistentProcessSessions`: `Environment driver "{key}" does
    /// not support persistent process sessions.` (section 9).
    fn as_processes(&self) -> Option<&dyn ProcessSessions> {
        None
    }
    /// Exposed lease ports, if the driver has them: a host stream to a port on the
    /// lease's loopback. Without them: `Environment driver "{key}" does not support
    /// exposed lease ports.` (section 10).
    fn as_expose(&self) -> Option<&dyn ExposePorts> {
        None
    }
    /// Runner WebSocket ingress (capability `runnerWebSocketIngress`), if the driver has
    /// it. Without it, or on a lease whose snapshot denies the capability: `Environment
    /// driver "{key}" does not support runner WebSocket ingress.` (section 10).
    fn as_runner_ingress(&self) -> Option<&dyn RunnerIngress> {
        None
    }

    /// Lease fork (section 8, "Fork"), if the driver has it. Without it: `Environment driver "{key}" does not support lease fork.`
    fn as_fork(&self) -> Option<&dyn ForkLease> {
        None
    }

    /// Which environment-side paths (a command's `cwd`, sync sources and targets) the
    /// driver accepts (section 5, the path-scope table).
    ///
    /// - The default, [`PathScope::Workspace`], confines every path to the lease workspace.
    /// - A driver MAY declare a wider scope ([`PathScope::WholeEnvironment`],
    ///   [`PathScope::CwdAnywhere`]) only when its lease is a whole isolated environment,
    ///   and MUST then make sure that no such path reaches anything outside that
    ///   environment (the host's own files above all; `docs/security.md`).
    /// - Whatever the scope, a `..` component, an empty path or a NUL byte MUST be refused
    ///   with `Path "{path}" is outside the lease workspace.` ([`PathScope::resolve`] does).
    fn path_scope(&self) -> PathScope {
        PathScope::Workspace
    }

    /// The provider's termination receipt of the last release or destroy of the envrt
    /// lease `lease_id` that this driver completed, taken once: the facade asks right after
    /// the call succeeded and records it on the lease (`metadata.terminationReceipt`).
    /// Drivers whose provider gives none keep the default.
    fn take_termination_receipt(&self, lease_id: &str) -> Option<crate::TerminationReceipt> {
        let _ = lease_id;
        None
    }

    /// The verbs this driver verifiably implements, fed to the classifier (section 4).
    ///
    /// - MUST match the groups the accessors return (the kit's
    ///   `honesty_verbs_match_groups`). The default derives them from the accessors; a
    ///   plugin driver answers with its live worker's `supportedMethods`.
    fn verified_verbs(&self) -> VerbSet {
        let mut set = VerbSet::new();
        set.insert(verbs::RELEASE_LEASE.to_owned());
        let groups: [(bool, &[&str]); 7] = [
            (self.as_resume().is_some(), &[verbs::RESUME_LEASE]),
            (self.as_destroy().is_some(), &[verbs::DESTROY_LEASE]),
            (self.as_realize().is_some(), &[verbs::REALIZE_WORKSPACE]),
            (self.as_execute().is_some(), &[verbs::EXECUTE]),
            (self.as_sync().is_some(), &[verbs::SYNC_IN, verbs::SYNC_OUT]),
            (self.as_duplex().is_some(), &[verbs::DUPLEX_OPEN]),
            (self.as_runner_ingress().is_some(), &[verbs::RUNNER_INGRESS]),
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
    /// Resumes the lease, handing back the same resource.
    ///
    /// Needs `reusableLeases`. Before the call the facade has checked, in the gate's order
    /// (section 3), that the driver has the group, that the lease's snapshot grants
    /// `reusableLeases` (else `Environment driver "{key}" does not support lease resume.`,
    /// also when the snapshot cannot be resolved) and that the lease is not past its expiry
    /// (`Lease "{id}" expired at {expires_at}.`). The lease need not be active.
    ///
    /// - MUST return `Ok(None)`, not an error, when the lease's resource is gone: the
    ///   facade marks the lease `failed` (`not_found`) and refuses with `Lease "{id}" can no
    ///   longer be resumed: its provider resource is gone.`
    /// - MUST hand back the same resource a reusable release kept (the kit's
    ///   `lifecycle_resume_returns_the_same_resource`), and none for an ephemeral lease
    ///   that was released (`lifecycle_driver_resume_after_release`).
    /// - An error records `resume_failed` on the lease and reaches the caller.
    async fn resume_lease(&self, context: &LeaseContext) -> Result<Option<LeaseGrant>, DriverError>;
}

/// Exposed lease ports (contract section 10): the facade listens on the host and asks the
/// driver for one stream per connection it accepts.
#[async_trait]
pub trait ExposePorts: Send + Sync {
    /// A stream to `127.0.0.1:{port}` inside the lease, carrying bytes both ways until
    /// either side closes (a unix stream, so the trait needs no async runtime). Refusals in
    /// the driver's words (nothing listens there, the lease has no supervisor); the stream
    /// ends when the lease ends.
    async fn connect_port(
        &self,
        context: &LeaseContext,
        port: u16,
    ) -> Result<std::os::unix::net::UnixStream, DriverError>;
}

/// Destroying a lease's resource outright.
#[async_trait]
pub trait DestroyLease: Send + Sync {
    /// Removes everything of the lease's resource.
    ///
    /// Needs no capability. The facade checks only that the driver has the group: destroy
    /// is clean-up, so it is called for an expired or ended lease too (section 3).
    ///
    /// - MUST be idempotent: a second destroy, or one whose resource is already gone,
    ///   succeeds (section 1; the kit's `lifecycle_destroy_is_idempotent`).
    /// - An error leaves the lease `pending_cleanup` with `cleanup_status = failed`.
    async fn destroy_lease(&self, context: &LeaseContext) -> Result<(), DriverError>;
}

/// Realizing a workspace on a lease.
#[async_trait]
pub trait RealizeWorkspace: Send + Sync {
    /// Realizes a workspace and returns its environment-side working directory.
    ///
    /// Needs no capability. Before the call the facade has checked that the driver has the
    /// group, the lease is not past its expiry and the lease is active (`Lease "{id}" is not
    /// active (status: {status}).`; section 3).
    ///
    /// - MUST return a `cwd` confined to the lease, where
    ///   [`path_scope`](EnvironmentDriver::path_scope) allows (inside the lease workspace by
    ///   default).
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
    ///
    /// Needs no capability. Before the call the facade has checked that the driver has the
    /// group, the lease is not past its expiry and the lease is active (section 3). Every
    /// rule of section 5 applies; in short:
    ///
    /// - A timeout MUST kill the whole process tree (a polite signal, then a kill after a
    ///   grace period), keep the output gathered so far and set `timed_out`; nothing of the
    ///   tree may be left running (the kit's `execute_timeout_kills_tree`).
    /// - Dropping the returned future before it finished MUST kill the command's whole tree
    ///   within 10 s, also when the caller's runtime shuts down or its process exits right
    ///   after the drop (do it inside `Drop` when the kill would outlive the caller;
    ///   `execute_drop_kills_tree`).
    /// - MUST return when the command exits, even if a background grandchild still holds
    ///   stdout open; that grandchild dies with the tree (`execute_grandchild_holding_stdout`).
    /// - MUST cap each stream ([`ExecuteRequest::output_limit`], keeping the head or the
    ///   tail as `keep` says), set the truncation flag, and keep memory bounded; a sink sees
    ///   every byte.
    /// - `cwd`: a relative `cwd` starts at the workspace; none runs in the workspace
    ///   (`metadata.workspace`). A `cwd` outside the
    ///   [`path_scope`](EnvironmentDriver::path_scope) MUST be refused with `Path "{path}"
    ///   is outside the lease workspace.` ([`PathScope::resolve_cwd`]); one that does not
    ///   exist or is not a directory MUST be refused, running nothing, with
    ///   [`DriverError::missing_cwd`] (`Invalid input: cwd "{cwd}" is not a directory in the
    ///   environment.`).
    /// - A program that does not exist MUST give exit code 127 and, on stderr, exactly
    ///   `envrt: command not found: {program}` and a newline.
    /// - `user`: a driver that cannot honour it MUST refuse, running nothing, with
    ///   [`DriverError::UserRefused`] (`Cannot run as user "{user}": {reason}`).
    /// - MUST NOT leak the host's environment beyond a short documented allow-list, nor a
    ///   secret value into errors, logs or `Debug` output; SHOULD set `HOME` unless the
    ///   request does.
    async fn execute(&self, context: &LeaseContext, request: ExecuteRequest) -> Result<ExecuteResult, DriverError>;
}

/// Native file sync (contract section 6).
#[async_trait]
pub trait FileSync: Send + Sync {
    /// Copies files host → environment, applying `operations` in order.
    ///
    /// Needs `nativeSyncIn`. Before the call the facade has checked that the driver has
    /// the group, that the lease's snapshot grants `nativeSyncIn` and
    /// [`supports_sync`](Self::supports_sync) is true (else `Environment driver "{key}"
    /// does not support native file sync.`, also when the snapshot cannot be resolved),
    /// that the lease is not past its expiry and that it is active (section 3).
    ///
    /// - MUST write nothing outside a target: an entry with `..`, an absolute name or a
    ///   link leading out of the target is refused (`Entry "{entry}" would be written
    ///   outside the target "{target}".`), and a failed operation leaves no half-written
    ///   target (section 6).
    /// - Targets MUST lie where [`path_scope`](EnvironmentDriver::path_scope) allows, else
    ///   `Path "{path}" is outside the lease workspace.`
    /// - MUST apply `mode` as the target's final mode, clear set-uid, set-gid and sticky
    ///   bits unless `keepSpecialBits`, and run post-upload commands after the files land,
    ///   in order, stopping at the first failure, with the texts of section 6.
    async fn sync_in(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError>;
    /// Copies files environment → host, applying `operations` in order.
    ///
    /// Needs `nativeSyncOut`; the facade checks as for [`sync_in`](Self::sync_in), with
    /// `nativeSyncOut`.
    ///
    /// - MUST write nothing on the host outside a target, never a file readable by others
    ///   while it is written, and nothing of an operation past an entry's `maxBytes`
    ///   (`Sync out of "{path}" exceeds the limit of {limit} bytes.`; section 6).
    /// - Sources MUST lie where [`path_scope`](EnvironmentDriver::path_scope) allows, else
    ///   `Path "{path}" is outside the lease workspace.`
    async fn sync_out(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError>;
    /// Whether sync works on this lease; default true.
    ///
    /// - Never an error. When false the facade refuses both directions with the sync
    ///   refusal above, and its `supports_sync` answers false.
    fn supports_sync(&self, _context: &LeaseContext) -> bool {
        true
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
