//! Warm pools at the facade: ready leases are handed out once each, carry the caller's
//! scopes, are refilled, replaced when they die, and released when the pools stop.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use envrt_runtime_core::testkit::{ProbeDriver, ProbeShape};
use envrt_runtime_core::*;

async fn runtime_with(driver: Arc<ProbeDriver>) -> Arc<EnvironmentRuntime> {
    let runtime = Arc::new(EnvironmentRuntime::new());
    runtime.register_driver(driver);
    runtime
        .put_environment(Environment::new("env", "Probe env", "probe"))
        .await
        .unwrap();
    runtime
}

/// Waits (bounded) until the pool has `ready` leases.
async fn wait_ready(runtime: &EnvironmentRuntime, ready: usize) {
    for _ in 0..500 {
        let status = runtime.pool_status("env", "acme", LeasePolicy::Ephemeral).unwrap();
        if status.ready == ready {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "the pool never reached {ready} ready leases: {:?}",
        runtime.pool_status("env", "acme", LeasePolicy::Ephemeral)
    );
}

async fn pooled_ids(runtime: &EnvironmentRuntime) -> BTreeSet<String> {
    let filter = LeaseFilter {
        statuses: vec![LeaseStatus::Active],
        ..Default::default()
    };
    runtime
        .leases(&filter)
        .await
        .unwrap()
        .into_iter()
        .filter(|lease| lease.metadata.contains_key(POOLED_KEY))
        .map(|lease| lease.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acquires_from_a_pool_of_n_get_n_distinct_ready_leases() {
    let driver = Arc::new(ProbeDriver::new("probe", ProbeShape::full(), None));
    let runtime = runtime_with(driver.clone()).await;
    runtime.start_pool(PoolSpec::new("env", "acme", 4)).unwrap();
    wait_ready(&runtime, 4).await;
    let ready = pooled_ids(&runtime).await;
    assert_eq!(ready.len(), 4);

    let handles: Vec<_> = (0..4)
        .map(|n| {
            let runtime = runtime.clone();
            tokio::spawn(async move {
                let mut request = AcquireRequest::new("env", "acme");
                request.run_id = Some(format!("run-{n}"));
                request.metadata.insert("caller".into(), n.into());
                runtime.acquire_lease(request).await.unwrap()
            })
        })
        .collect();
    let mut handed = BTreeSet::new();
    for (n, handle) in handles.into_iter().enumerate() {
        let lease = handle.await.unwrap();
        // The caller's scopes and metadata are on it, the pool mark is not.
        assert!(lease.run_id.as_deref().is_some_and(|run| run.starts_with("run-")));
        assert!(lease.metadata.contains_key("caller"), "{n}: {:?}", lease.metadata);
        assert!(!lease.metadata.contains_key(POOLED_KEY));
        assert_eq!(lease.metadata_driver(), Some("probe"));
        let stored = runtime.lease(&lease.id).await.unwrap().unwrap();
        assert_eq!(stored.run_id, lease.run_id);
        assert!(!stored.metadata.contains_key(POOLED_KEY));
        handed.insert(lease.id);
    }
    assert_eq!(
        handed, ready,
        "the handed-out leases are exactly the ready ones, each once"
    );

    // The pool refills with new leases.
    wait_ready(&runtime, 4).await;
    let refilled = pooled_ids(&runtime).await;
    assert!(refilled.is_disjoint(&handed));
    assert_eq!(runtime.stop_pools().await.released.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_the_pool_cannot_serve_acquire_fresh() {
    let driver = Arc::new(ProbeDriver::new("probe", ProbeShape::full(), None));
    let runtime = runtime_with(driver.clone()).await;
    runtime.start_pool(PoolSpec::new("env", "acme", 1)).unwrap();
    wait_ready(&runtime, 1).await;
    let ready = pooled_ids(&runtime).await;
    let other_tenant = runtime
        .acquire_lease(AcquireRequest::new("env", "globex"))
        .await
        .unwrap();
    let mut reusable = AcquireRequest::new("env", "acme");
    reusable.policy = LeasePolicy::ReuseByEnvironment;
    let other_policy = runtime.acquire_lease(reusable).await.unwrap();
    let mut with_cwd = AcquireRequest::new("env", "acme");
    with_cwd.requested_cwd = Some("/x".into());
    let fresh_cwd = runtime.acquire_lease(with_cwd).await.unwrap();
    for lease in [&other_tenant, &other_policy, &fresh_cwd] {
        assert!(!ready.contains(&lease.id));
    }
    assert_eq!(pooled_ids(&runtime).await, ready, "the ready lease was not touched");
    runtime.stop_pools().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_ready_lease_is_replaced_and_stopping_releases_the_rest() {
    let driver = Arc::new(ProbeDriver::new("probe", ProbeShape::full(), None));
    let runtime = runtime_with(driver.clone()).await;
    let mut spec = PoolSpec::new("env", "acme", 2);
    spec.health_interval = Duration::from_millis(50);
    runtime.start_pool(spec).unwrap();
    wait_ready(&runtime, 2).await;
    let first = pooled_ids(&runtime).await;
    let victim = first.iter().next().unwrap().clone();
    driver.kill_resource(&victim);
    // Bounded wait until the dead lease is out of the pool and replaced.
    let mut replaced = false;
    for _ in 0..500 {
        let now = pooled_ids(&runtime).await;
        if !now.contains(&victim) && now.len() == 2 {
            replaced = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(replaced, "the dead lease was not replaced");
    let dead = runtime.lease(&victim).await.unwrap().unwrap();
    assert_eq!(dead.status, LeaseStatus::Failed);
    assert_eq!(dead.failure_reason.as_deref(), Some("not_found"));

    let report = runtime.stop_pools().await;
    assert_eq!(report.released.len(), 2);
    assert!(report.failures.is_empty());
    assert!(
        pooled_ids(&runtime).await.is_empty(),
        "ready leases survived stop_pools"
    );
    // A stopped pool hands nothing out: the next acquire is fresh.
    let fresh = runtime.acquire_lease(AcquireRequest::new("env", "acme")).await.unwrap();
    assert!(!fresh.metadata.contains_key(POOLED_KEY));
}

#[tokio::test]
async fn bad_pools_are_refused_with_exact_texts() {
    let driver = Arc::new(ProbeDriver::new("probe", ProbeShape::full(), None));
    let runtime = runtime_with(driver).await;
    let err = runtime.start_pool(PoolSpec::new("env", "acme", 0)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid input: a lease pool needs a size of at least 1"
    );
    runtime.start_pool(PoolSpec::new("env", "acme", 1)).unwrap();
    let err = runtime.start_pool(PoolSpec::new("env", "acme", 3)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid input: a pool for environment \"env\" and tenant \"acme\" is already running"
    );
    runtime.stop_pools().await;
}

#[test]
fn a_pool_outside_a_tokio_runtime_is_refused() {
    let runtime = Arc::new(EnvironmentRuntime::new());
    let err = runtime.start_pool(PoolSpec::new("env", "acme", 1)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid input: a lease pool needs a running tokio runtime"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archived_environment_stops_hand_outs() {
    let driver = Arc::new(ProbeDriver::new("probe", ProbeShape::full(), None));
    let runtime = runtime_with(driver.clone()).await;
    runtime.start_pool(PoolSpec::new("env", "acme", 1)).unwrap();
    wait_ready(&runtime, 1).await;
    let ready = pooled_ids(&runtime).await;
    let mut archived = Environment::new("env", "Probe env", "probe");
    archived.status = EnvironmentStatus::Archived;
    runtime.put_environment(archived).await.unwrap();
    let err = runtime
        .acquire_lease(AcquireRequest::new("env", "acme"))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "Environment \"Probe env\" is not active.");
    // The lease that would have been handed out was released, not leaked.
    let id = ready.into_iter().next().unwrap();
    assert_eq!(runtime.lease(&id).await.unwrap().unwrap().status, LeaseStatus::Released);
    runtime.stop_pools().await;
}

/// A probe whose acquires wait at a gate, to hold a refill in flight.
struct GatedAcquire {
    probe: ProbeDriver,
    gate: tokio::sync::Semaphore,
    entered: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl EnvironmentDriver for GatedAcquire {
    fn key(&self) -> &str {
        self.probe.key()
    }
    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        self.entered.notify_one();
        self.gate.acquire().await.unwrap().forget();
        self.probe.acquire_lease(input).await
    }
    async fn release_lease(&self, input: &ReleaseInput) -> Result<(), DriverError> {
        self.probe.release_lease(input).await
    }
    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        self.probe.resolve_capabilities(input).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_waits_for_a_refill_in_flight_and_releases_its_lease() {
    let driver = Arc::new(GatedAcquire {
        probe: ProbeDriver::new("probe", ProbeShape::full(), None),
        gate: tokio::sync::Semaphore::new(0),
        entered: tokio::sync::Notify::new(),
    });
    let runtime = Arc::new(EnvironmentRuntime::new());
    runtime.register_driver(driver.clone());
    runtime
        .put_environment(Environment::new("env", "Probe env", "probe"))
        .await
        .unwrap();
    runtime.start_pool(PoolSpec::new("env", "acme", 1)).unwrap();
    tokio::time::timeout(Duration::from_secs(10), driver.entered.notified())
        .await
        .expect("the filler never started an acquire");

    let stopping = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.stop_pools().await }
    });
    // While the refill's acquire is held at the gate, stopping cannot be over.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !stopping.is_finished(),
        "stop_pools returned with a refill still in flight"
    );
    driver.gate.add_permits(1);
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("stop_pools never returned")
        .unwrap();
    assert_eq!(driver.probe.calls("acquire_lease"), 1);
    assert_eq!(
        driver.probe.calls("release_lease"),
        1,
        "the lease the refill got after the stop is released before stop_pools returns"
    );
    let active = LeaseFilter {
        statuses: vec![LeaseStatus::Active],
        ..Default::default()
    };
    assert!(runtime.leases(&active).await.unwrap().is_empty());
}
