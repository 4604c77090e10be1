//! The `EnvironmentRuntime` facade (contract section 3): the registry of drivers by key,
//! the lease store, and the way every lease operation finds its driver. The operations
//! themselves live in [`lifecycle`] (acquire, resume, release, destroy) and [`operations`]
//! (realize, execute, sync, duplex, capabilities); both pass the one [`gate`]. Warm pools
//! are in [`pool`]; reconciliation with the drivers' inventories in [`recovery`]; lease
//! templates in [`templates`].

mod ending;
mod expose;
mod extend;
mod fork;
mod gate;
mod idle;
mod ingress;
mod lifecycle;
mod network;
mod operations;
mod pause;
mod pool;
mod pool_drop;
mod processes;
mod reader;
mod ready;
mod recovery;
mod scope;
mod templates;
mod tenancy;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use tracing::Instrument;

use crate::driver::{EnvironmentDriver, LeaseContext};
use crate::error::RuntimeError;
use crate::model::{Environment, Lease, resolve_driver_key};
use crate::store::{LeaseFilter, LeaseStore, MemoryStore};

pub use expose::{
    EndpointAddress, ExposeAt, ExposedEndpoint, MAX_CONNECTIONS as EXPOSE_MAX_CONNECTIONS,
    MAX_ENDPOINTS as EXPOSE_MAX_ENDPOINTS, TOKEN_WAIT as EXPOSE_TOKEN_WAIT,
};
pub use idle::{IDLE_TIMEOUT_KEY, ON_IDLE_KEY, idle_timeout};
pub use lifecycle::{AcquireRequest, LeaseFailure, ReleaseReport, SOURCE_TEMPLATE_KEY, TERMINATION_RECEIPT_KEY};
pub use pause::{PAUSED_KEY, is_paused, paused_at};
pub use pool::{POOLED_KEY, PoolSpec, PoolStatus};
pub use processes::ProcessOutputStream;
pub use ready::{MAX_READY_TIMEOUT, MAX_READY_WORDS};
pub use recovery::{DriverItem, RECONCILE_SETTLE, ReconcileReport};
pub use scope::{
    FINGERPRINT_KEY, LABELS_KEY, LeaseSelector, MAX_SCOPE_BYTES, Reuse, SCOPE_KEY, SCOPE_OUTCOME_KEY, ScopeOutcome,
};

/// The facade: a registry of drivers by key plus a lease store. Every operation resolves
/// the lease's driver key, then checks in the contract's order before calling the driver.
///
/// Dropping it stops its pools, best-effort (see `pool_drop`): their ready leases are
/// released before the drop returns on a multi-thread tokio runtime, the release is only
/// spawned on a current-thread one, and nothing is released outside a tokio runtime.
/// Leases already handed out are never released by a drop.
pub struct EnvironmentRuntime {
    drivers: RwLock<HashMap<String, Arc<dyn EnvironmentDriver>>>,
    store: Arc<dyn LeaseStore>,
    pools: pool::Pools,
    tenant: Option<String>,
    exposed: expose::Exposed,
    ending: ending::Ending,
}

impl Default for EnvironmentRuntime {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for EnvironmentRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvironmentRuntime")
            .field("drivers", &self.driver_keys())
            .finish_non_exhaustive()
    }
}

/// A lease resolved to its driver.
struct Resolved {
    key: String,
    driver: Arc<dyn EnvironmentDriver>,
    context: LeaseContext,
    /// The store the lease came from (the gate records a pause the idle timeout made).
    store: Arc<dyn LeaseStore>,
}

impl EnvironmentRuntime {
    /// A runtime with no drivers and an in-memory store.
    pub fn new() -> Self {
        Self::with_store(Arc::new(MemoryStore::new()))
    }

    /// A runtime with no drivers over `store`.
    pub fn with_store(store: Arc<dyn LeaseStore>) -> Self {
        EnvironmentRuntime {
            drivers: RwLock::new(HashMap::new()),
            store,
            pools: pool::Pools::default(),
            exposed: expose::Exposed::default(),
            ending: ending::Ending::default(),
            tenant: None,
        }
    }

    /// The lease store.
    pub fn store(&self) -> &Arc<dyn LeaseStore> {
        &self.store
    }

    /// Registers a driver under its key; a later registration replaces an earlier one,
    /// which is returned.
    pub fn register_driver(&self, driver: Arc<dyn EnvironmentDriver>) -> Option<Arc<dyn EnvironmentDriver>> {
        let key = driver.key().to_owned();
        self.drivers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, driver)
    }

    /// The driver registered under `key`.
    pub fn driver(&self, key: &str) -> Option<Arc<dyn EnvironmentDriver>> {
        self.drivers.read().unwrap_or_else(|e| e.into_inner()).get(key).cloned()
    }

    /// The registered keys, sorted.
    pub fn driver_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .drivers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    /// Adds or replaces an environment. When its driver is registered, the driver checks
    /// the configuration first and an unknown key is refused (nothing is stored).
    pub async fn put_environment(&self, environment: Environment) -> Result<(), RuntimeError> {
        ready::check_readiness(environment.readiness.as_ref())?;
        if let Some(driver) = self.driver(&environment.driver) {
            driver.check_environment_config(&environment.config).await?;
            network::environment_level(&environment, driver.as_ref())?;
        }
        Ok(self.store.put_environment(&environment).await?)
    }

    /// The environment with this id.
    pub async fn environment(&self, id: &str) -> Result<Option<Environment>, RuntimeError> {
        Ok(self.store.get_environment(id).await?)
    }

    /// The lease with this id (`None` when it belongs to another tenant than the
    /// runtime's, see [`for_tenant`](Self::for_tenant)).
    pub async fn lease(&self, id: &str) -> Result<Option<Lease>, RuntimeError> {
        Ok(self.store.get_lease(id).await?.filter(|l| self.visible(l)))
    }

    /// Leases passing `filter` (of the runtime's tenant only, when it has one).
    pub async fn leases(&self, filter: &LeaseFilter) -> Result<Vec<Lease>, RuntimeError> {
        let mut leases = self.store.list_leases(filter).await?;
        leases.retain(|l| self.visible(l));
        Ok(leases)
    }

    fn registered(&self, key: &str) -> Result<Arc<dyn EnvironmentDriver>, RuntimeError> {
        self.driver(key)
            .ok_or_else(|| RuntimeError::DriverNotRegistered { key: key.to_owned() })
    }

    /// The environment with this id, or `Environment "{id}" was not found.`
    async fn known_environment(&self, id: &str) -> Result<Environment, RuntimeError> {
        self.store
            .get_environment(id)
            .await?
            .ok_or_else(|| RuntimeError::EnvironmentNotFound { id: id.to_owned() })
    }

    async fn load(&self, lease_id: &str) -> Result<LeaseContext, RuntimeError> {
        let lease = self
            .store
            .get_lease(lease_id)
            .await?
            .filter(|l| self.visible(l))
            .ok_or_else(|| RuntimeError::LeaseNotFound {
                id: lease_id.to_owned(),
            })?;
        let environment = match &lease.environment_id {
            Some(id) => self.store.get_environment(id).await?,
            None => None,
        };
        Ok(LeaseContext { lease, environment })
    }

    async fn resolve(&self, lease_id: &str) -> Result<Resolved, RuntimeError> {
        let context = self.load(lease_id).await?;
        let key = resolve_driver_key(&context.lease, context.environment.as_ref()).to_owned();
        tracing::Span::current().record("driver", key.as_str());
        let driver = self.registered(&key)?;
        Ok(Resolved {
            key,
            driver,
            context,
            store: self.store.clone(),
        })
    }
}

impl EnvironmentRuntime {
    /// Runs a facade operation inside a span carrying the operation, lease id and driver
    /// key, and records its outcome and duration. Payloads and env values are never
    /// recorded. A driver's "resource gone" on a lease that ended meanwhile (a release
    /// racing the operation) is that lease not being active, not the lease lost.
    async fn traced<T>(
        &self,
        operation: &'static str,
        lease_id: &str,
        body: impl Future<Output = Result<T, RuntimeError>>,
    ) -> Result<T, RuntimeError> {
        let span = tracing::debug_span!("envrt", operation, lease_id, driver = tracing::field::Empty,);
        let started = Instant::now();
        let mut result = body.instrument(span.clone()).await;
        if let Err(error) = result {
            result = Err(self.lost(lease_id, error).await);
        }
        let duration_us = started.elapsed().as_micros() as u64;
        span.in_scope(|| match &result {
            Ok(_) => tracing::debug!(outcome = "ok", duration_us),
            Err(error) => tracing::debug!(outcome = "error", duration_us, %error),
        });
        result
    }

    /// What a driver error met on lease `lease_id` after the facade call that opened the
    /// stream returned (a duplex channel's read, write or wait) says: a `ResourceGone` is
    /// the lease lost, as for a facade call; any other error is kept.
    pub async fn on_lease_error(&self, lease_id: &str, error: RuntimeError) -> RuntimeError {
        self.lost(lease_id, error).await
    }

    /// A driver's `ResourceGone` on an operation on an existing lease says the lease's
    /// backend died behind envrt's back: the facade reports the lease itself as lost
    /// (contract section 3), naming what to do, unless the store says the lease has ended
    /// since (then it is not active). An acquire (no lease id yet) keeps the driver's error.
    async fn lost(&self, lease_id: &str, error: RuntimeError) -> RuntimeError {
        let RuntimeError::Driver(crate::DriverError::ResourceGone { id }) = error else {
            return error;
        };
        if lease_id.is_empty() {
            return RuntimeError::Driver(crate::DriverError::ResourceGone { id });
        }
        // A release or destroy of this lease in flight removed the resource before the
        // store says so: wait for it to finish, then the store tells.
        self.ending.settled(lease_id).await;
        if let Ok(Some(lease)) = self.store.get_lease(lease_id).await
            && lease.status != crate::LeaseStatus::Active
        {
            return RuntimeError::LeaseNotActive {
                id: lease.id,
                status: lease.status,
            };
        }
        RuntimeError::LeaseLost {
            id: lease_id.to_owned(),
            resource: id,
        }
    }
}
