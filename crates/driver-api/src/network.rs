//! The network a lease gets, and what its driver can enforce of it.
//!
//! An environment says what network its leases get ([`EnvironmentNetwork`]): nothing said
//! (each driver's default), `network = "host"` (an explicit opt-in to the host's network,
//! unrestricted), or `[environment.network]`, a policy in the `envrt-egress` grammar
//! (`egress = "none" | "allow" | "open"`, `allow`, `grantable`). A lease may ask for a
//! policy of its own at acquire, and `EnvironmentRuntime::update_network_policy` (the runtime's) replaces it later; both
//! within the environment's policy or its `grantable` list.
//!
//! A driver declares its [`NetworkBoundary`]; the facade refuses, with a
//! [`NetworkRefusal`] whose text is pinned by tests, every setting the boundary cannot
//! enforce, at `put_environment` and at acquire. Nothing is pretended:
//!
//! | boundary | default | `network = "host"` | `egress = "none"` | `"allow"` / `"open"` |
//! |---|---|---|---|---|
//! | [`HostShared`](NetworkBoundary::HostShared) (local, ssh) | host network | host network | refused | refused |
//! | [`Isolated`](NetworkBoundary::Isolated) (sandbox, Docker `network = "none"` without the proxy) | no network | refused | no network | refused (no proxy) |
//! | [`Proxied`](NetworkBoundary::Proxied) (Docker `network = "none"` with `envrt-egress`) | no network | refused | no network | egress proxy |
//! | [`Unrestricted`](NetworkBoundary::Unrestricted) (Docker `bridge`, `host`, ...) | unrestricted | refused | refused | refused |
//! | [`Undeclared`](NetworkBoundary::Undeclared) (plugins) | undeclared | refused | refused | refused |
//!

use serde::{Deserialize, Serialize};

pub use envrt_egress::{
    Credential, CredentialError, Egress, GrantError, NetworkConfig, PLACEHOLDER, Policy, PolicyError, RawCredential,
    RawNetwork, RawPolicy, placeholder_env,
};

/// What an environment says about its leases' network.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EnvironmentNetwork {
    /// `network = "host"`: the leases use the host's network, unrestricted (accepted only
    /// by drivers whose commands share it).
    Host(HostNetwork),
    /// `[environment.network]`: a policy and its grantable entries.
    Policy(NetworkConfig),
}

/// The one string value `network` takes: `"host"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostNetwork {
    /// `"host"`.
    Host,
}

/// What a driver does with its leases' network (declared by
/// [`EnvironmentDriver::network_boundary`](crate::EnvironmentDriver::network_boundary)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetworkBoundary {
    /// Commands share the host's network: no policy can be enforced (local, ssh).
    HostShared,
    /// Leases have a network of their own with no route out (loopback only).
    Isolated,
    /// Leases have no route out of their own, and an egress proxy of the driver's carries
    /// what their policy allows (names and addresses judged by `envrt-egress`, DNS under the
    /// same policy). A driver declaring it MUST implement
    /// [`update_network_policy`](crate::EnvironmentDriver::update_network_policy) and start
    /// each lease under [`AcquireInput::network`](crate::AcquireInput::network).
    Proxied,
    /// Leases have a network the driver does not restrict; the text says which (e.g.
    /// `Docker network "bridge"`).
    Unrestricted(String),
    /// The driver does not say (the default; a plugin worker's own business).
    Undeclared,
}

/// What a lease's network is, as `envrt caps` and `envrt doctor` show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetworkLevel {
    /// No route out at all (`no network`).
    NoNetwork,
    /// The host's network, unrestricted (`host network`).
    HostNetwork,
    /// A network of the driver's own, unrestricted (`unrestricted (WHAT)`).
    Unrestricted(String),
    /// No route out but an egress proxy enforcing the policy (`egress proxy (allow)`,
    /// `egress proxy (open)`).
    Proxied(Egress),
    /// Not declared by the driver (`undeclared by the driver`).
    Undeclared,
}

impl std::fmt::Display for NetworkLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NetworkLevel::NoNetwork => f.write_str("no network"),
            NetworkLevel::HostNetwork => f.write_str("host network"),
            NetworkLevel::Unrestricted(what) => write!(f, "unrestricted ({what})"),
            NetworkLevel::Proxied(egress) => write!(f, "egress proxy ({})", egress.as_str()),
            NetworkLevel::Undeclared => f.write_str("undeclared by the driver"),
        }
    }
}

/// A network setting refused because the driver cannot enforce it, or because the lease
/// asks for more than the environment grants. Texts pinned by tests.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkRefusal {
    /// A policy on a driver whose commands share the host's network.
    #[error(
        "driver \"{driver}\" cannot enforce a network policy: its commands share the host's network; \
         drop the policy, or set network = \"host\" to run on the host network unrestricted"
    )]
    SharesHost {
        /// The driver key.
        driver: String,
    },
    /// `network = "host"` on a driver whose leases have no network.
    #[error(
        "driver \"{driver}\" cannot give a lease the host network: its leases have a network of their own \
         with no route out"
    )]
    NoHostNetwork {
        /// The driver key.
        driver: String,
    },
    /// A policy that opens egress on a driver that runs no egress proxy.
    #[error(
        "driver \"{driver}\" cannot enforce egress = \"{egress}\" yet: its leases have no network at all, \
         so only egress = \"none\" is accepted"
    )]
    NoProxy {
        /// The driver key.
        driver: String,
        /// `allow` or `open`.
        egress: &'static str,
    },
    /// A policy on a driver that gives its leases a network it does not restrict.
    #[error(
        "driver \"{driver}\" cannot enforce a network policy over {what}: the lease would reach the network \
         around the policy"
    )]
    Unrestricted {
        /// The driver key.
        driver: String,
        /// Which network (e.g. `Docker network "bridge"`).
        what: String,
    },
    /// Any network setting on a driver that does not declare its boundary.
    #[error(
        "driver \"{driver}\" does not declare what it does with its leases' network, so no network setting \
         can be enforced there"
    )]
    Undeclared {
        /// The driver key.
        driver: String,
    },
    /// Credentials on a driver whose proxy does not broker them.
    #[error(
        "driver \"{driver}\" cannot broker credentials ([[environment.network.credential]]): no proxy of its own \
         puts them on the lease's requests; remove them, or use a driver that brokers credentials"
    )]
    NoBroker {
        /// The driver key.
        driver: String,
    },
    /// A lease's policy outside the environment's policy and `grantable` list.
    #[error("{0}")]
    Grant(#[from] GrantError),
}

/// The level `environment`'s leases get under `boundary`, or why its network setting
/// cannot be enforced by driver `driver`.
pub fn environment_level(
    driver: &str,
    boundary: &NetworkBoundary,
    network: Option<&EnvironmentNetwork>,
) -> Result<NetworkLevel, NetworkRefusal> {
    let driver = driver.to_owned();
    match (boundary, network) {
        (NetworkBoundary::HostShared, None | Some(EnvironmentNetwork::Host(_))) => Ok(NetworkLevel::HostNetwork),
        (NetworkBoundary::HostShared, Some(EnvironmentNetwork::Policy(_))) => {
            Err(NetworkRefusal::SharesHost { driver })
        }
        (NetworkBoundary::Isolated, None) => Ok(NetworkLevel::NoNetwork),
        (NetworkBoundary::Isolated, Some(EnvironmentNetwork::Host(_))) => Err(NetworkRefusal::NoHostNetwork { driver }),
        (NetworkBoundary::Isolated, Some(EnvironmentNetwork::Policy(config))) => isolated(driver, config.policy()),
        (NetworkBoundary::Proxied, None) => Ok(NetworkLevel::NoNetwork),
        (NetworkBoundary::Proxied, Some(EnvironmentNetwork::Host(_))) => Err(NetworkRefusal::NoHostNetwork { driver }),
        (NetworkBoundary::Proxied, Some(EnvironmentNetwork::Policy(config))) => Ok(proxied(config.policy())),
        (NetworkBoundary::Unrestricted(what), None) => Ok(NetworkLevel::Unrestricted(what.clone())),
        (NetworkBoundary::Unrestricted(what), Some(_)) => Err(NetworkRefusal::Unrestricted {
            driver,
            what: what.clone(),
        }),
        (NetworkBoundary::Undeclared, None) => Ok(NetworkLevel::Undeclared),
        (NetworkBoundary::Undeclared, Some(_)) => Err(NetworkRefusal::Undeclared { driver }),
    }
}

/// The level a lease asking for `asked` gets: the environment's when it asks for none;
/// else the asked policy, once it is within the environment's policy or `grantable` list
/// and the boundary can enforce it.
pub fn lease_level(
    driver: &str,
    boundary: &NetworkBoundary,
    network: Option<&EnvironmentNetwork>,
    asked: Option<&Policy>,
) -> Result<NetworkLevel, NetworkRefusal> {
    let level = environment_level(driver, boundary, network)?;
    let Some(asked) = asked else {
        return Ok(level);
    };
    let driver = driver.to_owned();
    match boundary {
        NetworkBoundary::HostShared => Err(NetworkRefusal::SharesHost { driver }),
        NetworkBoundary::Unrestricted(what) => Err(NetworkRefusal::Unrestricted {
            driver,
            what: what.clone(),
        }),
        NetworkBoundary::Undeclared => Err(NetworkRefusal::Undeclared { driver }),
        NetworkBoundary::Isolated => isolated(driver, &granted_policy(network, asked)?),
        NetworkBoundary::Proxied => Ok(proxied(&granted_policy(network, asked)?)),
    }
}

/// The policy a lease asking for `asked` is granted within `network` (the environment's
/// policy, or `egress = "none"` when it says nothing).
fn granted_policy(network: Option<&EnvironmentNetwork>, asked: &Policy) -> Result<Policy, NetworkRefusal> {
    let default = NetworkConfig::default();
    let config = match network {
        Some(EnvironmentNetwork::Policy(config)) => config,
        _ => &default,
    };
    Ok(config.lease_policy(Some(asked))?)
}

/// The policy in force for a lease of an environment with `network` that asked for
/// `asked` (the facade checked it with [`lease_level`] first): the granted one, the
/// environment's when it asked for none, `None` when the environment says nothing about
/// the network (or says `"host"`) and the lease asked for nothing.
pub fn lease_policy(
    network: Option<&EnvironmentNetwork>,
    asked: Option<&Policy>,
) -> Result<Option<Policy>, NetworkRefusal> {
    match (asked, network) {
        (Some(asked), _) => granted_policy(network, asked).map(Some),
        (None, Some(EnvironmentNetwork::Policy(config))) => Ok(Some(config.policy().clone())),
        (None, _) => Ok(None),
    }
}

/// A proxied lease under `policy`: no network when it is `"none"`.
fn proxied(policy: &Policy) -> NetworkLevel {
    match policy.egress() {
        Egress::None => NetworkLevel::NoNetwork,
        other => NetworkLevel::Proxied(other),
    }
}

/// An isolated lease under `policy`: no network when it is `"none"`, else refused (the
/// driver runs no egress proxy).
fn isolated(driver: String, policy: &Policy) -> Result<NetworkLevel, NetworkRefusal> {
    match policy.egress() {
        Egress::None => Ok(NetworkLevel::NoNetwork),
        other => Err(NetworkRefusal::NoProxy {
            driver,
            egress: other.as_str(),
        }),
    }
}

#[cfg(test)]
#[path = "network_tests.rs"]
mod tests;
