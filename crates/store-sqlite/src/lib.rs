//! # envrt-store-sqlite
//!
//! A durable [`LeaseStore`] on an embedded SQLite database (compiled in through
//! `rusqlite`'s `bundled` feature: nothing to install). A lease taken by one process can be
//! used, released or cleaned up by the next one, and several processes may write the same
//! database at once without losing or corrupting a record:
//!
//! - the database runs in WAL mode with a busy timeout, so readers never block writers and
//!   a writer waits for another one instead of failing;
//! - opening takes turns with other openers through an exclusive `flock` on a sidecar
//!   file `<db>.lock` and starts over on `SQLITE_BUSY`, so any number of processes may
//!   create, switch to WAL and migrate one brand-new database at once;
//! - every write is one `BEGIN IMMEDIATE` transaction, so it takes the write lock up front
//!   and cannot deadlock on a lock upgrade;
//! - each record is stored whole, as the JSON of the core type, next to indexed columns
//!   (`id`, `run_id`, `environment_id`, `status`, `acquired_at`) used for filtering.
//!
//! Every call runs on tokio's blocking pool ([`tokio::task::spawn_blocking`]), never on an
//! async worker thread.
//!
//! The same database keeps plugin workers' state ([`PluginStateStore`], table
//! `plugin_state`), so a plugin's `ctx.state` survives worker and host restarts.
//!
//! The [`holder`] module records which process holds a lease (`holderPid` and
//! `holderStartTime` in the lease metadata) so that a later process can tell whether the
//! holder is gone — what `envrt gc` needs after a crash.
//!
//! ```
//! use envrt_runtime_core::{EnvironmentRuntime, LeaseStore};
//! use envrt_store_sqlite::SqliteStore;
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let store = SqliteStore::open(dir.path().join("leases.db")).await?;
//! let runtime = EnvironmentRuntime::with_store(std::sync::Arc::new(store));
//! assert!(runtime.store().list_environments().await?.is_empty());
//! # Ok::<(), envrt_runtime_core::StoreError>(())
//! # }).unwrap();
//! ```

#![forbid(unsafe_code)]

pub mod holder;
mod plugin_state;
mod private;
mod scope_lock;
mod sql;
mod tokens;

pub use tokens::TokenRecord;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
#[cfg(doc)]
use envrt_runtime_core::PluginStateStore;
use envrt_runtime_core::{Environment, Lease, LeaseFilter, LeaseStore, StoreError};
use rusqlite::Connection;

/// How long a write waits for another process's write to finish before failing.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// A [`LeaseStore`] in one SQLite database file. Cheap to clone: clones share one
/// connection. Open several stores (or run several processes) on the same file for
/// concurrent writers.
#[derive(Clone)]
pub struct SqliteStore {
    connection: Arc<Mutex<Connection>>,
    path: Arc<PathBuf>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.path).finish()
    }
}

impl SqliteStore {
    /// Opens (creating when missing) the database at `path` with
    /// [`DEFAULT_BUSY_TIMEOUT`]. The parent directory must exist.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with_timeout(path, DEFAULT_BUSY_TIMEOUT).await
    }

    /// Opens the database at `path`, waiting at most `busy_timeout` for another writer.
    pub async fn open_with_timeout(path: impl AsRef<Path>, busy_timeout: Duration) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let opened = path.clone();
        let connection = blocking(move || sql::open(&opened, busy_timeout)).await?;
        Ok(SqliteStore {
            connection: Arc::new(Mutex::new(connection)),
            path: Arc::new(path),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the connection on the blocking pool.
    async fn with<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let connection = Arc::clone(&self.connection);
        blocking(move || {
            let mut guard = connection.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut guard)
        })
        .await
    }
}

async fn blocking<T, F>(f: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
{
    tokio::task::spawn_blocking(f).await.map_err(|join| StoreError {
        message: "the lease store task did not finish".into(),
        source: Some(Box::new(join)),
    })?
}

#[async_trait]
impl LeaseStore for SqliteStore {
    async fn put_environment(&self, environment: &Environment) -> Result<(), StoreError> {
        let environment = environment.clone();
        self.with(move |c| sql::put_environment(c, &environment)).await
    }

    async fn get_environment(&self, id: &str) -> Result<Option<Environment>, StoreError> {
        let id = id.to_owned();
        self.with(move |c| sql::get_environment(c, &id)).await
    }

    async fn list_environments(&self) -> Result<Vec<Environment>, StoreError> {
        self.with(sql::list_environments).await
    }

    async fn put_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let lease = lease.clone();
        self.with(move |c| sql::put_lease(c, &lease)).await
    }

    async fn get_lease(&self, id: &str) -> Result<Option<Lease>, StoreError> {
        let id = id.to_owned();
        self.with(move |c| sql::get_lease(c, &id)).await
    }

    async fn list_leases(&self, filter: &LeaseFilter) -> Result<Vec<Lease>, StoreError> {
        let filter = filter.clone();
        self.with(move |c| sql::list_leases(c, &filter)).await
    }

    async fn lock_scope(&self, scope: &str) -> Result<envrt_runtime_core::ScopeGuard, StoreError> {
        let (path, scope) = (self.path.clone(), scope.to_owned());
        blocking(move || scope_lock::lock(&path, &scope)).await
    }
}

#[cfg(test)]
mod tests;
