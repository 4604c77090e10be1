//! # envrt-driver-refuse
//!
//! The smallest driver: key `refuse`, no optional operation, no capability, and every
//! lease refused with [`REFUSAL`]. It exists to show what adding a driver takes (see
//! `docs/writing-a-driver.md`): this crate, one workspace line, one feature and one
//! registry line in the facade, one conformance target.

#![forbid(unsafe_code)]

use std::any::Any;
use std::collections::BTreeMap;

use async_trait::async_trait;
use envrt_runtime_core::descriptor::{
    BuildContext, Built, DriverConfig, DriverDescriptor, DriverSettings, SettingsContext,
};
use envrt_runtime_core::driver::{AcquireInput, CapabilityInput, LeaseGrant, ReleaseInput, classify_driver};
use envrt_runtime_core::{CapabilitySnapshot, DriverError, Environment, EnvironmentDriver};

/// The registry key of this driver.
pub const DRIVER_KEY: &str = "refuse";

/// Why every lease is refused.
pub const REFUSAL: &str = "The refuse driver leases nothing.";

/// A driver that refuses everything.
#[derive(Debug, Default)]
pub struct RefuseDriver;

#[async_trait]
impl EnvironmentDriver for RefuseDriver {
    fn key(&self) -> &str {
        DRIVER_KEY
    }

    async fn acquire_lease(&self, _: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        Err(DriverError::Unavailable {
            message: REFUSAL.into(),
            source: None,
        })
    }

    async fn release_lease(&self, _: &ReleaseInput) -> Result<(), DriverError> {
        Ok(())
    }

    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        Ok(classify_driver(self, Default::default(), None, input, true))
    }
}

/// Its settings: none.
#[derive(Clone, Debug, Default)]
pub struct RefuseConfig;

impl DriverConfig for RefuseConfig {
    const KEY: &'static str = DRIVER_KEY;
}

/// The driver's descriptor (the facade registers it under feature `refuse`).
pub static DESCRIPTOR: RefuseDescriptor = RefuseDescriptor;

/// See [`DESCRIPTOR`].
#[derive(Debug)]
pub struct RefuseDescriptor;

#[async_trait]
impl DriverDescriptor for RefuseDescriptor {
    fn key(&self) -> &'static str {
        DRIVER_KEY
    }

    fn default_settings(&self) -> DriverSettings {
        Box::new(RefuseConfig)
    }

    fn settings(
        &self,
        _: &BTreeMap<String, serde_json::Value>,
        _: &SettingsContext<'_>,
    ) -> Result<DriverSettings, String> {
        Ok(self.default_settings())
    }

    async fn build(&self, _: &(dyn Any + Send + Sync), context: &BuildContext<'_>) -> Result<Vec<Built>, String> {
        Ok(match context.needs(DRIVER_KEY) {
            true => vec![Built::new(DRIVER_KEY, Ok(RefuseDriver))],
            false => Vec::new(),
        })
    }

    fn isolation(&self, _: &Environment) -> Vec<(String, String)> {
        vec![("isolation".into(), "nothing runs".into())]
    }
}
