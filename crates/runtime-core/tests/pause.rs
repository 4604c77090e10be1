//! The facade's pause and unpause (contract section 8, "Pause and unpause"): a driver
//! without the group is refused with the exact text and never reached; with it, the
//! paused mark is recorded in the store, pausing twice or unpausing a running lease never
//! reaches the driver, a paused lease refuses execute, sync, duplex and realize with the
//! paused text while release still works and drops the mark, and the gate's expiry and
//! activity checks come first.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use envrt_runtime_core::testkit::{ProbeDriver, ProbeShape};
use envrt_runtime_core::*;

/// The probe driver with a pause group that counts its calls.
struct Pausable {
    probe: ProbeDriver,
    pauses: AtomicUsize,
    unpauses: AtomicUsize,
}

#[async_trait]
impl EnvironmentDriver for Pausable {
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
    fn as_sync(&self) -> Option<&dyn FileSync> {
        self.probe.as_sync()
    }
    fn as_duplex(&self) -> Option<&dyn DuplexChannels> {
        self.probe.as_duplex()
    }
    fn as_realize(&self) -> Option<&dyn RealizeWorkspace> {
        self.probe.as_realize()
    }
    fn as_pause(&self) -> Option<&dyn PauseLease> {
        Some(self)
    }
}

#[async_trait]
impl PauseLease for Pausable {
    async fn pause_lease(&self, _: &LeaseContext) -> Result<(), DriverError> {
        self.pauses.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    async fn unpause_lease(&self, _: &LeaseContext) -> Result<(), DriverError> {
        self.unpauses.fetch_add(1, Ordering::SeqCst);
        Ok(())
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

fn declaration() -> CapabilityDeclaration {
    CapabilityDeclaration {
        duplex_command_stream: Some(true),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_driver_without_the_group_is_refused_with_the_exact_text_and_never_reached() {
    let probe = Arc::new(ProbeDriver::new("probe", ProbeShape::full(), Some(declaration())));
    let runtime = runtime_with(probe.clone()).await;
    let lease = runtime.acquire_lease(AcquireRequest::new("env", "acme")).await.unwrap();
    let before = probe.operation_calls();
    for error in [
        runtime.pause_lease(&lease.id).await.unwrap_err(),
        runtime.unpause_lease(&lease.id).await.unwrap_err(),
    ] {
        assert_eq!(
            error.to_string(),
            "Environment driver \"probe\" does not support pause."
        );
        assert_eq!(error.kind(), "pause_unsupported");
    }
    assert_eq!(probe.operation_calls(), before);
    let stored = runtime.lease(&lease.id).await.unwrap().unwrap();
    assert!(!is_paused(&stored));
    assert_eq!(
        runtime.pause_lease("nope").await.unwrap_err().to_string(),
        "Lease \"nope\" was not found."
    );
}

#[tokio::test]
async fn a_paused_lease_is_recorded_refuses_and_still_releases() {
    let driver = Arc::new(Pausable {
        probe: ProbeDriver::new("pausable", ProbeShape::full(), Some(declaration())),
        pauses: AtomicUsize::new(0),
        unpauses: AtomicUsize::new(0),
    });
    let runtime = runtime_with(driver.clone()).await;
    let lease = runtime.acquire_lease(AcquireRequest::new("env", "acme")).await.unwrap();

    // Unpausing a running lease changes nothing and never reaches the driver.
    assert!(!is_paused(&runtime.unpause_lease(&lease.id).await.unwrap()));
    assert_eq!(driver.unpauses.load(Ordering::SeqCst), 0);

    let paused = runtime.pause_lease(&lease.id).await.unwrap();
    assert!(is_paused(&paused));
    assert!(paused_at(&paused).is_some());
    assert_eq!(paused.status, LeaseStatus::Active);
    let stored = runtime.lease(&lease.id).await.unwrap().unwrap();
    assert_eq!(stored.metadata.get(PAUSED_KEY), paused.metadata.get(PAUSED_KEY));
    runtime.pause_lease(&lease.id).await.unwrap();
    assert_eq!(
        driver.pauses.load(Ordering::SeqCst),
        1,
        "a second pause reached the driver"
    );

    let text = format!("Lease \"{}\" is paused.", lease.id);
    let refusals = [
        runtime
            .execute(&lease.id, ExecuteRequest::new("true", Vec::<String>::new()))
            .await
            .unwrap_err(),
        runtime.sync_in(&lease.id, &[]).await.unwrap_err(),
        runtime.sync_out(&lease.id, &[]).await.unwrap_err(),
        runtime
            .realize_workspace(&lease.id, &WorkspaceRequest::default())
            .await
            .unwrap_err(),
        match runtime.open_duplex_channel(&lease.id, &["cat".to_owned()]).await {
            Err(e) => e,
            Ok(_) => panic!("a paused lease opened a duplex channel"),
        },
    ];
    for error in refusals {
        assert_eq!(error.to_string(), text);
        assert_eq!(error.kind(), "lease_paused");
    }
    assert_eq!(driver.probe.calls("execute"), 0);

    assert!(!is_paused(&runtime.unpause_lease(&lease.id).await.unwrap()));
    assert_eq!(driver.unpauses.load(Ordering::SeqCst), 1);
    runtime
        .execute(&lease.id, ExecuteRequest::new("true", Vec::<String>::new()))
        .await
        .unwrap();

    runtime.pause_lease(&lease.id).await.unwrap();
    let released = runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert!(!is_paused(&released), "release drops the mark");
    let error = runtime.pause_lease(&lease.id).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("Lease \"{}\" is not active (status: released).", lease.id)
    );
}

#[tokio::test]
async fn an_expired_lease_is_refused_with_the_expiry_text_before_the_driver() {
    let driver = Arc::new(Pausable {
        probe: ProbeDriver::new("pausable", ProbeShape::full(), None),
        pauses: AtomicUsize::new(0),
        unpauses: AtomicUsize::new(0),
    });
    let runtime = runtime_with(driver.clone()).await;
    let mut request = AcquireRequest::new("env", "acme");
    request.requested_expires_at = Some(Timestamp::now().after(Duration::from_millis(300)));
    let lease = runtime.acquire_lease(request).await.unwrap();
    let at = lease.expires_at.unwrap();
    // The expiry passing is the event awaited here.
    while Timestamp::now() <= at {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let error = runtime.pause_lease(&lease.id).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("Lease \"{}\" expired at {}.", lease.id, at.to_rfc3339())
    );
    assert_eq!(driver.pauses.load(Ordering::SeqCst), 0);
}
