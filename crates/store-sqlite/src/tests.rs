//! Unit tests of the SQLite lease store: round trips, filters, WAL mode and schema, corrupt or foreign files, missing folders, private file modes.

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
    // Private, so that the mode check (which comes first) lets SQLite look at it.
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
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

fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[tokio::test]
async fn a_new_store_and_its_wal_shm_and_lock_files_are_private_to_the_owner() {
    let (dir, store) = fresh().await;
    store
        .put_environment(&Environment::new("e1", "Env", "local"))
        .await
        .unwrap();
    store
        .put_lease(&lease("l1", None, "e1", LeaseStatus::Active, 1))
        .await
        .unwrap();
    for name in ["leases.db", "leases.db-wal", "leases.db-shm", "leases.db.lock"] {
        assert_eq!(mode_of(&dir.path().join(name)), 0o600, "{name}");
    }
}

#[tokio::test]
async fn a_store_other_users_can_read_or_write_is_refused_naming_the_file_and_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, store) = fresh().await;
    store
        .put_environment(&Environment::new("e1", "Env", "local"))
        .await
        .unwrap();
    let path = dir.path().join("leases.db");
    let refusal = |file: &std::path::Path, mode: &str| {
        format!(
            "Lease store error: cannot open \"{}\": its mode {mode} lets other users read or write the lease store; make it private with chmod 600",
            file.display()
        )
    };
    for (mode, shown) in [(0o644, "0644"), (0o620, "0620"), (0o602, "0602"), (0o640, "0640")] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let e = SqliteStore::open(&path).await.unwrap_err();
        assert_eq!(e.to_string(), refusal(&path, shown));
        assert_eq!(mode_of(&path), mode, "the refused file is left as it was");
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let wal = dir.path().join("leases.db-wal");
    assert!(wal.exists(), "the open store keeps its -wal file");
    std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o604)).unwrap();
    let e = SqliteStore::open(&path).await.unwrap_err();
    assert_eq!(e.to_string(), refusal(&wal, "0604"));
    std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o600)).unwrap();
    let reopened = SqliteStore::open(&path).await.unwrap();
    assert_eq!(reopened.list_environments().await.unwrap().len(), 1);
    drop(store);
}
