//! The network verbs of the facade: the checks `put_environment` and acquire run on an
//! environment's network setting and a lease's asked policy, the level `envrt caps` shows,
//! and [`EnvironmentRuntime::update_network_policy`] (see [`crate::network`]).

use crate::driver::EnvironmentDriver;
use crate::error::RuntimeError;
use crate::model::{Environment, LeaseStatus};
use crate::network::{self, NetworkBoundary, NetworkLevel, Policy};

use super::EnvironmentRuntime;

/// Refuses credentials on a driver that does not broker them (they would be ignored).
fn check_credentials(environment: &Environment, driver: &dyn EnvironmentDriver) -> Result<(), RuntimeError> {
    let has = matches!(
        &environment.network,
        Some(network::EnvironmentNetwork::Policy(config)) if !config.credentials().is_empty()
    );
    if has && !driver.brokers_credentials() {
        return Err(network::NetworkRefusal::NoBroker {
            driver: environment.driver.clone(),
        }
        .into());
    }
    Ok(())
}

/// The level `environment`'s leases get from `driver`, or the refusal of its setting.
pub(super) fn environment_level(
    environment: &Environment,
    driver: &dyn EnvironmentDriver,
) -> Result<NetworkLevel, RuntimeError> {
    check_credentials(environment, driver)?;
    let boundary = driver.network_boundary(environment);
    Ok(network::environment_level(
        &environment.driver,
        &boundary,
        environment.network.as_ref(),
    )?)
}

/// The level a lease asking for `asked` gets, or the refusal.
pub(super) fn lease_level(
    environment: &Environment,
    driver: &dyn EnvironmentDriver,
    asked: Option<&Policy>,
) -> Result<NetworkLevel, RuntimeError> {
    check_credentials(environment, driver)?;
    let boundary = driver.network_boundary(environment);
    Ok(network::lease_level(
        &environment.driver,
        &boundary,
        environment.network.as_ref(),
        asked,
    )?)
}

/// The policy a driver with an egress proxy enforces for a lease asking for `asked`
/// ([`AcquireInput::network`](crate::driver::AcquireInput::network)); `None` for every other
/// boundary, and where nothing names a policy.
pub(super) fn proxied_policy(
    environment: &Environment,
    driver: &dyn EnvironmentDriver,
    asked: Option<&Policy>,
) -> Result<Option<Policy>, RuntimeError> {
    if driver.network_boundary(environment) != NetworkBoundary::Proxied {
        return Ok(None);
    }
    Ok(network::lease_policy(environment.network.as_ref(), asked)?)
}

impl EnvironmentRuntime {
    /// The network level of `environment`'s leases (`no network`, `host network`, ...), as
    /// its registered driver enforces it; the refusal when its setting cannot be enforced.
    pub fn network_level(&self, environment: &Environment) -> Result<NetworkLevel, RuntimeError> {
        let driver = self.registered(&environment.driver)?;
        environment_level(environment, driver.as_ref())
    }

    /// Replaces the network policy of an active lease. The policy must be within the
    /// environment's policy or its `grantable` list, and the lease's driver must be able
    /// to enforce it; otherwise [`RuntimeError::Network`] with the refusal, and nothing
    /// changes. A driver with an egress proxy applies it to new connections and cuts open
    /// ones it denies; on a driver whose leases have no network the only policy accepted is
    /// `egress = "none"`, which they already have (the update is then a no-op: there is
    /// no connection to cut).
    pub async fn update_network_policy(&self, lease_id: &str, policy: &Policy) -> Result<NetworkLevel, RuntimeError> {
        self.traced("update_network_policy", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let lease = &resolved.context.lease;
            if lease.status != LeaseStatus::Active {
                return Err(RuntimeError::LeaseNotActive {
                    id: lease.id.clone(),
                    status: lease.status,
                });
            }
            let environment = resolved.context.environment.clone().unwrap_or_else(|| {
                Environment::new(
                    lease.environment_id.clone().unwrap_or_default(),
                    resolved.key.clone(),
                    resolved.key.clone(),
                )
            });
            let level = lease_level(&environment, resolved.driver.as_ref(), Some(policy))?;
            if let Some(granted) = proxied_policy(&environment, resolved.driver.as_ref(), Some(policy))? {
                resolved
                    .driver
                    .update_network_policy(&resolved.context, &granted)
                    .await?;
            }
            Ok(level)
        })
        .await
    }
}
