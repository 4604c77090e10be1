//! Lease expiry at the facade: a requested expiry is honoured or the acquire fails closed,
//! and a lease past its expiry refuses every operation but clean-up.

use std::sync::Arc;
use std::time::Duration;

use envrt_runtime_core::testkit::{ProbeDriver, ProbeExpiry, ProbeShape};
use envrt_runtime_core::*;

async fn runtime_with(driver: Arc<ProbeDriver>) -> EnvironmentRuntime {
    let runtime = EnvironmentRuntime::new();
    runtime.register_driver(driver);
    runtime
        .put_environment(Environment::new("env", "Probe env", "probe"))
        .await
        .unwrap();
    runtime
}

fn request(expires_in: Duration) -> AcquireRequest {
    let mut request = AcquireRequest::new("env", "acme");
    request.requested_expires_at = Some(Timestamp::now().after(expires_in));
    request
}

async fn active_leases(runtime: &EnvironmentRuntime) -> usize {
    let filter = LeaseFilter {
        statuses: vec![LeaseStatus::Active],
        ..Default::default()
    };
    runtime.leases(&filter).await.unwrap().len()
}

#[tokio::test]
async fn an_honoured_expiry_is_recorded_on_the_lease() {
    let driver = Arc::new(ProbeDriver::new("probe", ProbeShape::full(), None));
    let runtime = runtime_with(driver).await;
    let request = request(Duration::from_secs(600));
    let wanted = request.requested_expires_at;
    let lease = runtime.acquire_lease(request).await.unwrap();
    assert_eq!(lease.expires_at, wanted);
    assert_eq!(runtime.lease(&lease.id).await.unwrap().unwrap().expires_at, wanted);
    // Without a request there is no expiry.
    let plain = runtime.acquire_lease(AcquireRequest::new("env", "acme")).await.unwrap();
    assert_eq!(plain.expires_at, None);
}

#[tokio::test]
async fn a_driver_that_cannot_bound_the_lease_is_refused_and_its_resource_ended() {
    for (expiry, shape, ends_with) in [
        (ProbeExpiry::Unbounded, ProbeShape::full(), "destroy_lease"),
        (ProbeExpiry::Late, ProbeShape::full(), "destroy_lease"),
        (ProbeExpiry::Unbounded, ProbeShape::default(), "release_lease"),
    ] {
        let driver = Arc::new(ProbeDriver::new("probe", shape, None));
        driver.set_expiry(expiry);
        let runtime = runtime_with(driver.clone()).await;
        let error = runtime
            .acquire_lease(request(Duration::from_secs(600)))
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "Environment driver \"probe\" does not support lease expiry."
        );
        assert!(matches!(
            error,
            RuntimeError::Unsupported {
                operation: UnsupportedOperation::Expiry,
                ..
            }
        ));
        assert_eq!(error.kind(), "expiry_unsupported");
        assert_eq!(
            driver.calls(ends_with),
            1,
            "{expiry:?}: the resource was not ended by {ends_with}"
        );
        assert_eq!(active_leases(&runtime).await, 0, "{expiry:?}");
    }
}

#[tokio::test]
async fn a_failed_clean_up_after_the_refusal_is_kept_for_retry() {
    let driver = Arc::new(ProbeDriver::new("probe", ProbeShape::default(), None));
    driver.set_expiry(ProbeExpiry::Unbounded);
    driver.set_fail_release(true);
    let runtime = runtime_with(driver.clone()).await;
    let error = runtime
        .acquire_lease(request(Duration::from_secs(600)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            RuntimeError::Unsupported {
                operation: UnsupportedOperation::Expiry,
                ..
            }
        ),
        "{error}"
    );
    let filter = LeaseFilter {
        statuses: vec![LeaseStatus::PendingCleanup],
        ..Default::default()
    };
    let pending = runtime.leases(&filter).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].cleanup_status, Some(CleanupStatus::Failed));
    // A retried release ends it.
    driver.set_fail_release(false);
    let released = runtime
        .release_lease(&pending[0].id, LeaseStatus::Released)
        .await
        .unwrap();
    assert_eq!(released.status, LeaseStatus::Released);
}

#[tokio::test]
async fn an_expiry_in_the_past_is_refused_before_the_driver() {
    let driver = Arc::new(ProbeDriver::new("probe", ProbeShape::full(), None));
    let runtime = runtime_with(driver.clone()).await;
    let mut request = AcquireRequest::new("env", "acme");
    request.requested_expires_at = Some(Timestamp(1_000));
    let error = runtime.acquire_lease(request).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "Invalid input: the requested expiry 1970-01-01T00:00:01.000Z has already passed"
    );
    assert_eq!(driver.calls("acquire_lease"), 0);
}

#[tokio::test]
async fn a_lease_past_its_expiry_refuses_every_operation_but_clean_up() {
    // Duplex declared, so its capability check passes and the expiry is what refuses.
    let declaration = CapabilityDeclaration {
        duplex_command_stream: Some(true),
        ..Default::default()
    };
    let driver = Arc::new(ProbeDriver::new("probe", ProbeShape::full(), Some(declaration)));
    let runtime = runtime_with(driver.clone()).await;
    let lease = runtime
        .acquire_lease(request(Duration::from_millis(200)))
        .await
        .unwrap();
    let expires_at = lease.expires_at.unwrap();
    // Wait (bounded) until the expiry has passed.
    for _ in 0..100 {
        if Timestamp::now() > expires_at {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(Timestamp::now() > expires_at);
    let expected = format!("Lease \"{}\" expired at {}.", lease.id, expires_at.to_rfc3339());
    let before = driver.operation_calls();
    let id = lease.id.as_str();
    let refusals: Vec<RuntimeError> = vec![
        runtime
            .execute(id, ExecuteRequest::new("true", [""; 0]))
            .await
            .unwrap_err(),
        runtime.sync_in(id, &[]).await.unwrap_err(),
        runtime.sync_out(id, &[]).await.unwrap_err(),
        runtime
            .realize_workspace(id, &WorkspaceRequest::default())
            .await
            .unwrap_err(),
        runtime
            .open_duplex_channel(id, &["cat".to_string()])
            .await
            .err()
            .unwrap(),
    ];
    for error in refusals {
        assert_eq!(error.to_string(), expected);
        assert_eq!(error.kind(), "lease_expired");
    }
    assert_eq!(
        driver.operation_calls(),
        before,
        "a refused operation reached the driver"
    );

    // The sweep releases it as expired; destroy still works on it afterwards.
    let report = runtime.release_expired().await.unwrap();
    assert_eq!(report.released.len(), 1);
    assert!(report.failures.is_empty());
    let ended = runtime.lease(id).await.unwrap().unwrap();
    assert_eq!(ended.status, LeaseStatus::Expired);
    assert_eq!(ended.failure_reason.as_deref(), Some("lease_expired"));
    runtime.destroy_lease(id).await.unwrap();
    assert_eq!(driver.calls("destroy_lease"), 1);
    // Nothing left to sweep.
    assert!(runtime.release_expired().await.unwrap().released.is_empty());
}
