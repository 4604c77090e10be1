//! Where the runtime keeps environments and lease records. [`MemoryStore`] is the
//! default; durable stores implement the same trait.

use std::collections::BTreeMap;

use async_trait::async_trait;
use tokio::sync::RwLock;

use crate::error::StoreError;
use crate::model::{Environment, Lease, LeaseStatus};

/// Which leases to list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseFilter {
    /// Only leases of this run.
    pub run_id: Option<String>,
    /// Only leases of this environment.
    pub environment_id: Option<String>,
    /// Only leases with one of these statuses (any when empty).
    pub statuses: Vec<LeaseStatus>,
}

impl LeaseFilter {
    /// Whether `lease` passes the filter.
    pub fn matches(&self, lease: &Lease) -> bool {
        self.run_id.as_ref().is_none_or(|r| lease.run_id.as_ref() == Some(r))
            && self
                .environment_id
                .as_ref()
                .is_none_or(|e| lease.environment_id.as_ref() == Some(e))
            && (self.statuses.is_empty() || self.statuses.contains(&lease.status))
    }
}

/// Storage for environments and leases. Implementations MUST make `put_lease` atomic per
/// record and MUST NOT lose a record written concurrently by another writer.
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// Inserts or replaces an environment.
    async fn put_environment(&self, environment: &Environment) -> Result<(), StoreError>;
    /// The environment with this id.
    async fn get_environment(&self, id: &str) -> Result<Option<Environment>, StoreError>;
    /// Every environment, by id.
    async fn list_environments(&self) -> Result<Vec<Environment>, StoreError>;
    /// Inserts or replaces a lease record.
    async fn put_lease(&self, lease: &Lease) -> Result<(), StoreError>;
    /// The lease with this id.
    async fn get_lease(&self, id: &str) -> Result<Option<Lease>, StoreError>;
    /// Leases passing `filter`, ordered by acquisition time then id.
    async fn list_leases(&self, filter: &LeaseFilter) -> Result<Vec<Lease>, StoreError>;
    /// Takes the turn of owner scope `scope`, held until the returned guard is dropped:
    /// an acquire with scope reuse looks for the scope's lease and makes one under it, so
    /// that concurrent acquires of one scope get one lease. MUST exclude every other
    /// holder of the same scope using this store, in this process (another runtime on the
    /// same store included) and, for a durable store, in every other process that opens
    /// it. Holders of other scopes MAY be excluded too (a coarser lock is correct, only
    /// slower).
    async fn lock_scope(&self, scope: &str) -> Result<ScopeGuard, StoreError>;
}

/// The turn of one owner scope ([`LeaseStore::lock_scope`]); released when dropped.
pub struct ScopeGuard {
    _held: Box<dyn Send + Sync>,
}

impl ScopeGuard {
    /// A guard that holds `inner` (a mutex guard, a locked file) until it is dropped.
    pub fn new(inner: impl Send + Sync + 'static) -> ScopeGuard {
        ScopeGuard { _held: Box::new(inner) }
    }
}

impl std::fmt::Debug for ScopeGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScopeGuard")
    }
}

/// An in-memory [`LeaseStore`].
#[derive(Debug, Default)]
pub struct MemoryStore {
    environments: RwLock<BTreeMap<String, Environment>>,
    leases: RwLock<BTreeMap<String, Lease>>,
    scopes: std::sync::Mutex<BTreeMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn put_environment(&self, environment: &Environment) -> Result<(), StoreError> {
        self.environments
            .write()
            .await
            .insert(environment.id.clone(), environment.clone());
        Ok(())
    }

    async fn get_environment(&self, id: &str) -> Result<Option<Environment>, StoreError> {
        Ok(self.environments.read().await.get(id).cloned())
    }

    async fn list_environments(&self) -> Result<Vec<Environment>, StoreError> {
        Ok(self.environments.read().await.values().cloned().collect())
    }

    async fn put_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        self.leases.write().await.insert(lease.id.clone(), lease.clone());
        Ok(())
    }

    async fn get_lease(&self, id: &str) -> Result<Option<Lease>, StoreError> {
        Ok(self.leases.read().await.get(id).cloned())
    }

    async fn list_leases(&self, filter: &LeaseFilter) -> Result<Vec<Lease>, StoreError> {
        let mut out: Vec<Lease> = self
            .leases
            .read()
            .await
            .values()
            .filter(|l| filter.matches(l))
            .cloned()
            .collect();
        out.sort_by(|a, b| (a.acquired_at, &a.id).cmp(&(b.acquired_at, &b.id)));
        Ok(out)
    }

    async fn lock_scope(&self, scope: &str) -> Result<ScopeGuard, StoreError> {
        let lock = {
            let mut scopes = self.scopes.lock().unwrap_or_else(|e| e.into_inner());
            // Scopes nobody holds or waits for are forgotten, so the map stays as small as
            // the number of scopes in use.
            scopes.retain(|_, lock| std::sync::Arc::strong_count(lock) > 1);
            scopes.entry(scope.to_owned()).or_default().clone()
        };
        Ok(ScopeGuard::new(lock.lock_owned().await))
    }
}
