//! A forwarding driver that counts every call, so checks can prove that a refusal never
//! reached the driver under test. Running the suite through it also proves that a driver
//! works behind `Arc<dyn EnvironmentDriver>`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use envrt_runtime_core::capability::VerbSet;
use envrt_runtime_core::driver::*;
use envrt_runtime_core::{CapabilitySnapshot, DriverError, ExecuteRequest, ExecuteResult, SyncOperation, SyncResult};

/// Wraps a driver and counts calls per operation.
pub struct Recorder {
    inner: Arc<dyn EnvironmentDriver>,
    calls: Mutex<BTreeMap<&'static str, usize>>,
}

impl Recorder {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn EnvironmentDriver>) -> Self {
        Recorder {
            inner,
            calls: Mutex::new(BTreeMap::new()),
        }
    }

    /// The wrapped driver.
    pub fn inner(&self) -> &Arc<dyn EnvironmentDriver> {
        &self.inner
    }

    /// How many times `operation` reached the driver.
    pub fn calls(&self, operation: &str) -> usize {
        self.calls.lock().unwrap().get(operation).copied().unwrap_or(0)
    }

    fn record(&self, operation: &'static str) {
        *self.calls.lock().unwrap().entry(operation).or_default() += 1;
    }
}

fn vanished(operation: &str) -> DriverError {
    DriverError::other(format!("the driver withdrew {operation} while it was being called"))
}

#[async_trait]
impl EnvironmentDriver for Recorder {
    fn key(&self) -> &str {
        self.inner.key()
    }

    fn network_boundary(
        &self,
        environment: &envrt_runtime_core::Environment,
    ) -> envrt_runtime_core::network::NetworkBoundary {
        self.inner.network_boundary(environment)
    }

    fn brokers_credentials(&self) -> bool {
        self.inner.brokers_credentials()
    }

    async fn update_network_policy(
        &self,
        context: &LeaseContext,
        policy: &envrt_runtime_core::network::Policy,
    ) -> Result<(), DriverError> {
        self.record("update_network_policy");
        self.inner.update_network_policy(context, policy).await
    }

    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        self.record("acquire_lease");
        if input.template.is_some() {
            // Counted apart: checks run in parallel, and others acquire all the time.
            self.record("acquire_lease_from_template");
        }
        self.inner.acquire_lease(input).await
    }

    async fn release_lease(&self, input: &ReleaseInput) -> Result<(), DriverError> {
        self.record("release_lease");
        self.inner.release_lease(input).await
    }

    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        self.record("resolve_capabilities");
        self.inner.resolve_capabilities(input).await
    }

    fn as_resume(&self) -> Option<&dyn ResumeLease> {
        self.inner.as_resume().map(|_| self as _)
    }
    fn as_destroy(&self) -> Option<&dyn DestroyLease> {
        self.inner.as_destroy().map(|_| self as _)
    }
    fn as_realize(&self) -> Option<&dyn RealizeWorkspace> {
        self.inner.as_realize().map(|_| self as _)
    }
    fn as_execute(&self) -> Option<&dyn Execute> {
        self.inner.as_execute().map(|_| self as _)
    }
    fn as_sync(&self) -> Option<&dyn FileSync> {
        self.inner.as_sync().map(|_| self as _)
    }
    fn as_duplex(&self) -> Option<&dyn DuplexChannels> {
        self.inner.as_duplex().map(|_| self as _)
    }
    fn as_runner_ingress(&self) -> Option<&dyn envrt_runtime_core::RunnerIngress> {
        self.inner.as_runner_ingress().map(|_| self as _)
    }
    fn as_templates(&self) -> Option<&dyn envrt_runtime_core::Templates> {
        self.inner.as_templates()
    }
    fn as_processes(&self) -> Option<&dyn envrt_runtime_core::ProcessSessions> {
        self.inner.as_processes()
    }
    fn as_pause(&self) -> Option<&dyn envrt_runtime_core::PauseLease> {
        self.inner.as_pause()
    }
    fn as_fork(&self) -> Option<&dyn envrt_runtime_core::ForkLease> {
        self.inner.as_fork()
    }
    fn as_idle(&self) -> Option<&dyn envrt_runtime_core::IdleTimeout> {
        self.inner.as_idle()
    }
    fn as_extend(&self) -> Option<&dyn envrt_runtime_core::ExtendLease> {
        self.inner.as_extend()
    }
    // The idle check reads the inventory to see a lease end without touching it.
    fn as_recovery(&self) -> Option<&dyn envrt_runtime_core::Recovery> {
        self.inner.as_recovery()
    }
    fn verified_verbs(&self) -> VerbSet {
        self.inner.verified_verbs()
    }
    fn path_scope(&self) -> envrt_runtime_core::PathScope {
        self.inner.path_scope()
    }
}

#[async_trait]
impl ResumeLease for Recorder {
    async fn resume_lease(&self, context: &LeaseContext) -> Result<Option<LeaseGrant>, DriverError> {
        self.record("resume_lease");
        let op = self.inner.as_resume().ok_or_else(|| vanished("resume"))?;
        op.resume_lease(context).await
    }
}

#[async_trait]
impl DestroyLease for Recorder {
    async fn destroy_lease(&self, context: &LeaseContext) -> Result<(), DriverError> {
        self.record("destroy_lease");
        let op = self.inner.as_destroy().ok_or_else(|| vanished("destroy"))?;
        op.destroy_lease(context).await
    }
}

#[async_trait]
impl RealizeWorkspace for Recorder {
    async fn realize_workspace(
        &self,
        context: &LeaseContext,
        request: &WorkspaceRequest,
    ) -> Result<RealizedWorkspace, DriverError> {
        self.record("realize_workspace");
        let op = self.inner.as_realize().ok_or_else(|| vanished("realize"))?;
        op.realize_workspace(context, request).await
    }
}

#[async_trait]
impl Execute for Recorder {
    async fn execute(&self, context: &LeaseContext, request: ExecuteRequest) -> Result<ExecuteResult, DriverError> {
        self.record("execute");
        let op = self.inner.as_execute().ok_or_else(|| vanished("execute"))?;
        op.execute(context, request).await
    }
}

#[async_trait]
impl FileSync for Recorder {
    async fn sync_in(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        self.record("sync_in");
        let op = self.inner.as_sync().ok_or_else(|| vanished("sync"))?;
        op.sync_in(context, operations).await
    }

    async fn sync_out(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        self.record("sync_out");
        let op = self.inner.as_sync().ok_or_else(|| vanished("sync"))?;
        op.sync_out(context, operations).await
    }

    fn supports_sync(&self, context: &LeaseContext) -> bool {
        self.inner.as_sync().is_some_and(|s| s.supports_sync(context))
    }
}

#[async_trait]
impl DuplexChannels for Recorder {
    async fn open_duplex_channel(
        &self,
        context: &LeaseContext,
        command: &[String],
    ) -> Result<Box<dyn DuplexChannel>, DriverError> {
        self.record("open_duplex_channel");
        let op = self.inner.as_duplex().ok_or_else(|| vanished("duplex"))?;
        op.open_duplex_channel(context, command).await
    }
}

#[async_trait]
impl envrt_runtime_core::RunnerIngress for Recorder {
    async fn runner_ingress_endpoint(
        &self,
        context: &LeaseContext,
        port: u16,
        path: &str,
    ) -> Result<envrt_runtime_core::RunnerIngressEndpoint, DriverError> {
        self.record("runner_ingress");
        let op = self
            .inner
            .as_runner_ingress()
            .ok_or_else(|| vanished("runner ingress"))?;
        op.runner_ingress_endpoint(context, port, path).await
    }
}
