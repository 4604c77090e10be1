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
}

/// An in-memory [`LeaseStore`].
#[derive(Debug, Default)]
pub struct MemoryStore {
    environments: RwLock<BTreeMap<String, Environment>>,
    leases: RwLock<BTreeMap<String, Lease>>,
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
}
