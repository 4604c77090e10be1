//! The data model of the contract's section 1: environments, leases and driver-key
//! resolution.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// A JSON object, the type of every free-form `config` and `metadata` field.
pub type JsonMap = serde_json::Map<String, serde_json::Value>;

/// Milliseconds since the Unix epoch; how every lease timestamp is stored and sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The current wall-clock time.
    pub fn now() -> Self {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Timestamp(millis)
    }
}

/// Whether an environment accepts new leases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvironmentStatus {
    /// New leases may be acquired.
    Active,
    /// Kept for history; acquiring a lease is refused.
    Archived,
}

/// Where commands run: a driver key plus that driver's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Environment {
    /// Unique id.
    pub id: String,
    /// Human-readable name, used in error messages.
    pub name: String,
    /// The driver key (`local`, `docker`, `sandbox`, ...).
    pub driver: String,
    /// Whether new leases may be acquired.
    pub status: EnvironmentStatus,
    /// Driver-specific configuration.
    #[serde(default)]
    pub config: JsonMap,
    /// Free-form metadata.
    #[serde(default)]
    pub metadata: Option<JsonMap>,
    /// What network its leases get (`network = "host"` or `[environment.network]`);
    /// `None`: the driver's default (see [`crate::network`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::network::EnvironmentNetwork>,
    /// A command that must succeed on a new lease before its acquire returns
    /// (`ready_command`, `ready_timeout`); `None`: the lease is ready once its driver says
    /// so (contract section 8, "Readiness").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Readiness>,
    /// Its leases' process settings (`[environment.processes]`: the default `keep`, the
    /// per-lease replay bound); `None`: the defaults (contract section 9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<crate::process::ProcessSettings>,
    /// The longest a lease of this environment may live, in milliseconds from its
    /// acquire (`max_ttl`): `extend` never moves an expiry past it; `None`: unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ttl_ms: Option<u64>,
}

/// An environment's readiness command: run on every new lease, bounded by `timeout_ms`;
/// anything but exit code 0 within it ends the lease and fails the acquire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Readiness {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// How long it may take, in milliseconds.
    pub timeout_ms: u64,
}

impl Environment {
    /// An active environment with an empty configuration.
    pub fn new(id: impl Into<String>, name: impl Into<String>, driver: impl Into<String>) -> Self {
        Environment {
            id: id.into(),
            name: name.into(),
            driver: driver.into(),
            status: EnvironmentStatus::Active,
            config: JsonMap::new(),
            metadata: None,
            network: None,
            readiness: None,
            processes: None,
            max_ttl_ms: None,
        }
    }

    /// The same environment with `config` replaced.
    pub fn with_config(mut self, config: JsonMap) -> Self {
        self.config = config;
        self
    }
}

/// A provider's confirmation that a lease's execution has ended (Paperclip's
/// `PluginEnvironmentTerminationReceipt`: returned only once the provider knows it ended; a
/// queued stop is none). The facade records the last one on the lease as
/// `metadata.terminationReceipt` (contract section 3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminationReceipt {
    /// The provider's lease id the receipt is for.
    pub provider_lease_id: String,
    /// How it ended.
    pub state: TerminationState,
}

/// How a lease ended, in a [`TerminationReceipt`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TerminationState {
    /// Stopped: its files kept, resumable.
    Stopped,
    /// Destroyed: nothing left.
    Destroyed,
}

/// The life-cycle state of a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseStatus {
    /// Held and usable.
    Active,
    /// Given back; its resource is cleaned up according to its policy.
    Released,
    /// Ended by the provider's expiry.
    Expired,
    /// Ended by a failure.
    Failed,
    /// Ended by a failure under `retain_on_failure`: the resource is kept for inspection.
    Retained,
    /// Released, but the provider clean-up failed and must be retried.
    PendingCleanup,
}

impl LeaseStatus {
    /// The snake_case wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseStatus::Active => "active",
            LeaseStatus::Released => "released",
            LeaseStatus::Expired => "expired",
            LeaseStatus::Failed => "failed",
            LeaseStatus::Retained => "retained",
            LeaseStatus::PendingCleanup => "pending_cleanup",
        }
    }
}

impl fmt::Display for LeaseStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happens to a lease's resource when the lease ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeasePolicy {
    /// The resource is removed on release.
    #[default]
    Ephemeral,
    /// The resource is kept on release and a later resume returns it.
    ReuseByEnvironment,
    /// Reuse scoped to an execution workspace.
    ReuseByExecutionWorkspace,
    /// The resource is kept when the lease is released as `failed`.
    RetainOnFailure,
}

impl LeasePolicy {
    /// The snake_case wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            LeasePolicy::Ephemeral => "ephemeral",
            LeasePolicy::ReuseByEnvironment => "reuse_by_environment",
            LeasePolicy::ReuseByExecutionWorkspace => "reuse_by_execution_workspace",
            LeasePolicy::RetainOnFailure => "retain_on_failure",
        }
    }
}

/// The state of a lease's provider clean-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CleanupStatus {
    /// Not attempted yet.
    Pending,
    /// Done.
    Success,
    /// Attempted and failed; retry with release or destroy.
    Failed,
}

/// One holder's claim on an environment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// Unique id minted by the runtime.
    pub id: String,
    /// Tenant scope.
    pub company_id: String,
    /// The environment; `None` only for an orphan awaiting clean-up.
    pub environment_id: Option<String>,
    /// Optional execution-workspace scope.
    #[serde(default)]
    pub execution_workspace_id: Option<String>,
    /// Optional issue scope.
    #[serde(default)]
    pub issue_id: Option<String>,
    /// Optional run scope; `None` marks an ad-hoc probe, never reused.
    #[serde(default)]
    pub run_id: Option<String>,
    /// Life-cycle state.
    pub status: LeaseStatus,
    /// Clean-up policy.
    pub lease_policy: LeasePolicy,
    /// The provider (`local`, `docker`, a sandbox provider key, ...).
    #[serde(default)]
    pub provider: Option<String>,
    /// The provider's opaque handle (container id, sandbox id, ...).
    #[serde(default)]
    pub provider_lease_id: Option<String>,
    /// When the lease was acquired.
    pub acquired_at: Timestamp,
    /// When the lease was last acquired, resumed or released.
    pub last_used_at: Timestamp,
    /// Expiry, only as the provider attests it.
    #[serde(default)]
    pub expires_at: Option<Timestamp>,
    /// When the lease was released.
    #[serde(default)]
    pub released_at: Option<Timestamp>,
    /// Short failure code (`lease_expired`, `release_cleanup_failed`, `resume_failed`, ...).
    #[serde(default)]
    pub failure_reason: Option<String>,
    /// State of the provider clean-up.
    #[serde(default)]
    pub cleanup_status: Option<CleanupStatus>,
    /// Free-form metadata; `driver` is written at acquire.
    #[serde(default)]
    pub metadata: JsonMap,
}

/// The lease metadata key every driver fills with the lease's workspace: the absolute
/// path, as the environment sees it, where commands run by default and relative paths
/// resolve. Older keys stay for compatibility: the Docker driver's `workspaceDir` and the
/// plugin protocol's `remoteCwd`.
pub const WORKSPACE_METADATA_KEY: &str = "workspace";

impl Lease {
    /// `metadata.workspace` ([`WORKSPACE_METADATA_KEY`]) when it is a non-empty string.
    pub fn workspace(&self) -> Option<&str> {
        self.metadata
            .get(WORKSPACE_METADATA_KEY)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
    }

    /// `metadata.driver` when it is a non-empty string.
    pub fn metadata_driver(&self) -> Option<&str> {
        self.metadata
            .get("driver")
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
    }
}

/// The driver key used when neither the lease nor an environment names one.
pub const FALLBACK_DRIVER_KEY: &str = "sandbox";

/// Resolves the driver key of an operation on an existing lease: `lease.metadata.driver`
/// when it is a non-empty string, else `environment.driver`, else `sandbox`.
pub fn resolve_driver_key<'a>(lease: &'a Lease, environment: Option<&'a Environment>) -> &'a str {
    lease
        .metadata_driver()
        .or(environment.map(|e| e.driver.as_str()))
        .unwrap_or(FALLBACK_DRIVER_KEY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn lease_with(metadata: serde_json::Value) -> Lease {
        Lease {
            id: "l1".into(),
            company_id: "c1".into(),
            environment_id: Some("e1".into()),
            execution_workspace_id: None,
            issue_id: None,
            run_id: Some("r1".into()),
            status: LeaseStatus::Active,
            lease_policy: LeasePolicy::Ephemeral,
            provider: None,
            provider_lease_id: None,
            acquired_at: Timestamp(1),
            last_used_at: Timestamp(1),
            expires_at: None,
            released_at: None,
            failure_reason: None,
            cleanup_status: None,
            metadata: metadata.as_object().cloned().unwrap_or_default(),
        }
    }

    #[test]
    fn driver_key_prefers_lease_metadata_then_environment_then_sandbox() {
        let env = Environment::new("e1", "Env", "docker");
        assert_eq!(
            resolve_driver_key(&lease_with(json!({"driver": "local"})), Some(&env)),
            "local"
        );
        assert_eq!(
            resolve_driver_key(&lease_with(json!({"driver": ""})), Some(&env)),
            "docker"
        );
        assert_eq!(
            resolve_driver_key(&lease_with(json!({"driver": 3})), Some(&env)),
            "docker"
        );
        assert_eq!(resolve_driver_key(&lease_with(json!({})), None), "sandbox");
    }

    #[test]
    fn lease_serializes_camel_case_and_statuses_snake_case() {
        let mut lease = lease_with(json!({"driver": "local"}));
        lease.status = LeaseStatus::PendingCleanup;
        lease.lease_policy = LeasePolicy::ReuseByEnvironment;
        lease.provider_lease_id = Some("p".into());
        let v = serde_json::to_value(&lease).unwrap();
        assert_eq!(v["providerLeaseId"], "p");
        assert_eq!(v["status"], "pending_cleanup");
        assert_eq!(v["leasePolicy"], "reuse_by_environment");
        assert_eq!(v["companyId"], "c1");
        let back: Lease = serde_json::from_value(v).unwrap();
        assert_eq!(back, lease);
    }
}
