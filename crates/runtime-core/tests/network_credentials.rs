//! Credentials (`[[environment.network.credential]]`) at the facade: accepted only by a
//! driver that brokers them, refused with the exact text by every other (a proxy that
//! ignored them would send the lease's placeholder and pretend), at `put_environment` and
//! again at acquire.

use async_trait::async_trait;
use envrt_runtime_core::capability::CapabilityKey;
use envrt_runtime_core::driver::classify_driver;
use envrt_runtime_core::network::{Egress, EnvironmentNetwork, NetworkBoundary, NetworkConfig, Policy, RawCredential};
use envrt_runtime_core::*;

/// A driver with an egress proxy that brokers credentials or not.
struct Proxied {
    brokers: bool,
}

#[async_trait]
impl EnvironmentDriver for Proxied {
    fn key(&self) -> &str {
        "proxied"
    }
    fn network_boundary(&self, _: &Environment) -> NetworkBoundary {
        NetworkBoundary::Proxied
    }
    fn brokers_credentials(&self) -> bool {
        self.brokers
    }
    async fn acquire_lease(&self, _: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        Ok(LeaseGrant::default())
    }
    async fn update_network_policy(&self, _: &LeaseContext, _: &Policy) -> Result<(), DriverError> {
        Ok(())
    }
    async fn release_lease(&self, _: &ReleaseInput) -> Result<(), DriverError> {
        Ok(())
    }
    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        let support = [CapabilityKey::NativeSyncIn].into_iter().collect();
        Ok(classify_driver(self, support, None, input, true))
    }
}

fn with_credential() -> Environment {
    let config = NetworkConfig::new(Policy::new(Egress::Allow, &["api.test:443"]).unwrap(), &[])
        .unwrap()
        .with_credentials(&[RawCredential {
            host: "api.test".into(),
            header: "Authorization".into(),
            value: "Bearer {secret}".into(),
            secret: "env:API_TOKEN".into(),
            placeholder_env: None,
        }])
        .unwrap();
    let mut env = Environment::new("e", "E", "proxied");
    env.network = Some(EnvironmentNetwork::Policy(config));
    env
}

#[tokio::test]
async fn credentials_are_refused_by_a_driver_that_does_not_broker_them() {
    let runtime = EnvironmentRuntime::new();
    runtime.register_driver(std::sync::Arc::new(Proxied { brokers: false }));
    let error = runtime.put_environment(with_credential()).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "Network policy refused: driver \"proxied\" cannot broker credentials ([[environment.network.credential]]): no proxy of its own puts them on the lease's requests; remove them, or use a driver that brokers credentials"
    );
    assert!(matches!(error, RuntimeError::Network(_)), "{error:?}");
}

#[tokio::test]
async fn credentials_are_accepted_by_a_driver_that_brokers_them() {
    let runtime = EnvironmentRuntime::new();
    runtime.register_driver(std::sync::Arc::new(Proxied { brokers: true }));
    runtime.put_environment(with_credential()).await.unwrap();
    let lease = runtime.acquire_lease(AcquireRequest::new("e", "acme")).await.unwrap();
    assert_eq!(lease.status, LeaseStatus::Active);
}
