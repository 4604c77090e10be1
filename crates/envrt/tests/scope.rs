//! Leases that find their owner again, against the real local driver and a real SQLite
//! store: an acquire with scope reuse creates, resumes or replaces the scope's lease and
//! says which; many concurrent acquires of one scope, split over two runtimes on one
//! store file, get one lease; and `release_matching` ends a scope's or a label's leases,
//! idempotently, in one tenant only.
#![cfg(all(feature = "local", feature = "sqlite"))]

use std::sync::Arc;

use envrt::core::{LeaseSelector, Reuse, ScopeOutcome};
use envrt::{
    AcquireRequest, Environment, EnvironmentRuntime, ExecuteRequest, LeasePolicy, LeaseStatus, RuntimeBuilder,
    SqliteStore,
};

async fn runtime_on(dir: &std::path::Path) -> EnvironmentRuntime {
    let store = SqliteStore::open(dir.join("leases.db")).await.unwrap();
    let runtime = RuntimeBuilder::new()
        .store(Arc::new(store))
        .configure(envrt::local::LocalConfig {
            root: Some(dir.join("workspaces")),
            ..Default::default()
        })
        .build()
        .await
        .unwrap();
    runtime
        .put_environment(Environment::new("dev", "Dev", "local"))
        .await
        .unwrap();
    runtime
}

fn scoped(scope: &str) -> AcquireRequest {
    let mut request = AcquireRequest::new("dev", "acme");
    request.scope = Some(scope.to_owned());
    request.reuse = Reuse::Scope;
    request.policy = LeasePolicy::ReuseByEnvironment;
    request
}

async fn sh(runtime: &EnvironmentRuntime, lease: &str, script: &str) -> String {
    let out = runtime
        .execute(lease, ExecuteRequest::new("sh", ["-c", script]))
        .await
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn a_scoped_acquire_creates_then_resumes_then_replaces_on_a_changed_fingerprint() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime_on(dir.path()).await;
    let first = runtime.acquire_lease(scoped("acme/agent-1")).await.unwrap();
    assert_eq!(ScopeOutcome::of(&first), Some(ScopeOutcome::Created));
    assert_eq!(first.metadata["envrtScope"], "acme/agent-1");
    sh(&runtime, &first.id, "echo warm > state").await;

    // Live: the same lease comes back.
    let again = runtime.acquire_lease(scoped("acme/agent-1")).await.unwrap();
    assert_eq!(again.id, first.id);
    assert_eq!(ScopeOutcome::of(&again), Some(ScopeOutcome::Resumed));
    // Released under reuse_by_environment: resumed, with its files.
    runtime.release_lease(&first.id, LeaseStatus::Released).await.unwrap();
    let resumed = runtime.acquire_lease(scoped("acme/agent-1")).await.unwrap();
    assert_eq!(resumed.id, first.id);
    assert_eq!(resumed.status, LeaseStatus::Active);
    assert_eq!(ScopeOutcome::of(&resumed), Some(ScopeOutcome::Resumed));
    assert_eq!(sh(&runtime, &first.id, "cat state").await, "warm\n");

    // Another scope gets a lease of its own.
    let other = runtime.acquire_lease(scoped("acme/agent-2")).await.unwrap();
    assert_ne!(other.id, first.id);
    assert_eq!(ScopeOutcome::of(&other), Some(ScopeOutcome::Created));

    // A changed fingerprint (now from a template): the old lease is ended and replaced.
    let template = runtime.capture_template(&first.id, None).await.unwrap();
    let mut request = scoped("acme/agent-1");
    request.template = Some(template.id.clone());
    let replaced = runtime.acquire_lease(request).await.unwrap();
    assert_ne!(replaced.id, first.id);
    assert_eq!(
        ScopeOutcome::of(&replaced),
        Some(ScopeOutcome::Replaced {
            reason: "the fingerprint changed: template".into()
        })
    );
    let old = runtime.lease(&first.id).await.unwrap().unwrap();
    assert_eq!(old.status, LeaseStatus::Released);
    assert_eq!(old.metadata["destroyed"], true);
    assert!(
        !dir.path()
            .join("workspaces")
            .join(format!("lease-{}", first.id))
            .exists()
    );
    assert_eq!(sh(&runtime, &replaced.id, "cat state").await, "warm\n");

    for lease in [&replaced.id, &other.id] {
        runtime.destroy_lease(lease).await.unwrap();
    }
    runtime.delete_template("dev", "acme", &template.id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_acquires_of_one_scope_over_two_runtimes_on_one_store_get_one_lease() {
    let dir = tempfile::tempdir().unwrap();
    let a = Arc::new(runtime_on(dir.path()).await);
    let b = Arc::new(runtime_on(dir.path()).await);
    let mut tasks = Vec::new();
    for n in 0..16 {
        let runtime = if n % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            runtime.acquire_lease(scoped("acme/shared")).await
        }));
    }
    let mut leases = Vec::new();
    for task in tasks {
        leases.push(task.await.unwrap().unwrap());
    }
    let first = &leases[0].id;
    assert!(leases.iter().all(|l| &l.id == first), "one scope, one lease");
    let created = leases
        .iter()
        .filter(|l| ScopeOutcome::of(l) == Some(ScopeOutcome::Created))
        .count();
    assert_eq!(created, 1);
    let stored = a.leases(&Default::default()).await.unwrap();
    assert_eq!(stored.len(), 1, "{stored:?}");
    a.destroy_lease(first).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_acquires_over_two_runtimes_sharing_a_memory_store_get_one_lease() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<envrt::MemoryStore> = Arc::new(envrt::MemoryStore::new());
    let mut runtimes = Vec::new();
    for _ in 0..2 {
        let runtime = RuntimeBuilder::new()
            .store(store.clone())
            .configure(envrt::local::LocalConfig {
                root: Some(dir.path().join("workspaces")),
                ..Default::default()
            })
            .build()
            .await
            .unwrap();
        runtime
            .put_environment(Environment::new("dev", "Dev", "local"))
            .await
            .unwrap();
        runtimes.push(Arc::new(runtime));
    }
    let tasks: Vec<_> = (0..16)
        .map(|n| {
            let runtime = runtimes[n % 2].clone();
            tokio::spawn(async move { runtime.acquire_lease(scoped("acme/shared")).await })
        })
        .collect();
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap().unwrap().id);
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "one scope, one lease");
    runtimes[0].destroy_lease(&ids[0]).await.unwrap();
}

#[tokio::test]
async fn release_by_scope_or_label_ends_those_leases_only_and_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime_on(dir.path()).await;
    let acquire = |tenant: &str, scope: &str, label: &str| {
        let mut request = AcquireRequest::new("dev", tenant);
        request.scope = Some(scope.to_owned());
        request
            .metadata
            .insert("labels".into(), serde_json::json!({ "team": label }));
        runtime.acquire_lease(request)
    };
    let a1 = acquire("acme", "s1", "red").await.unwrap();
    let a2 = acquire("acme", "s1", "blue").await.unwrap();
    let a3 = acquire("acme", "s2", "red").await.unwrap();
    let g1 = acquire("globex", "s1", "red").await.unwrap();

    let report = runtime
        .release_matching("acme", &LeaseSelector::Scope("s1".into()), LeaseStatus::Released)
        .await
        .unwrap();
    let mut released: Vec<&str> = report.released.iter().map(|l| l.id.as_str()).collect();
    released.sort();
    let mut expected = vec![a1.id.as_str(), a2.id.as_str()];
    expected.sort();
    assert_eq!(released, expected);
    assert!(report.failures.is_empty());
    let again = runtime
        .release_matching("acme", &LeaseSelector::Scope("s1".into()), LeaseStatus::Released)
        .await
        .unwrap();
    assert!(again.released.is_empty() && again.failures.is_empty(), "idempotent");

    let red = LeaseSelector::Label {
        key: "team".into(),
        value: "red".into(),
    };
    let report = runtime
        .release_matching("acme", &red, LeaseStatus::Released)
        .await
        .unwrap();
    assert_eq!(
        report.released.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
        [a3.id.as_str()]
    );
    // The other tenant's lease of the same scope and label is untouched.
    assert_eq!(
        runtime.lease(&g1.id).await.unwrap().unwrap().status,
        LeaseStatus::Active
    );
    runtime.release_lease(&g1.id, LeaseStatus::Released).await.unwrap();
}

#[tokio::test]
async fn a_scope_reuse_without_a_scope_or_with_a_bad_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = runtime_on(dir.path()).await;
    let mut request = AcquireRequest::new("dev", "acme");
    request.reuse = Reuse::Scope;
    assert_eq!(
        runtime.acquire_lease(request).await.unwrap_err().to_string(),
        "Invalid input: reuse = \"scope\" needs a scope"
    );
    assert_eq!(
        runtime.acquire_lease(scoped("a\u{7}b")).await.unwrap_err().to_string(),
        "Invalid input: a lease scope must be 1 to 256 bytes without control characters"
    );
    assert!(runtime.leases(&Default::default()).await.unwrap().is_empty());
}
