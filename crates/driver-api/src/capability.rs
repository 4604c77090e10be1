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

/// Declares the capability keys once: for each, its variant, its field in
/// [`Capabilities`], its wire name, whether it is opt-in, and the verb groups that must be
/// verified (each inner list is one group, satisfied by any one of its verbs). Everything
/// that lists the keys — the enum, [`CapabilityKey::ALL`], the wire names, the struct's
/// fields and its accessors — is generated from this one table, so a new key is one entry
/// here (plus the drivers' explicit support lists and the docs).
macro_rules! capability_keys {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident, $field:ident, $wire:literal, opt_in: $opt_in:literal, verbs: [$([$($verb:ident),+]),*];
    )+) => {
        /// One of the nine capability keys.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "camelCase")]
        pub enum CapabilityKey {
            $($(#[doc = $doc])* $variant,)+
        }

        impl CapabilityKey {
            /// All nine keys, in the contract's order.
            pub const ALL: [CapabilityKey; capability_keys!(@count $($variant)+)] = [$(CapabilityKey::$variant,)+];

            /// The camelCase wire name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(CapabilityKey::$variant => $wire,)+
                }
            }

            /// Opt-in keys are false unless explicitly declared true.
            pub fn is_opt_in(self) -> bool {
                match self {
                    $(CapabilityKey::$variant => $opt_in,)+
                }
            }

            /// The verb groups that must all be verified; each inner slice is one group,
            /// satisfied by any one of its verbs.
            pub fn verb_groups(self) -> &'static [&'static [&'static str]] {
                use verbs::*;
                match self {
                    $(CapabilityKey::$variant => &[$(&[$($verb),+]),*],)+
                }
            }
        }

        /// Nine values, one per capability key. [`CapabilitySnapshot`] is
        /// `Capabilities<bool>`; declarations and narrowing are `Capabilities<Option<bool>>`
        /// (absent = no opinion).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "camelCase", default)]
        pub struct Capabilities<T> {
            $(
                #[doc = concat!("See [`CapabilityKey::", stringify!($variant), "`].")]
                pub $field: T,
            )+
        }

        impl<T: Copy> Capabilities<T> {
            /// The value of one key.
            pub fn get(&self, key: CapabilityKey) -> T {
                match key {
                    $(CapabilityKey::$variant => self.$field,)+
                }
            }

            /// Sets one key.
            pub fn set(&mut self, key: CapabilityKey, value: T) {
                let slot = match key {
                    $(CapabilityKey::$variant => &mut self.$field,)+
                };
                *slot = value;
            }

            /// Builds a value per key.
            pub fn from_fn(mut f: impl FnMut(CapabilityKey) -> T) -> Self {
                Capabilities {
                    $($field: f(CapabilityKey::$variant),)+
                }
            }
        }
    };
    (@count $($variant:ident)+) => { [$(capability_keys!(@one $variant)),+].len() };
    (@one $variant:ident) => { () };
}

capability_keys! {
    /// The lease may be retained and resumed later.
    ReusableLeases, reusable_leases, "reusableLeases", opt_in: false,
        verbs: [[RESUME_LEASE], [RELEASE_LEASE], [DESTROY_LEASE]];
    /// Host → environment file transfer.
    NativeSyncIn, native_sync_in, "nativeSyncIn", opt_in: false, verbs: [[SYNC_IN]];
    /// Environment → host file transfer.
    NativeSyncOut, native_sync_out, "nativeSyncOut", opt_in: false, verbs: [[SYNC_OUT]];
    /// Commands may run in a long-lived session.
    PersistentProcessSessions, persistent_process_sessions, "persistentProcessSessions", opt_in: false,
        verbs: [[EXECUTE]];
    /// One-shot commands may run beside a session.
    IndependentControlCommands, independent_control_commands, "independentControlCommands", opt_in: false,
        verbs: [[EXECUTE]];
    /// Output streams while the command runs.
    IncrementalSessionOutput, incremental_session_output, "incrementalSessionOutput", opt_in: true,
        verbs: [[EXECUTE]];
    /// Sync in and out may run at the same time.
    ConcurrentSyncOperations, concurrent_sync_operations, "concurrentSyncOperations", opt_in: true,
        verbs: [[SYNC_IN], [SYNC_OUT]];
    /// A persistent bidirectional byte channel to a command.
    DuplexCommandStream, duplex_command_stream, "duplexCommandStream", opt_in: true, verbs: [[DUPLEX_OPEN]];
    /// An authenticated private WebSocket endpoint.
    RunnerWebSocketIngress, runner_web_socket_ingress, "runnerWebSocketIngress", opt_in: true,
        verbs: [[RUNNER_INGRESS]];
}

impl CapabilityKey {
    /// Parses a camelCase wire name.
    pub fn from_wire(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl<T: Copy> Capabilities<T> {
    /// `(key, value)` pairs in the contract's order.
    pub fn entries(&self) -> impl Iterator<Item = (CapabilityKey, T)> + '_ {
        CapabilityKey::ALL.into_iter().map(|k| (k, self.get(k)))
    }
}

/// The full snapshot: exactly nine booleans. `Default` is all false.
pub type CapabilitySnapshot = Capabilities<bool>;
/// An explicit declaration (a manifest's `sandboxCapabilities`): it can remove, never grant.
pub type CapabilityDeclaration = Capabilities<Option<bool>>;
/// Per-lease narrowing: `Some(false)` turns a key off.
pub type Narrowing = Capabilities<Option<bool>>;

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
