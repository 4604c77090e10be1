//! The plugin state table: [`PluginStateStore`] on the same database as the leases, so a
//! plugin worker's `ctx.state` outlives a worker restart and a host restart. The table is
//! additive (created when missing on open), so the schema version is unchanged and an
//! older envrt opening the file simply ignores it.

use async_trait::async_trait;
use envrt_runtime_core::{PluginStateStore, StateKey, StoreError};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::SqliteStore;

/// Created on every open when missing.
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS plugin_state (
    plugin     TEXT NOT NULL,
    scope_kind TEXT NOT NULL,
    scope_id   TEXT NOT NULL,
    namespace  TEXT NOT NULL,
    state_key  TEXT NOT NULL,
    value      TEXT NOT NULL,
    PRIMARY KEY (plugin, scope_kind, scope_id, namespace, state_key)
);
";

fn err(message: String, source: rusqlite::Error) -> StoreError {
    StoreError {
        message: format!("{message}: {source}"),
        source: Some(Box::new(source)),
    }
}

fn shown(key: &StateKey) -> String {
    format!(
        "plugin state \"{}\" of plugin \"{}\" ({}/{}/{})",
        key.state_key, key.plugin, key.scope_kind, key.scope_id, key.namespace
    )
}

fn get(connection: &mut Connection, key: &StateKey) -> Result<Option<String>, StoreError> {
    connection
        .query_row(
            "SELECT value FROM plugin_state WHERE plugin = ?1 AND scope_kind = ?2 AND scope_id = ?3
             AND namespace = ?4 AND state_key = ?5",
            params![key.plugin, key.scope_kind, key.scope_id, key.namespace, key.state_key],
            |row| row.get(0),
        )
        .optional()
        .map_err(|e| err(format!("cannot read {}", shown(key)), e))
}

fn write(connection: &mut Connection, key: &StateKey, value: Option<&str>) -> Result<(), StoreError> {
    let context = || format!("cannot write {}", shown(key));
    let tx = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| err(context(), e))?;
    let done = match value {
        Some(value) => tx.execute(
            "INSERT INTO plugin_state (plugin, scope_kind, scope_id, namespace, state_key, value)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (plugin, scope_kind, scope_id, namespace, state_key) DO UPDATE SET value = excluded.value",
            params![
                key.plugin,
                key.scope_kind,
                key.scope_id,
                key.namespace,
                key.state_key,
                value
            ],
        ),
        None => tx.execute(
            "DELETE FROM plugin_state WHERE plugin = ?1 AND scope_kind = ?2 AND scope_id = ?3
             AND namespace = ?4 AND state_key = ?5",
            params![key.plugin, key.scope_kind, key.scope_id, key.namespace, key.state_key],
        ),
    };
    done.map_err(|e| err(context(), e))?;
    tx.commit().map_err(|e| err(context(), e))
}

fn count(connection: &mut Connection, plugin: &str) -> Result<u64, StoreError> {
    connection
        .query_row("SELECT COUNT(*) FROM plugin_state WHERE plugin = ?1", [plugin], |row| {
            row.get::<_, i64>(0)
        })
        .map(|n| n.max(0) as u64)
        .map_err(|e| err(format!("cannot count the plugin state of plugin \"{plugin}\""), e))
}

#[async_trait]
impl PluginStateStore for SqliteStore {
    async fn get_state(&self, key: &StateKey) -> Result<Option<String>, StoreError> {
        let key = key.clone();
        self.with(move |c| get(c, &key)).await
    }

    async fn set_state(&self, key: &StateKey, value: &str) -> Result<(), StoreError> {
        let (key, value) = (key.clone(), value.to_owned());
        self.with(move |c| write(c, &key, Some(&value))).await
    }

    async fn delete_state(&self, key: &StateKey) -> Result<(), StoreError> {
        let key = key.clone();
        self.with(move |c| write(c, &key, None)).await
    }

    async fn count_state(&self, plugin: &str) -> Result<u64, StoreError> {
        let plugin = plugin.to_owned();
        self.with(move |c| count(c, &plugin)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(plugin: &str, state_key: &str) -> StateKey {
        StateKey {
            plugin: plugin.into(),
            scope_kind: "instance".into(),
            scope_id: String::new(),
            namespace: "default".into(),
            state_key: state_key.into(),
        }
    }

    #[tokio::test]
    async fn state_survives_reopening_and_is_scoped_by_plugin() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leases.db");
        {
            let store = SqliteStore::open(&path).await.unwrap();
            store.set_state(&key("a", "k"), "{\"n\":1}").await.unwrap();
            store.set_state(&key("a", "k"), "{\"n\":2}").await.unwrap();
            store.set_state(&key("b", "k"), "\"other\"").await.unwrap();
        }
        let store = SqliteStore::open(&path).await.unwrap();
        assert_eq!(
            store.get_state(&key("a", "k")).await.unwrap().as_deref(),
            Some("{\"n\":2}")
        );
        assert_eq!(
            store.get_state(&key("b", "k")).await.unwrap().as_deref(),
            Some("\"other\"")
        );
        assert_eq!(store.count_state("a").await.unwrap(), 1);
        store.delete_state(&key("a", "k")).await.unwrap();
        store.delete_state(&key("a", "missing")).await.unwrap();
        assert_eq!(store.get_state(&key("a", "k")).await.unwrap(), None);
        assert_eq!(store.count_state("a").await.unwrap(), 0);
        assert_eq!(store.count_state("b").await.unwrap(), 1);
    }
}
