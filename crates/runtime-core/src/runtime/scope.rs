//! Leases that find their owner again (contract section 8, "Scope reuse"): an acquire
//! may name an owner scope (a tenant, agent or workspace key); with [`Reuse::Scope`] a
//! live lease of that scope whose configuration fingerprint matches is handed back
//! (`resumed`), one whose fingerprint differs is ended and replaced (`replaced`, with the
//! reason), and otherwise a lease is made (`created`). The store's scope lock
//! ([`LeaseStore::lock_scope`](crate::LeaseStore::lock_scope)) makes concurrent acquires
//! of one scope, from any runtime on the store, take turns: they get one lease.

use serde_json::Value;

use crate::error::{DriverError, RuntimeError};
use crate::model::{Environment, JsonMap, Lease, LeasePolicy, LeaseStatus, Timestamp};
use crate::store::LeaseFilter;

use super::EnvironmentRuntime;
use super::lifecycle::AcquireRequest;

/// Lease metadata: the owner scope the lease was acquired under.
pub const SCOPE_KEY: &str = "envrtScope";
/// Lease metadata: the configuration fingerprint, one hash per part
/// (`{config, driver, template, network}`).
pub const FINGERPRINT_KEY: &str = "envrtFingerprint";
/// Lease metadata: what the last scoped acquire did, `{outcome, reason?}`.
pub const SCOPE_OUTCOME_KEY: &str = "envrtScopeOutcome";
/// The longest scope accepted, in bytes.
pub const MAX_SCOPE_BYTES: usize = 256;

/// Whether an acquire may hand back an existing lease.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reuse {
    /// Always a new lease (the default); a scope is only recorded.
    #[default]
    Never,
    /// A live lease of the request's scope and fingerprint, when there is one.
    Scope,
}

/// What a scoped acquire did (also recorded on the lease as `envrtScopeOutcome`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScopeOutcome {
    /// No lease of the scope could be reused: a new one was made.
    Created,
    /// The scope's lease was handed back.
    Resumed,
    /// The scope's lease was ended and a new one made; why.
    Replaced {
        /// `the fingerprint changed: {parts}` or `its provider resource is gone`.
        reason: String,
    },
}

impl ScopeOutcome {
    /// `created`, `resumed` or `replaced`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ScopeOutcome::Created => "created",
            ScopeOutcome::Resumed => "resumed",
            ScopeOutcome::Replaced { .. } => "replaced",
        }
    }

    /// The outcome a lease records, if it was acquired with scope reuse.
    pub fn of(lease: &Lease) -> Option<ScopeOutcome> {
        let recorded = lease.metadata.get(SCOPE_OUTCOME_KEY)?;
        match recorded.get("outcome")?.as_str()? {
            "created" => Some(ScopeOutcome::Created),
            "resumed" => Some(ScopeOutcome::Resumed),
            "replaced" => Some(ScopeOutcome::Replaced {
                reason: recorded.get("reason")?.as_str()?.to_owned(),
            }),
            _ => None,
        }
    }

    fn to_value(&self) -> Value {
        let mut map = JsonMap::new();
        map.insert("outcome".into(), self.as_str().into());
        if let ScopeOutcome::Replaced { reason } = self {
            map.insert("reason".into(), reason.clone().into());
        }
        Value::Object(map)
    }
}

/// Refuses a scope that is empty, longer than [`MAX_SCOPE_BYTES`] or holds a control
/// character, and `reuse = "scope"` without a scope.
pub(super) fn check_scope(scope: Option<&str>, reuse: Reuse) -> Result<(), DriverError> {
    match scope {
        None if reuse == Reuse::Scope => Err(DriverError::invalid("reuse = \"scope\" needs a scope")),
        None => Ok(()),
        Some(s) if s.is_empty() || s.len() > MAX_SCOPE_BYTES || s.chars().any(char::is_control) => {
            Err(DriverError::invalid(format!(
                "a lease scope must be 1 to {MAX_SCOPE_BYTES} bytes without control characters"
            )))
        }
        Some(_) => Ok(()),
    }
}

/// FNV-1a over canonical JSON, as 16 hex digits: stable across processes and releases.
fn hash(value: &Value) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in canonical(value).bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// JSON with every object's keys sorted, whatever order the map keeps.
fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&map[k])))
                .collect();
            format!("{{{}}}", items.join(","))
        }
        Value::Array(items) => format!("[{}]", items.iter().map(canonical).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

/// The fingerprint of what a request would make: one hash per part.
fn fingerprint(environment: &Environment, request: &AcquireRequest) -> JsonMap {
    let network = serde_json::json!({
        "environment": serde_json::to_value(&environment.network).unwrap_or(Value::Null),
        "lease": serde_json::to_value(&request.network).unwrap_or(Value::Null),
    });
    let mut parts = JsonMap::new();
    parts.insert("config".into(), hash(&Value::Object(environment.config.clone())).into());
    parts.insert("driver".into(), hash(&Value::String(environment.driver.clone())).into());
    parts.insert(
        "template".into(),
        hash(&serde_json::to_value(&request.template).unwrap_or(Value::Null)).into(),
    );
    parts.insert("network".into(), hash(&network).into());
    parts
}

/// The parts whose hashes differ, in a fixed order (`config, driver, template, network`).
fn changed_parts(old: Option<&Value>, new: &JsonMap) -> Vec<&'static str> {
    ["config", "driver", "template", "network"]
        .into_iter()
        .filter(|part| old.and_then(|o| o.get(*part)) != new.get(*part))
        .collect()
}

impl EnvironmentRuntime {
    /// A scoped acquire under the scope's turn: resume, replace or create.
    pub(super) async fn acquire_in_scope(&self, mut request: AcquireRequest) -> Result<Lease, RuntimeError> {
        let scope = request.scope.clone().unwrap_or_default();
        let _turn = self.store.lock_scope(&scope).await?;
        let environment = self.known_environment(&request.environment_id).await?;
        let print = fingerprint(&environment, &request);
        let filter = LeaseFilter {
            environment_id: Some(request.environment_id.clone()),
            ..Default::default()
        };
        let mut found: Vec<Lease> = self
            .leases(&filter)
            .await?
            .into_iter()
            .filter(|l| {
                l.company_id == request.company_id
                    && l.metadata.get(SCOPE_KEY).and_then(Value::as_str) == Some(scope.as_str())
                    && reusable(l)
            })
            .collect();
        // Newest first.
        found.reverse();
        let mut reason: Option<String> = None;
        for lease in found {
            let changed = changed_parts(lease.metadata.get(FINGERPRINT_KEY), &print);
            if !changed.is_empty() {
                self.end_for_replacement(&lease).await?;
                reason.get_or_insert_with(|| format!("the fingerprint changed: {}", changed.join(", ")));
                continue;
            }
            let resumed = if lease.status == LeaseStatus::Active {
                Ok(lease)
            } else {
                self.resume_lease(&lease.id).await
            };
            match resumed {
                Ok(mut lease) => {
                    lease.last_used_at = Timestamp::now();
                    lease
                        .metadata
                        .insert(SCOPE_OUTCOME_KEY.into(), ScopeOutcome::Resumed.to_value());
                    self.store.put_lease(&lease).await?;
                    return Ok(lease);
                }
                Err(RuntimeError::LeaseGone { .. } | RuntimeError::LeaseExpired { .. }) => {
                    reason.get_or_insert_with(|| "its provider resource is gone".to_owned());
                }
                Err(error) => return Err(error),
            }
        }
        let outcome = match reason {
            Some(reason) => ScopeOutcome::Replaced { reason },
            None => ScopeOutcome::Created,
        };
        request.metadata.insert(FINGERPRINT_KEY.into(), Value::Object(print));
        request.metadata.insert(SCOPE_OUTCOME_KEY.into(), outcome.to_value());
        self.acquire_unscoped(request).await
    }

    /// Ends a lease of the scope whose fingerprint no longer matches: destroyed where the
    /// driver can, else released.
    async fn end_for_replacement(&self, lease: &Lease) -> Result<(), RuntimeError> {
        match self.destroy_lease(&lease.id).await {
            Ok(_) => Ok(()),
            Err(RuntimeError::Unsupported { .. }) => {
                self.release_lease(&lease.id, LeaseStatus::Released).await.map(drop)
            }
            Err(error) => Err(error),
        }
    }
}

/// A lease a scoped acquire may hand back: active, or kept for a resume.
fn reusable(lease: &Lease) -> bool {
    match lease.status {
        LeaseStatus::Active => true,
        LeaseStatus::Released => lease.lease_policy == LeasePolicy::ReuseByEnvironment,
        LeaseStatus::Retained => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_scope_is_refused_with_its_text() {
        let text = |s: Option<&str>, r| check_scope(s, r).unwrap_err().to_string();
        assert_eq!(
            text(None, Reuse::Scope),
            "Invalid input: reuse = \"scope\" needs a scope"
        );
        let bad = "Invalid input: a lease scope must be 1 to 256 bytes without control characters";
        assert_eq!(text(Some(""), Reuse::Never), bad);
        assert_eq!(text(Some(&"x".repeat(257)), Reuse::Scope), bad);
        assert_eq!(text(Some("a\nb"), Reuse::Scope), bad);
        assert!(check_scope(Some(&"x".repeat(256)), Reuse::Scope).is_ok());
        assert!(check_scope(None, Reuse::Never).is_ok());
    }

    #[test]
    fn the_fingerprint_ignores_key_order_and_names_what_changed() {
        let a: Value = serde_json::json!({"b": 1, "a": [1, {"y": 2, "x": 1}]});
        let b: Value = serde_json::from_str(r#"{"a": [1, {"x": 1, "y": 2}], "b": 1}"#).unwrap();
        assert_eq!(hash(&a), hash(&b));
        assert_ne!(hash(&a), hash(&serde_json::json!({"b": 2, "a": [1, {"y": 2, "x": 1}]})));
        let env = Environment::new("e", "E", "local");
        let request = AcquireRequest::new("e", "acme");
        let old = fingerprint(&env, &request);
        let mut templated = request.clone();
        templated.template = Some("tpl-1".into());
        let new = fingerprint(
            &env.clone().with_config(JsonMap::from_iter([("k".into(), 1.into())])),
            &templated,
        );
        assert_eq!(
            changed_parts(Some(&Value::Object(old.clone())), &new),
            ["config", "template"]
        );
        assert!(changed_parts(Some(&Value::Object(old.clone())), &old).is_empty());
    }
}

/// Lease metadata: the lease's labels, an object of strings (`envrt lease acquire
/// --label K=V`).
pub const LABELS_KEY: &str = "labels";

/// Which leases [`EnvironmentRuntime::release_matching`] ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseSelector {
    /// The leases acquired under this owner scope.
    Scope(String),
    /// The leases whose label `key` is `value`.
    Label {
        /// The label's name.
        key: String,
        /// Its value.
        value: String,
    },
}

impl LeaseSelector {
    /// Whether `lease` is selected.
    pub fn matches(&self, lease: &Lease) -> bool {
        match self {
            LeaseSelector::Scope(scope) => lease.metadata.get(SCOPE_KEY).and_then(Value::as_str) == Some(scope),
            LeaseSelector::Label { key, value } => {
                lease
                    .metadata
                    .get(LABELS_KEY)
                    .and_then(|labels| labels.get(key))
                    .and_then(Value::as_str)
                    == Some(value)
            }
        }
    }
}

impl EnvironmentRuntime {
    /// Releases, with `status`, every active or pending-clean-up lease of tenant
    /// `company_id` that `selector` selects, one at a time and each in isolation (as
    /// [`release_leases`](Self::release_leases) does for a run). Idempotent: a second call
    /// finds nothing left to end. Another tenant's leases are never touched, and a runtime
    /// bound to another tenant refuses first.
    pub async fn release_matching(
        &self,
        company_id: &str,
        selector: &LeaseSelector,
        status: LeaseStatus,
    ) -> Result<super::ReleaseReport, RuntimeError> {
        self.check_tenant(company_id)?;
        let filter = LeaseFilter {
            statuses: vec![LeaseStatus::Active, LeaseStatus::PendingCleanup],
            ..Default::default()
        };
        let mut report = super::ReleaseReport::default();
        for lease in self.leases(&filter).await? {
            if lease.company_id != company_id || !selector.matches(&lease) {
                continue;
            }
            let outcome = self.release_lease(&lease.id, status).await;
            report.record(lease.id, outcome);
        }
        Ok(report)
    }
}
