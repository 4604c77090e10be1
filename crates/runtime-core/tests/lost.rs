//! A driver's "resource gone" (contract section 3): on an active lease the facade reports
//! the lease lost with the exact text; on a lease a release ended while the operation ran
//! (the release won the race) it is that lease not being active, never "lost"; an acquire
//! keeps the driver's own error.

use std::sync::Arc;

use async_trait::async_trait;
use envrt_runtime_core::testkit::{ProbeDriver, ProbeShape};
use envrt_runtime_core::*;
use tokio::sync::{Notify, Semaphore};

/// The probe driver whose execute waits until the test lets it go, then finds its
/// provider resource gone.
struct Vanishing {
    probe: ProbeDriver,
    started: Notify,
    go: Semaphore,
}

#[async_trait]
impl EnvironmentDriver for Vanishing {
    fn key(&self) -> &str {
        self.probe.key()
    }
    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        self.probe.acquire_lease(input).await
    }
    async fn release_lease(&self, input: &ReleaseInput) -> Result<(), DriverError> {
        self.probe.release_lease(input).await
    }
    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        self.probe.resolve_capabilities(input).await
    }
    fn as_execute(&self) -> Option<&dyn Execute> {
        Some(self)
    }
}

#[async_trait]
impl Execute for Vanishing {
    async fn execute(&self, context: &LeaseContext, _: ExecuteRequest) -> Result<ExecuteResult, DriverError> {
        self.started.notify_one();
        let _permit = self.go.acquire().await.unwrap();
        Err(DriverError::ResourceGone {
            id: context.lease.provider_lease_id.clone().unwrap_or_default(),
        })
    }
}

async fn setup() -> (Arc<Vanishing>, Arc<EnvironmentRuntime>, Lease) {
    let driver = Arc::new(Vanishing {
        probe: ProbeDriver::new("vanishing", ProbeShape::full(), None),
        started: Notify::new(),
        go: Semaphore::new(0),
    });
    let runtime = Arc::new(EnvironmentRuntime::new());
    runtime.register_driver(driver.clone());
    runtime
        .put_environment(Environment::new("env", "Vanishing env", "vanishing"))
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
    driver.go.add_permits(1);
    let error = runtime.execute(&lease.id, true_command()).await.unwrap_err();
    let provider = lease.provider_lease_id.clone().unwrap_or_default();
    assert_eq!(
        error.to_string(),
        format!(
            "Lease \"{}\" is lost: its provider resource \"{provider}\" is gone; release or destroy the lease to end it.",
            lease.id
        )
    );
    // Releasing it succeeds.
    let released = runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(released.status, LeaseStatus::Released);
}

#[tokio::test]
async fn a_resource_gone_after_a_racing_release_is_the_lease_not_active() {
    let (driver, runtime, lease) = setup().await;
    let running = tokio::spawn({
        let runtime = runtime.clone();
        let id = lease.id.clone();
        async move { runtime.execute(&id, true_command()).await }
    });
    // The execute is past the gate and in the driver when the release ends the lease.
    driver.started.notified().await;
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.go.add_permits(1);
    let error = running.await.unwrap().unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("Lease \"{}\" is not active (status: released).", lease.id)
    );
}
