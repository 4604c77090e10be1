//! Unit tests of the SQLite lease store: round trips, filters, WAL mode and schema, corrupt or foreign files, missing folders.

use super::*;
use envrt_runtime_core::{
    Environment, EnvironmentRuntime, Lease, LeaseFilter, LeasePolicy, LeaseStatus, LeaseStore, Timestamp,
};
use serde_json::json;

pub(crate) fn lease(id: &str, run: Option<&str>, env: &str, status: LeaseStatus, at: u64) -> Lease {
    Lease {
        id: id.into(),
        company_id: "acme".into(),
        environment_id: Some(env.into()),
        execution_workspace_id: None,
        issue_id: None,
        run_id: run.map(Into::into),
        status,
        lease_policy: LeasePolicy::Ephemeral,
        provider: Some("local".into()),
        provider_lease_id: Some(format!("p-{id}")),
        acquired_at: Timestamp(at),
        last_used_at: Timestamp(at),
        expires_at: None,
        released_at: None,
        failure_reason: None,
        cleanup_status: None,
        metadata: json!({"driver": "local", "nested": {"k": [1, 2, 3]}})
            .as_object()
            .cloned()
            .unwrap(),
    }
}

async fn fresh() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("leases.db")).await.unwrap();
    (dir, store)
}

#[tokio::test]
async fn records_round_trip_and_survive_reopening() {
    let (dir, store) = fresh().await;
    let env = Environment::new("e1", "Env one", "local");
    store.put_environment(&env).await.unwrap();
    let l = lease("l1", Some("r1"), "e1", LeaseStatus::Active, 5);
    store.put_lease(&l).await.unwrap();
    drop(store);

    let again = SqliteStore::open(dir.path().join("leases.db")).await.unwrap();
    assert_eq!(again.get_environment("e1").await.unwrap(), Some(env.clone()));
    assert_eq!(again.list_environments().await.unwrap(), vec![env]);
    assert_eq!(again.get_lease("l1").await.unwrap(), Some(l));
    assert_eq!(again.get_lease("nope").await.unwrap(), None);
    assert_eq!(again.get_environment("nope").await.unwrap(), None);
}

#[tokio::test]
async fn put_replaces_and_filters_use_the_indexed_columns() {
    let (_dir, store) = fresh().await;
    store
        .put_lease(&lease("b", Some("r1"), "e1", LeaseStatus::Active, 2))
        .await
        .unwrap();
    store
        .put_lease(&lease("a", Some("r1"), "e2", LeaseStatus::Active, 2))
        .await
        .unwrap();
    store
        .put_lease(&lease("c", Some("r2"), "e1", LeaseStatus::Active, 1))
        .await
        .unwrap();
    store
        .put_lease(&lease("d", None, "e1", LeaseStatus::Failed, 0))
        .await
        .unwrap();
    // Replacing moves the lease between statuses.
    store
        .put_lease(&lease("c", Some("r2"), "e1", LeaseStatus::Released, 1))
        .await
        .unwrap();

    let ids = |v: Vec<Lease>| v.into_iter().map(|l| l.id).collect::<Vec<_>>();
    let all = store.list_leases(&LeaseFilter::default()).await.unwrap();
    assert_eq!(ids(all), ["d", "c", "a", "b"]);
    let run = LeaseFilter {
        run_id: Some("r1".into()),
        ..Default::default()
    };
    assert_eq!(ids(store.list_leases(&run).await.unwrap()), ["a", "b"]);
    let env_active = LeaseFilter {
        environment_id: Some("e1".into()),
        statuses: vec![LeaseStatus::Active],
        ..Default::default()
    };
    assert_eq!(ids(store.list_leases(&env_active).await.unwrap()), ["b"]);
    let ended = LeaseFilter {
        statuses: vec![LeaseStatus::Released, LeaseStatus::Failed],
        ..Default::default()
    };
    assert_eq!(ids(store.list_leases(&ended).await.unwrap()), ["d", "c"]);
}

#[tokio::test]
async fn the_database_runs_in_wal_mode_with_the_current_schema() {
    let (dir, store) = fresh().await;
    drop(store);
    let c = rusqlite::Connection::open(dir.path().join("leases.db")).unwrap();
    let mode: String = c.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    let version: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, sql::SCHEMA_VERSION);
}

#[tokio::test]
async fn a_corrupt_record_is_a_typed_error_naming_the_lease() {
    let (dir, store) = fresh().await;
    store
        .put_lease(&lease("ok", None, "e1", LeaseStatus::Active, 1))
        .await
        .unwrap();
    let c = rusqlite::Connection::open(dir.path().join("leases.db")).unwrap();
    c.execute(
        "INSERT INTO leases (id, status, acquired_at, record) VALUES ('bad', 'active', 2, '{\"id\": \"bad\"')",
        [],
    )
    .unwrap();
    let e = store.get_lease("bad").await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "Lease store error: lease \"bad\" is corrupt: EOF while parsing an object at line 1 column 12"
    );
    let e = store.list_leases(&LeaseFilter::default()).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "Lease store error: lease \"bad\" is corrupt: EOF while parsing an object at line 1 column 12"
    );
    // The good record is untouched.
    assert!(store.get_lease("ok").await.unwrap().is_some());
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let junk = vec![b'x'; 4096];
    std::fs::write(&path, &junk).unwrap();
    let e = SqliteStore::open(&path).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "Lease store error: cannot open \"{}\": file is not a database",
            path.display()
        )
    );
    assert_eq!(std::fs::read(&path).unwrap(), junk);
}

#[tokio::test]
async fn a_newer_schema_is_refused() {
    let (dir, store) = fresh().await;
    drop(store);
    let path = dir.path().join("leases.db");
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch("PRAGMA user_version = 99;").unwrap();
    drop(c);
    let e = SqliteStore::open(&path).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "Lease store error: \"{}\" has schema version 99, newer than the 1 this envrt understands",
            path.display()
        )
    );
}

#[tokio::test]
async fn a_missing_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent").join("leases.db");
    let e = SqliteStore::open(&path).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "Lease store error: cannot open \"{}\": unable to open database file: {}",
            path.display(),
            path.display()
        )
    );
}

#[tokio::test]
async fn the_runtime_keeps_leases_across_store_instances() {
    use envrt_runtime_core::AcquireRequest;
    use envrt_runtime_core::testkit::{ProbeDriver, ProbeShape};
    let (dir, store) = fresh().await;
    let first = EnvironmentRuntime::with_store(Arc::new(store));
    first.register_driver(Arc::new(ProbeDriver::new("probe", ProbeShape::full(), None)));
    first
        .put_environment(Environment::new("e1", "Env", "probe"))
        .await
        .unwrap();
    let l = first.acquire_lease(AcquireRequest::new("e1", "acme")).await.unwrap();
    drop(first);

    let second =
        EnvironmentRuntime::with_store(Arc::new(SqliteStore::open(dir.path().join("leases.db")).await.unwrap()));
    second.register_driver(Arc::new(ProbeDriver::new("probe", ProbeShape::full(), None)));
    assert_eq!(second.lease(&l.id).await.unwrap(), Some(l.clone()));
    let released = second.release_lease(&l.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(released.status, LeaseStatus::Released);
    assert_eq!(
        second.lease(&l.id).await.unwrap().unwrap().status,
        LeaseStatus::Released
    );
}
