//! The example driver: leases that hold nothing, no optional group, no capability.

use async_trait::async_trait;
use envrt_driver_api::descriptor::DriverConfig;
use envrt_driver_api::driver::{AcquireInput, CapabilityInput, LeaseGrant, ReleaseInput, classify_driver};
use envrt_driver_api::{CapabilitySnapshot, DriverError, EnvironmentDriver};

/// The registry key of this driver.
pub const DRIVER_KEY: &str = "example";

/// Its settings: whether a runtime built from them registers the driver. Off by default,
/// so that a build with the facade's `example` feature (such as an `--all-features`
/// workspace build) registers nothing it did not ask for.
#[derive(Clone, Debug, Default)]
pub struct ExampleConfig {
    /// Register the driver under [`DRIVER_KEY`].
    pub register: bool,
}

impl DriverConfig for ExampleConfig {
    const KEY: &'static str = DRIVER_KEY;
}

/// A driver whose leases hold nothing and which offers no optional operation.
#[derive(Debug, Default)]
pub struct ExampleDriver;

impl ExampleDriver {
    /// The driver (it needs nothing to start).
    pub fn new() -> Self {
        Self
    }
}

#[async_trait]
impl EnvironmentDriver for ExampleDriver {
    fn key(&self) -> &str {
        DRIVER_KEY
    }

    async fn acquire_lease(&self, _: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        Ok(LeaseGrant {
            provider: Some(DRIVER_KEY.to_owned()),
            provider_lease_id: Some(uuid::Uuid::new_v4().to_string()),
            metadata: Default::default(),
            expires_at: None,
        })
    }

    /// Nothing to end: a success for any lease, any number of times.
    async fn release_lease(&self, _: &ReleaseInput) -> Result<(), DriverError> {
        Ok(())
    }

    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        Ok(classify_driver(self, Default::default(), None, input, true))
    }
}
