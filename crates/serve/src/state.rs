//! What every request shares: the runtime, the token store, one tenant-bound runtime per
//! tenant, the limits, and the stop that ends live output streams.
//!
//! Each tenant gets its own [`EnvironmentRuntime::for_tenant`] over the same store and the
//! same driver instances, so the facade's own tenancy answers another tenant's lease
//! exactly as an unknown one (`Lease "{id}" was not found.`). The runtime the service was
//! started with keeps the configured warm pools; a token of the configured tenant uses it
//! (and so its pools).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use envrt::sqlite::SqliteStore;
use envrt::{EnvironmentRuntime, Lease, LeaseFilter, LeaseStatus};
use futures::future::join_all;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;

/// Bounds on what one request and one tenant may take.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The largest JSON request body, bytes.
    pub max_json_bytes: usize,
    /// The largest tar body of a sync in, bytes.
    pub max_upload_bytes: usize,
    /// How many active leases one tenant may hold at once.
    pub max_live_leases: usize,
    /// How many running processes one tenant may have at once, over all its active leases.
    pub max_live_processes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_json_bytes: 1024 * 1024,
            max_upload_bytes: 1024 * 1024 * 1024,
            max_live_leases: 64,
            max_live_processes: 256,
        }
    }
}

/// Where audit lines go: one JSON object per mutating call (`who`, `tenant`, `what`,
/// `lease`, `outcome`).
pub type AuditSink = Arc<dyn Fn(&serde_json::Value) + Send + Sync>;

/// The service's shared state.
pub struct Service {
    base: Arc<EnvironmentRuntime>,
    audit: Option<AuditSink>,
    tokens: SqliteStore,
    tenants: Mutex<HashMap<String, Arc<EnvironmentRuntime>>>,
    stopping: CancellationToken,
    idle_defaults: OnceLock<BTreeMap<String, Duration>>,
    /// The limits.
    pub limits: Limits,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Service {
    /// A service over `base` (its drivers, store and pools) with tokens in `tokens`.
    pub fn new(base: Arc<EnvironmentRuntime>, tokens: SqliteStore, limits: Limits) -> Arc<Self> {
        Self::with_audit(base, tokens, limits, None)
    }

    /// Like [`new`](Self::new), also writing each audit line to `audit`.
    pub fn with_audit(
        base: Arc<EnvironmentRuntime>,
        tokens: SqliteStore,
        limits: Limits,
        audit: Option<AuditSink>,
    ) -> Arc<Self> {
        Arc::new(Service {
            base,
            audit,
            tokens,
            tenants: Mutex::new(HashMap::new()),
            stopping: CancellationToken::new(),
            idle_defaults: OnceLock::new(),
            limits,
        })
    }

    /// Writes one audit line to the sink, if any.
    pub(crate) fn audit_line(&self, line: &serde_json::Value) {
        if let Some(sink) = &self.audit {
            sink(line);
        }
    }

    /// Says the service is stopping: every live process output stream ends at once with
    /// its last line, `{"error": {"kind": "service_stopping", ...}}`, and every wait in
    /// flight answers `running`, as at its timeout, so neither holds the drain (call it
    /// when the stop signal comes, before the drain).
    pub fn stop(&self) {
        self.stopping.cancel();
    }

    /// Cancelled once [`stop`](Self::stop) was called.
    pub(crate) fn stopping(&self) -> CancellationToken {
        self.stopping.clone()
    }

    /// The token store.
    pub fn tokens(&self) -> &SqliteStore {
        &self.tokens
    }

    /// The runtime bound to `tenant`.
    pub fn runtime_for(&self, tenant: &str) -> Arc<EnvironmentRuntime> {
        if self.base.tenant() == Some(tenant) {
            return Arc::clone(&self.base);
        }
        let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        let runtime = tenants.entry(tenant.to_owned()).or_insert_with(|| {
            let runtime = EnvironmentRuntime::with_store(Arc::clone(self.base.store())).for_tenant(tenant);
            for key in self.base.driver_keys() {
                if let Some(driver) = self.base.driver(&key) {
                    runtime.register_driver(driver);
                }
            }
            Arc::new(runtime)
        });
        Arc::clone(runtime)
    }

    /// Refuses a new lease when `tenant` already holds [`Limits::max_live_leases`] active
    /// ones: `Tenant "{tenant}" already holds {n} active leases, the most it may.` (429
    /// `lease_limit`).
    pub async fn check_lease_limit(&self, tenant: &str, runtime: &EnvironmentRuntime) -> Result<(), ApiError> {
        self.check_lease_room(tenant, runtime, 1).await
    }

    /// Refuses `count` new leases (a fork's copies) that would take `tenant` past
    /// [`Limits::max_live_leases`]: for one lease as [`check_lease_limit`](Self::check_lease_limit),
    /// for more `Tenant "{tenant}" holds {n} active leases; {count} more would pass the
    /// most it may, {max}.` (429 `lease_limit`).
    pub async fn check_lease_room(
        &self,
        tenant: &str,
        runtime: &EnvironmentRuntime,
        count: usize,
    ) -> Result<(), ApiError> {
        let live = active_leases(runtime).await?.len();
        let max = self.limits.max_live_leases;
        if count <= 1 && live >= max {
            return Err(too_many(
                "lease_limit",
                format!("Tenant \"{tenant}\" already holds {live} active leases, the most it may."),
            ));
        }
        if live.saturating_add(count) > max {
            return Err(too_many(
                "lease_limit",
                format!(
                    "Tenant \"{tenant}\" holds {live} active leases; {count} more would pass the most it may, {max}."
                ),
            ));
        }
        Ok(())
    }

    /// The environments' default idle timeouts (`idle_timeout` in `envrt.toml`), armed on
    /// a lease acquired without `idleTimeoutMs`.
    pub fn set_idle_defaults(&self, defaults: BTreeMap<String, Duration>) {
        let _ = self.idle_defaults.set(defaults);
    }

    /// The default idle timeout of `environment`, if `envrt.toml` gives one.
    pub(crate) fn idle_default(&self, environment: &str) -> Option<Duration> {
        self.idle_defaults.get()?.get(environment).copied()
    }

    /// Refuses a spawn when `tenant` already has [`Limits::max_live_processes`] running
    /// processes over its active leases: `Tenant "{tenant}" already has {n} running
    /// processes, the most it may.` (429 `process_limit`). The count asks each active
    /// lease's supervisor at once (a lease that spawned nothing has none and is not asked
    /// past its driver; one whose driver has no process sessions counts nothing).
    pub async fn check_process_limit(&self, tenant: &str, runtime: &EnvironmentRuntime) -> Result<(), ApiError> {
        let leases = active_leases(runtime).await?;
        let counts = join_all(leases.iter().map(|lease| async {
            runtime
                .processes(&lease.id)
                .await
                .map_or(0, |list| list.iter().filter(|p| p.status.is_running()).count())
        }))
        .await;
        let live: usize = counts.into_iter().sum();
        if live >= self.limits.max_live_processes {
            return Err(too_many(
                "process_limit",
                format!("Tenant \"{tenant}\" already has {live} running processes, the most it may."),
            ));
        }
        Ok(())
    }
}

/// The active leases the tenant-bound `runtime` sees.
async fn active_leases(runtime: &EnvironmentRuntime) -> Result<Vec<Lease>, ApiError> {
    let filter = LeaseFilter {
        statuses: vec![LeaseStatus::Active],
        ..LeaseFilter::default()
    };
    Ok(runtime.leases(&filter).await?)
}

/// A 429 refusal of a per-tenant limit.
fn too_many(kind: &str, message: String) -> ApiError {
    ApiError::new(axum::http::StatusCode::TOO_MANY_REQUESTS, kind, message)
}
