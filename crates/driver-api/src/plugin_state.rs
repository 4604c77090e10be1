//! Plugin state: the key/value records a plugin worker keeps through its host
//! (`ctx.state` in the Paperclip SDK), scoped as the SDK scopes them and kept in envrt's
//! store so they outlive a worker restart and a host restart.
//!
//! The table's trait lives in the driver API because the plugin host (a driver) keeps a
//! worker's state through it; the runtime (envrt-runtime-core) re-exports it at its old
//! path, and envrt-store-sqlite implements it.

use std::collections::BTreeMap;
use std::sync::RwLock;

use async_trait::async_trait;

use crate::StoreError;

/// Where one state record lives: the plugin, then the SDK's scope (`scopeKind`,
/// `scopeId`, `namespace`, `stateKey`; a missing `scopeId` is the empty string and a
/// missing `namespace` is `default`, as the SDK's own harness keys them).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StateKey {
    /// The plugin's manifest id.
    pub plugin: String,
    /// The scope kind (`instance`, `company`, `environment`, ...).
    pub scope_kind: String,
    /// The scope's id, or `""`.
    pub scope_id: String,
    /// The namespace (`default` when the worker gives none).
    pub namespace: String,
    /// The key inside the scope.
    pub state_key: String,
}

/// A durable plugin state table. Values are JSON text.
#[async_trait]
pub trait PluginStateStore: Send + Sync + 'static {
    /// The value at `key`, if any.
    async fn get_state(&self, key: &StateKey) -> Result<Option<String>, StoreError>;
    /// Inserts or replaces the value at `key`.
    async fn set_state(&self, key: &StateKey, value: &str) -> Result<(), StoreError>;
    /// Removes the value at `key`; removing a missing key is not an error.
    async fn delete_state(&self, key: &StateKey) -> Result<(), StoreError>;
    /// How many records `plugin` holds.
    async fn count_state(&self, plugin: &str) -> Result<u64, StoreError>;
}

/// An in-memory [`PluginStateStore`] (lost with the process).
#[derive(Debug, Default)]
pub struct MemoryStateStore {
    records: RwLock<BTreeMap<StateKey, String>>,
}

#[async_trait]
impl PluginStateStore for MemoryStateStore {
    async fn get_state(&self, key: &StateKey) -> Result<Option<String>, StoreError> {
        Ok(self.records.read().unwrap_or_else(|e| e.into_inner()).get(key).cloned())
    }

    async fn set_state(&self, key: &StateKey, value: &str) -> Result<(), StoreError> {
        self.records
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone(), value.to_owned());
        Ok(())
    }

    async fn delete_state(&self, key: &StateKey) -> Result<(), StoreError> {
        self.records.write().unwrap_or_else(|e| e.into_inner()).remove(key);
        Ok(())
    }

    async fn count_state(&self, plugin: &str) -> Result<u64, StoreError> {
        let records = self.records.read().unwrap_or_else(|e| e.into_inner());
        Ok(records.keys().filter(|k| k.plugin == plugin).count() as u64)
    }
}
