//! The facade's idle timeout and keep-alive (contract section 8, "Idle timeout and
//! keep-alive"): a driver without the group is refused with the exact text and never
//! reached; the timeout is recorded on the lease; every gated operation and keep-alive
//! reset the driver's clock (with the paused state); a clock the driver reports as run
//! out refuses the operation, and keep-alive records the lease as expired.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use envrt_runtime_core::testkit::{ProbeDriver, ProbeShape};
use envrt_runtime_core::*;

/// The probe driver with an idle group that records its calls.
struct Idler {
    probe: ProbeDriver,
    armed: Mutex<Vec<Duration>>,
    touches: Mutex<Vec<bool>>,
    ended: AtomicBool,
}

#[async_trait]
impl EnvironmentDriver for Idler {
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
        self.probe.as_execute()
    }
    fn as_idle(&self) -> Option<&dyn IdleTimeout> {
        Some(self)
    }
}

#[async_trait]
impl IdleTimeout for Idler {
    async fn arm_idle(&self, _: &LeaseContext, idle: Duration, _: OnIdle) -> Result<(), DriverError> {
        self.armed.lock().unwrap().push(idle);
        Ok(())
    }
    async fn touch_idle(&self, _: &LeaseContext, paused: bool) -> Result<IdleClock, DriverError> {
        if self.ended.load(Ordering::SeqCst) {
            return Err(DriverError::invalid("ended"));
        }
        self.touches.lock().unwrap().push(paused);
        Ok(IdleClock::Reset)
    }
}

async fn runtime_with(driver: Arc<dyn EnvironmentDriver>) -> EnvironmentRuntime {
    let runtime = EnvironmentRuntime::new();
    let key = driver.key().to_owned();
    runtime.register_driver(driver);
    runtime
        .put_environment(Environment::new("env", "Probe env", key))
        .await
        .unwrap();
    runtime
}

#[tokio::test]
async fn a_driver_without_the_group_is_refused_with_the_exact_text_and_never_reached() {
    let probe = Arc::new(ProbeDriver::new("probe", ProbeShape::full(), None));
    let runtime = runtime_with(probe.clone()).await;
    let lease = runtime.acquire_lease(AcquireRequest::new("env", "acme")).await.unwrap();
    let before = probe.operation_calls();
    for error in [
        runtime
            .set_idle_timeout(&lease.id, Duration::from_secs(5))
            .await
            .unwrap_err(),
        runtime.keep_alive(&lease.id).await.unwrap_err(),
    ] {
        assert_eq!(
            error.to_string(),
            "Environment driver \"probe\" does not support idle timeouts."
        );
        assert_eq!(error.kind(), "idle_timeout_unsupported");
    }
    assert_eq!(probe.operation_calls(), before);
    let stored = runtime.lease(&lease.id).await.unwrap().unwrap();
    assert_eq!(idle_timeout(&stored), None);
}

#[tokio::test]
async fn operations_reset_the_clock_and_a_run_out_clock_ends_the_lease() {
    let idler = Arc::new(Idler {
        probe: ProbeDriver::new("idler", ProbeShape::full(), None),
        armed: Mutex::new(Vec::new()),
        touches: Mutex::new(Vec::new()),
        ended: AtomicBool::new(false),
    });
    let runtime = runtime_with(idler.clone()).await;
    let lease = runtime.acquire_lease(AcquireRequest::new("env", "acme")).await.unwrap();
    // Without a timeout: keep-alive is refused, operations touch nothing.
    assert_eq!(
        runtime.keep_alive(&lease.id).await.unwrap_err().to_string(),
        format!("Invalid input: lease \"{}\" has no idle timeout", lease.id)
    );
    runtime
        .execute(&lease.id, ExecuteRequest::new("true", Vec::<String>::new()))
        .await
        .unwrap();
    assert!(idler.touches.lock().unwrap().is_empty());
    // Armed: recorded on the lease, and every operation touches the clock.
    let armed = runtime
        .set_idle_timeout(&lease.id, Duration::from_millis(2500))
        .await
        .unwrap();
    assert_eq!(idle_timeout(&armed), Some(Duration::from_millis(2500)));
    assert_eq!(armed.metadata[IDLE_TIMEOUT_KEY], 2500);
    assert_eq!(*idler.armed.lock().unwrap(), [Duration::from_millis(2500)]);
    runtime
        .execute(&lease.id, ExecuteRequest::new("true", Vec::<String>::new()))
        .await
        .unwrap();
    runtime.keep_alive(&lease.id).await.unwrap();
    assert_eq!(*idler.touches.lock().unwrap(), [false, false]);
    // The driver's watchdog ended the lease: operations are refused, keep-alive records it.
    idler.ended.store(true, Ordering::SeqCst);
    let ended = format!("Lease \"{}\" ended after its idle timeout.", lease.id);
    let refused = runtime
        .execute(&lease.id, ExecuteRequest::new("true", Vec::<String>::new()))
        .await
        .unwrap_err();
    assert_eq!(refused.to_string(), ended);
    assert_eq!(refused.kind(), "lease_idle_ended");
    assert_eq!(runtime.keep_alive(&lease.id).await.unwrap_err().to_string(), ended);
    let stored = runtime.lease(&lease.id).await.unwrap().unwrap();
    assert_eq!(stored.status, LeaseStatus::Expired);
    // The release that recorded it dropped the timeout with the lease's resources.
    assert_eq!(idle_timeout(&stored), None);
}
