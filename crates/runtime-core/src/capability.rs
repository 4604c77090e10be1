//! The nine-key capability snapshot, the classifier and per-lease narrowing of the
//! contract's section 4. Everything here is a pure function.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::model::{JsonMap, LeasePolicy};

/// Worker verb names, as a plugin worker advertises them in `supportedMethods`.
pub mod verbs {
    /// Resume a retained lease.
    pub const RESUME_LEASE: &str = "environmentResumeLease";
    /// Release a lease.
    pub const RELEASE_LEASE: &str = "environmentReleaseLease";
    /// Destroy a lease's resource.
    pub const DESTROY_LEASE: &str = "environmentDestroyLease";
    /// Realize a workspace.
    pub const REALIZE_WORKSPACE: &str = "environmentRealizeWorkspace";
    /// Run a command.
    pub const EXECUTE: &str = "environmentExecute";
    /// Host → environment file transfer.
    pub const SYNC_IN: &str = "environmentSyncIn";
    /// Environment → host file transfer.
    pub const SYNC_OUT: &str = "environmentSyncOut";
    /// Open a duplex channel.
    pub const DUPLEX_OPEN: &str = "duplexChannelOpen";
    /// The runner WebSocket ingress endpoint.
    pub const RUNNER_INGRESS: &str = "environmentRunnerIngressEndpoint";
}

/// A set of verified verbs (advertised by a worker, or implemented by an in-process
/// driver).
pub type VerbSet = BTreeSet<String>;

/// One of the nine capability keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CapabilityKey {
    /// The lease may be retained and resumed later.
    ReusableLeases,
    /// Host → environment file transfer.
    NativeSyncIn,
    /// Environment → host file transfer.
    NativeSyncOut,
    /// Commands may run in a long-lived session.
    PersistentProcessSessions,
    /// One-shot commands may run beside a session.
    IndependentControlCommands,
    /// Output streams while the command runs.
    IncrementalSessionOutput,
    /// Sync in and out may run at the same time.
    ConcurrentSyncOperations,
    /// A persistent bidirectional byte channel to a command.
    DuplexCommandStream,
    /// An authenticated private WebSocket endpoint.
    RunnerWebSocketIngress,
}

impl CapabilityKey {
    /// All nine keys, in the contract's order.
    pub const ALL: [CapabilityKey; 9] = [
        CapabilityKey::ReusableLeases,
        CapabilityKey::NativeSyncIn,
        CapabilityKey::NativeSyncOut,
        CapabilityKey::PersistentProcessSessions,
        CapabilityKey::IndependentControlCommands,
        CapabilityKey::IncrementalSessionOutput,
        CapabilityKey::ConcurrentSyncOperations,
        CapabilityKey::DuplexCommandStream,
        CapabilityKey::RunnerWebSocketIngress,
    ];

    /// The camelCase wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            CapabilityKey::ReusableLeases => "reusableLeases",
            CapabilityKey::NativeSyncIn => "nativeSyncIn",
            CapabilityKey::NativeSyncOut => "nativeSyncOut",
            CapabilityKey::PersistentProcessSessions => "persistentProcessSessions",
            CapabilityKey::IndependentControlCommands => "independentControlCommands",
            CapabilityKey::IncrementalSessionOutput => "incrementalSessionOutput",
            CapabilityKey::ConcurrentSyncOperations => "concurrentSyncOperations",
            CapabilityKey::DuplexCommandStream => "duplexCommandStream",
            CapabilityKey::RunnerWebSocketIngress => "runnerWebSocketIngress",
        }
    }

    /// Opt-in keys are false unless explicitly declared true.
    pub fn is_opt_in(self) -> bool {
        matches!(
            self,
            CapabilityKey::IncrementalSessionOutput
                | CapabilityKey::ConcurrentSyncOperations
                | CapabilityKey::DuplexCommandStream
                | CapabilityKey::RunnerWebSocketIngress
        )
    }

    /// The verb groups that must all be verified; each inner slice is one group, satisfied
    /// by any one of its verbs.
    pub fn verb_groups(self) -> &'static [&'static [&'static str]] {
        use verbs::*;
        match self {
            CapabilityKey::ReusableLeases => &[&[RESUME_LEASE], &[RELEASE_LEASE], &[DESTROY_LEASE]],
            CapabilityKey::NativeSyncIn => &[&[SYNC_IN]],
            CapabilityKey::NativeSyncOut => &[&[SYNC_OUT]],
            CapabilityKey::PersistentProcessSessions
            | CapabilityKey::IndependentControlCommands
            | CapabilityKey::IncrementalSessionOutput => &[&[EXECUTE]],
            CapabilityKey::ConcurrentSyncOperations => &[&[SYNC_IN], &[SYNC_OUT]],
            CapabilityKey::DuplexCommandStream => &[&[DUPLEX_OPEN]],
            CapabilityKey::RunnerWebSocketIngress => &[&[RUNNER_INGRESS]],
        }
    }

    /// Parses a camelCase wire name.
    pub fn from_wire(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// Nine values, one per capability key. [`CapabilitySnapshot`] is `Capabilities<bool>`;
/// declarations and narrowing are `Capabilities<Option<bool>>` (absent = no opinion).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Capabilities<T> {
    /// See [`CapabilityKey::ReusableLeases`].
    pub reusable_leases: T,
    /// See [`CapabilityKey::NativeSyncIn`].
    pub native_sync_in: T,
    /// See [`CapabilityKey::NativeSyncOut`].
    pub native_sync_out: T,
    /// See [`CapabilityKey::PersistentProcessSessions`].
    pub persistent_process_sessions: T,
    /// See [`CapabilityKey::IndependentControlCommands`].
    pub independent_control_commands: T,
    /// See [`CapabilityKey::IncrementalSessionOutput`].
    pub incremental_session_output: T,
    /// See [`CapabilityKey::ConcurrentSyncOperations`].
    pub concurrent_sync_operations: T,
    /// See [`CapabilityKey::DuplexCommandStream`].
    pub duplex_command_stream: T,
    /// See [`CapabilityKey::RunnerWebSocketIngress`].
    pub runner_web_socket_ingress: T,
}

/// The full snapshot: exactly nine booleans. `Default` is all false.
pub type CapabilitySnapshot = Capabilities<bool>;
/// An explicit declaration (a manifest's `sandboxCapabilities`): it can remove, never grant.
pub type CapabilityDeclaration = Capabilities<Option<bool>>;
/// Per-lease narrowing: `Some(false)` turns a key off.
pub type Narrowing = Capabilities<Option<bool>>;

impl<T: Copy> Capabilities<T> {
    /// The value of one key.
    pub fn get(&self, key: CapabilityKey) -> T {
        match key {
            CapabilityKey::ReusableLeases => self.reusable_leases,
            CapabilityKey::NativeSyncIn => self.native_sync_in,
            CapabilityKey::NativeSyncOut => self.native_sync_out,
            CapabilityKey::PersistentProcessSessions => self.persistent_process_sessions,
            CapabilityKey::IndependentControlCommands => self.independent_control_commands,
            CapabilityKey::IncrementalSessionOutput => self.incremental_session_output,
            CapabilityKey::ConcurrentSyncOperations => self.concurrent_sync_operations,
            CapabilityKey::DuplexCommandStream => self.duplex_command_stream,
            CapabilityKey::RunnerWebSocketIngress => self.runner_web_socket_ingress,
        }
    }

    /// Sets one key.
    pub fn set(&mut self, key: CapabilityKey, value: T) {
        let slot = match key {
            CapabilityKey::ReusableLeases => &mut self.reusable_leases,
            CapabilityKey::NativeSyncIn => &mut self.native_sync_in,
            CapabilityKey::NativeSyncOut => &mut self.native_sync_out,
            CapabilityKey::PersistentProcessSessions => &mut self.persistent_process_sessions,
            CapabilityKey::IndependentControlCommands => &mut self.independent_control_commands,
            CapabilityKey::IncrementalSessionOutput => &mut self.incremental_session_output,
            CapabilityKey::ConcurrentSyncOperations => &mut self.concurrent_sync_operations,
            CapabilityKey::DuplexCommandStream => &mut self.duplex_command_stream,
            CapabilityKey::RunnerWebSocketIngress => &mut self.runner_web_socket_ingress,
        };
        *slot = value;
    }

    /// Builds a value per key.
    pub fn from_fn(mut f: impl FnMut(CapabilityKey) -> T) -> Self {
        Capabilities {
            reusable_leases: f(CapabilityKey::ReusableLeases),
            native_sync_in: f(CapabilityKey::NativeSyncIn),
            native_sync_out: f(CapabilityKey::NativeSyncOut),
            persistent_process_sessions: f(CapabilityKey::PersistentProcessSessions),
            independent_control_commands: f(CapabilityKey::IndependentControlCommands),
            incremental_session_output: f(CapabilityKey::IncrementalSessionOutput),
            concurrent_sync_operations: f(CapabilityKey::ConcurrentSyncOperations),
            duplex_command_stream: f(CapabilityKey::DuplexCommandStream),
            runner_web_socket_ingress: f(CapabilityKey::RunnerWebSocketIngress),
        }
    }

    /// `(key, value)` pairs in the contract's order.
    pub fn entries(&self) -> impl Iterator<Item = (CapabilityKey, T)> + '_ {
        CapabilityKey::ALL.into_iter().map(|k| (k, self.get(k)))
    }
}

impl CapabilitySnapshot {
    /// The snapshot as a JSON object of exactly nine camelCase keys.
    pub fn to_json(&self) -> JsonMap {
        self.entries()
            .map(|(k, v)| (k.as_str().to_owned(), serde_json::Value::Bool(v)))
            .collect()
    }
}

/// A driver's static support set: which keys it can ever offer.
pub type SupportSet = BTreeSet<CapabilityKey>;

/// Everything the classifier looks at.
#[derive(Clone, Debug, Default)]
pub struct ClassifierInput<'a> {
    /// Keys in the driver's static support set.
    pub supported: SupportSet,
    /// Verified verbs: a worker's advertised methods, or a driver's own operations.
    pub verified: Option<&'a VerbSet>,
    /// The explicit declaration, if any.
    pub declaration: Option<&'a CapabilityDeclaration>,
    /// Per-lease narrowing, if any.
    pub narrowing: Option<&'a Narrowing>,
}

/// The classifier: for each key, `supported ∧ verified ∧ declared_allows ∧
/// narrowing_allows`.
pub fn classify(input: &ClassifierInput<'_>) -> CapabilitySnapshot {
    let empty = VerbSet::new();
    let verified = input.verified.unwrap_or(&empty);
    CapabilitySnapshot::from_fn(|key| {
        let supported = input.supported.contains(&key);
        let is_verified = !verified.is_empty()
            && key
                .verb_groups()
                .iter()
                .all(|group| group.iter().any(|verb| verified.contains(*verb)));
        let declared_allows = match input.declaration.and_then(|d| d.get(key)) {
            Some(value) => value,
            None => !key.is_opt_in(),
        };
        let narrowing_allows = input.narrowing.and_then(|n| n.get(key)).unwrap_or(true);
        supported && is_verified && declared_allows && narrowing_allows
    })
}

/// Computes the per-lease narrowing: `reusableLeases` only under `reuse_by_environment`;
/// `backend = "job"` or `nativeFileSyncUnsupported = true` in the lease metadata turn both
/// native sync keys off; a provider configuration that failed to resolve turns off
/// `persistentProcessSessions`, `incrementalSessionOutput` and `duplexCommandStream`.
pub fn narrow_for_lease(policy: Option<LeasePolicy>, metadata: Option<&JsonMap>, config_resolved: bool) -> Narrowing {
    let mut n = Narrowing::default();
    if let Some(policy) = policy {
        n.reusable_leases = Some(policy == LeasePolicy::ReuseByEnvironment);
    }
    if let Some(meta) = metadata {
        let job = meta.get("backend").and_then(|v| v.as_str()) == Some("job");
        let unsupported = meta.get("nativeFileSyncUnsupported").and_then(|v| v.as_bool()) == Some(true);
        if job || unsupported {
            n.native_sync_in = Some(false);
            n.native_sync_out = Some(false);
        }
    }
    if !config_resolved {
        n.persistent_process_sessions = Some(false);
        n.incremental_session_output = Some(false);
        n.duplex_command_stream = Some(false);
    }
    n
}

#[cfg(test)]
mod tests;
