//! Lease networks at the facade: `put_environment`, acquire and `update_network_policy`
//! ask the driver's declared network boundary and refuse, with the exact texts, what it
//! cannot enforce; the driver is never asked to acquire a lease it would run unenforced.

use std::sync::Mutex;

use async_trait::async_trait;
use envrt_runtime_core::capability::CapabilityKey;
use envrt_runtime_core::driver::classify_driver;
use envrt_runtime_core::network::{Egress, EnvironmentNetwork, HostNetwork, NetworkBoundary, NetworkConfig, Policy};
use envrt_runtime_core::*;

/// A driver declaring `boundary`, counting its acquires and recording the policy each
/// acquire and each update handed it.
struct Bounded {
    boundary: NetworkBoundary,
    acquires: Mutex<usize>,
    policies: Mutex<Vec<(&'static str, Option<Policy>)>>,
}

#[async_trait]
impl EnvironmentDriver for Bounded {
    fn key(&self) -> &str {
        "bounded"
    }
    fn network_boundary(&self, _: &Environment) -> NetworkBoundary {
        self.boundary.clone()
    }
    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        *self.acquires.lock().unwrap() += 1;
        self.policies.lock().unwrap().push(("acquire", input.network.clone()));
        Ok(LeaseGrant::default())
    }
    async fn update_network_policy(&self, _: &LeaseContext, policy: &Policy) -> Result<(), DriverError> {
        self.policies.lock().unwrap().push(("update", Some(policy.clone())));
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

fn runtime(boundary: NetworkBoundary) -> (EnvironmentRuntime, std::sync::Arc<Bounded>) {
    let driver = std::sync::Arc::new(Bounded {
        boundary,
        acquires: Mutex::new(0),
        policies: Mutex::new(Vec::new()),
    });
    let runtime = EnvironmentRuntime::new();
    runtime.register_driver(driver.clone());
    (runtime, driver)
}

fn with_network(network: EnvironmentNetwork) -> Environment {
    let mut env = Environment::new("e", "E", "bounded");
    env.network = Some(network);
    env
}

fn policy(egress: Egress, allow: &[&str]) -> Policy {
    Policy::new(egress, allow).unwrap()
}

#[tokio::test]
async fn put_environment_refuses_what_the_boundary_cannot_enforce() {
    let (rt, _) = runtime(NetworkBoundary::HostShared);
    let policy_env = with_network(EnvironmentNetwork::Policy(NetworkConfig::default()));
    let err = rt.put_environment(policy_env).await.unwrap_err();
    assert_eq!(err.kind(), "network_refused");
    assert_eq!(
        err.to_string(),
        "Network policy refused: driver \"bounded\" cannot enforce a network policy: its commands share the \
         host's network; drop the policy, or set network = \"host\" to run on the host network unrestricted"
    );
    assert!(
        rt.environment("e").await.unwrap().is_none(),
        "a refused environment was stored"
    );
    rt.put_environment(with_network(EnvironmentNetwork::Host(HostNetwork::Host)))
        .await
        .unwrap();
    assert_eq!(
        rt.network_level(&rt.environment("e").await.unwrap().unwrap())
            .unwrap()
            .to_string(),
        "host network"
    );
}

#[tokio::test]
async fn an_acquire_beyond_grantable_or_the_boundary_is_refused_before_the_driver() {
    let (rt, driver) = runtime(NetworkBoundary::Isolated);
    let config = NetworkConfig::new(Policy::none(), &["pypi.org:443"]).unwrap();
    rt.put_environment(with_network(EnvironmentNetwork::Policy(config)))
        .await
        .unwrap();
    let mut request = AcquireRequest::new("e", "acme");
    request.network = Some(policy(Egress::Allow, &["example.com"]));
    assert_eq!(
        rt.acquire_lease(request.clone()).await.unwrap_err().to_string(),
        "Network policy refused: the lease asks for \"example.com\", which the environment's policy neither \
         allows nor lists as grantable"
    );
    request.network = Some(policy(Egress::Allow, &["pypi.org:443"]));
    assert_eq!(
        rt.acquire_lease(request.clone()).await.unwrap_err().to_string(),
        "Network policy refused: driver \"bounded\" cannot enforce egress = \"allow\" yet: its leases have no \
         network at all, so only egress = \"none\" is accepted"
    );
    assert_eq!(*driver.acquires.lock().unwrap(), 0, "the driver was asked anyway");
    request.network = Some(Policy::none());
    let lease = rt.acquire_lease(request).await.unwrap();
    assert_eq!(*driver.acquires.lock().unwrap(), 1);
    // A live update: "none" is what the lease has; anything wider is refused.
    let level = rt.update_network_policy(&lease.id, &Policy::none()).await.unwrap();
    assert_eq!(level.to_string(), "no network");
    let err = rt
        .update_network_policy(&lease.id, &policy(Egress::Open, &[]))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Network policy refused: the lease asks for egress = \"open\", but the environment's policy is egress = \
         \"none\" and \"open\" is not grantable"
    );
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    let err = rt.update_network_policy(&lease.id, &Policy::none()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Lease \"{}\" is not active (status: released).", lease.id)
    );
}

#[tokio::test]
async fn an_undeclared_driver_accepts_only_environments_silent_on_the_network() {
    let (rt, _) = runtime(NetworkBoundary::Undeclared);
    rt.put_environment(Environment::new("plain", "Plain", "bounded"))
        .await
        .unwrap();
    let lease = rt.acquire_lease(AcquireRequest::new("plain", "acme")).await.unwrap();
    assert_eq!(
        rt.update_network_policy(&lease.id, &Policy::none())
            .await
            .unwrap_err()
            .to_string(),
        "Network policy refused: driver \"bounded\" does not declare what it does with its leases' network, so \
         no network setting can be enforced there"
    );
    let err = rt
        .put_environment(with_network(EnvironmentNetwork::Host(HostNetwork::Host)))
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Network(_)), "{err:?}");
}

#[tokio::test]
async fn a_proxied_driver_is_handed_the_policy_in_force_at_acquire_and_on_each_update() {
    let (rt, driver) = runtime(NetworkBoundary::Proxied);
    let env_policy = policy(Egress::Allow, &["pypi.org:443"]);
    let config = NetworkConfig::new(env_policy.clone(), &["api.github.com:443"]).unwrap();
    rt.put_environment(with_network(EnvironmentNetwork::Policy(config)))
        .await
        .unwrap();
    assert_eq!(
        rt.network_level(&rt.environment("e").await.unwrap().unwrap())
            .unwrap()
            .to_string(),
        "egress proxy (allow)"
    );
    // The environment's policy, then a lease's own widened within grantable.
    let plain = rt.acquire_lease(AcquireRequest::new("e", "acme")).await.unwrap();
    let mut request = AcquireRequest::new("e", "acme");
    let widened = policy(Egress::Allow, &["pypi.org:443", "api.github.com:443"]);
    request.network = Some(widened.clone());
    let own = rt.acquire_lease(request).await.unwrap();
    // An update within the grants reaches the driver; one beyond them does not.
    let level = rt.update_network_policy(&plain.id, &Policy::none()).await.unwrap();
    assert_eq!(level.to_string(), "no network");
    let err = rt
        .update_network_policy(&own.id, &policy(Egress::Allow, &["evil.test"]))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Network policy refused: the lease asks for \"evil.test\", which the environment's policy neither \
         allows nor lists as grantable"
    );
    assert_eq!(
        *driver.policies.lock().unwrap(),
        vec![
            ("acquire", Some(env_policy)),
            ("acquire", Some(widened)),
            ("update", Some(Policy::none())),
        ]
    );
    // Refused before any driver on a boundary that cannot take host networking.
    let err = rt
        .put_environment(with_network(EnvironmentNetwork::Host(HostNetwork::Host)))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Network policy refused: driver \"bounded\" cannot give a lease the host network: its leases have a \
         network of their own with no route out"
    );
}
