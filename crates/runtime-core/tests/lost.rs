//! A driver's "resource gone" (contract section 3): on an active lease the facade reports
//! the lease lost with the exact text; on a lease a release ended while the operation ran
//! (the release won the race) it is that lease not being active, never "lost".

use std::sync::Arc;

use envrt_runtime_core::testkit::{ProbeDriver, ProbeShape};
use envrt_runtime_core::*;

async fn setup() -> (Arc<ProbeDriver>, Arc<EnvironmentRuntime>, Lease) {
    let driver = Arc::new(ProbeDriver::new("probe", ProbeShape::full(), None));
    let runtime = Arc::new(EnvironmentRuntime::new());
    runtime.register_driver(driver.clone());
    runtime
        .put_environment(Environment::new("env", "Probe env", "probe"))
        .await
        .unwrap();
    let lease = runtime.acquire_lease(AcquireRequest::new("env", "acme")).await.unwrap();
    (driver, runtime, lease)
}

fn true_command() -> ExecuteRequest {
    ExecuteRequest::new("true", Vec::<String>::new())
}

#[tokio::test]
async fn a_resource_gone_on_an_active_lease_is_the_lease_lost() {
    let (driver, runtime, lease) = setup().await;
    driver.kill_resource(&lease.id);
    let error = runtime.execute(&lease.id, true_command()).await.unwrap_err();
    let provider = lease.provider_lease_id.clone().unwrap_or_default();
    assert_eq!(
        error.to_string(),
        format!(
            "Lease \"{}\" is lost: its provider resource \"{provider}\" is gone; release or destroy the lease to end it.",
            lease.id
        )
    );
    assert_eq!(error.kind(), "lease_lost");
    let released = runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(released.status, LeaseStatus::Released);
}

#[tokio::test]
async fn a_resource_gone_after_a_racing_release_is_the_lease_not_active() {
    let (driver, runtime, lease) = setup().await;
    let gate = driver.hold_executes();
    let running = tokio::spawn({
        let runtime = runtime.clone();
        let id = lease.id.clone();
        async move { runtime.execute(&id, true_command()).await }
    });
    // The execute is past the gate and in the driver when the release ends the lease and
    // its resource.
    gate.started.notified().await;
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.kill_resource(&lease.id);
    gate.go.add_permits(1);
    let error = running.await.unwrap().unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("Lease \"{}\" is not active (status: released).", lease.id)
    );
}

#[tokio::test]
async fn a_resource_gone_while_a_release_is_still_in_the_driver_waits_for_it_and_is_not_active() {
    let (driver, runtime, lease) = setup().await;
    let gate = driver.hold_releases();
    let releasing = tokio::spawn({
        let runtime = runtime.clone();
        let id = lease.id.clone();
        async move { runtime.release_lease(&id, LeaseStatus::Released).await }
    });
    // The release removed the resource and is still in the driver: the store says active.
    gate.started.notified().await;
    driver.kill_resource(&lease.id);
    let executing = tokio::spawn({
        let runtime = runtime.clone();
        let id = lease.id.clone();
        async move { runtime.execute(&id, true_command()).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!executing.is_finished(), "the execute waits for the release in flight");
    gate.go.add_permits(1);
    releasing.await.unwrap().unwrap();
    let error = executing.await.unwrap().unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("Lease \"{}\" is not active (status: released).", lease.id)
    );
    // With the release failing, the lease is left pending cleanup: not active either.
    let (driver, runtime, lease) = setup().await;
    driver.set_fail_release(true);
    let gate = driver.hold_releases();
    let releasing = tokio::spawn({
        let runtime = runtime.clone();
        let id = lease.id.clone();
        async move { runtime.release_lease(&id, LeaseStatus::Released).await }
    });
    gate.started.notified().await;
    driver.kill_resource(&lease.id);
    let executing = tokio::spawn({
        let runtime = runtime.clone();
        let id = lease.id.clone();
        async move { runtime.execute(&id, true_command()).await }
    });
    gate.go.add_permits(1);
    let _ = releasing.await.unwrap();
    let error = executing.await.unwrap().unwrap_err().to_string();
    assert_eq!(
        error,
        format!("Lease \"{}\" is not active (status: pending_cleanup).", lease.id)
    );
}
