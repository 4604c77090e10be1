//! What every request shares: the runtime, the token store, one tenant-bound runtime per
//! tenant, and the limits.
//!
//! Each tenant gets its own [`EnvironmentRuntime::for_tenant`] over the same store and the
//! same driver instances, so the facade's own tenancy answers another tenant's lease
//! exactly as an unknown one (`Lease "{id}" was not found.`). The runtime the service was
//! started with keeps the configured warm pools; a token of the configured tenant uses it
//! (and so its pools).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use envrt::sqlite::SqliteStore;
use envrt::{EnvironmentRuntime, LeaseFilter, LeaseStatus};

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
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_json_bytes: 1024 * 1024,
            max_upload_bytes: 1024 * 1024 * 1024,
            max_live_leases: 64,
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
            limits,
        })
    }

    /// Writes one audit line to the sink, if any.
    pub(crate) fn audit_line(&self, line: &serde_json::Value) {
        if let Some(sink) = &self.audit {
            sink(line);
        }
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
        let filter = LeaseFilter {
            statuses: vec![LeaseStatus::Active],
            ..LeaseFilter::default()
        };
        let live = runtime.leases(&filter).await.map_err(ApiError::from)?.len();
        if live >= self.limits.max_live_leases {
            return Err(ApiError::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                "lease_limit",
                format!("Tenant \"{tenant}\" already holds {live} active leases, the most it may."),
            ));
        }
        Ok(())
    }
}
