//! `[environment.network]`: an environment's policy plus its `grantable` list, and what a
//! lease may ask for (narrowing always; widening only within `grantable`).

use serde::{Deserialize, Serialize};

use crate::credential::{Credential, RawCredential};
use crate::entry::{Host, Rule, parse_list};
use crate::policy::{Egress, Policy, PolicyError, RawPolicy};
use crate::ranges::DENIED;

/// An environment's network section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkConfig {
    policy: Policy,
    grantable: Vec<Rule>,
    credentials: Vec<Credential>,
}

/// The TOML shape of `[environment.network]`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNetwork {
    /// `"none"` (the default), `"allow"` or `"open"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<String>,
    /// Allow entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Entries a lease may add to its own policy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grantable: Vec<String>,
    /// `[[environment.network.credential]]`: secrets the proxy puts on requests to their
    /// hosts (see the `credential` module).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credential: Vec<RawCredential>,
}

impl TryFrom<RawNetwork> for NetworkConfig {
    type Error = PolicyError;
    fn try_from(raw: RawNetwork) -> Result<Self, PolicyError> {
        let policy = Policy::try_from(RawPolicy {
            egress: raw.egress,
            allow: raw.allow,
        })?;
        let entries: Vec<&str> = raw.grantable.iter().map(String::as_str).collect();
        let grantable = parse_list("grantable", &entries)?;
        let credentials = Credential::parse_all(&raw.credential)?;
        Ok(Self {
            policy,
            grantable,
            credentials,
        })
    }
}

impl<'de> Deserialize<'de> for NetworkConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        NetworkConfig::try_from(RawNetwork::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl Serialize for NetworkConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let raw = RawPolicy::from(self.policy.clone());
        RawNetwork {
            egress: raw.egress,
            allow: raw.allow,
            grantable: self.grantable.iter().map(ToString::to_string).collect(),
            credential: self.credentials.iter().map(Credential::to_raw).collect(),
        }
        .serialize(s)
    }
}

/// A lease's request the environment does not permit; texts pinned by tests.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// A higher egress level than the environment gives.
    #[error(
        "the lease asks for egress = \"{asked}\", but the environment's policy is egress = \"{env}\" and \"{asked}\" is not grantable"
    )]
    Egress {
        /// What the lease asked for.
        asked: &'static str,
        /// The environment's level.
        env: &'static str,
    },
    /// An entry neither the policy nor `grantable` covers.
    #[error("the lease asks for \"{0}\", which the environment's policy neither allows nor lists as grantable")]
    Entry(String),
}

impl NetworkConfig {
    /// A section from a policy and grantable entries.
    pub fn new(policy: Policy, grantable: &[&str]) -> Result<Self, PolicyError> {
        Ok(Self {
            policy,
            grantable: parse_list("grantable", grantable)?,
            credentials: Vec::new(),
        })
    }

    /// The same section with `credentials` (checked: see [`Credential::parse_all`]).
    pub fn with_credentials(mut self, credentials: &[RawCredential]) -> Result<Self, PolicyError> {
        self.credentials = Credential::parse_all(credentials)?;
        Ok(self)
    }

    /// The credentials the proxy brokers for the environment's leases.
    pub fn credentials(&self) -> &[Credential] {
        &self.credentials
    }

    /// The environment's policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The grantable entries.
    pub fn grantable(&self) -> &[Rule] {
        &self.grantable
    }

    /// The policy a lease gets: the environment's when it asks for none, else what it asks
    /// for, provided every part is within the environment's policy or its `grantable` list.
    /// `"allow"` may be granted over `"none"` (entries then all from `grantable`); `"open"`
    /// only by an `"open"` environment.
    pub fn lease_policy(&self, asked: Option<&Policy>) -> Result<Policy, GrantError> {
        let Some(asked) = asked else {
            return Ok(self.policy.clone());
        };
        let env = self.policy.egress();
        match asked.egress() {
            Egress::None => return Ok(asked.clone()),
            Egress::Open if env != Egress::Open => {
                return Err(GrantError::Egress {
                    asked: "open",
                    env: env.as_str(),
                });
            }
            _ => {}
        }
        for rule in asked.allow() {
            if !self.grants(rule) {
                return Err(GrantError::Entry(rule.to_string()));
            }
        }
        Ok(asked.clone())
    }

    fn grants(&self, rule: &Rule) -> bool {
        if self.grantable.iter().any(|g| g.covers(rule)) {
            return true;
        }
        match self.policy.egress() {
            Egress::None => false,
            Egress::Allow => self.policy.allow().iter().any(|a| a.covers(rule)),
            Egress::Open => match &rule.host {
                Host::Name(_) | Host::Wildcard(_) => true,
                Host::Net(net) => {
                    !DENIED.iter().any(|d| d.net.overlaps(net)) || self.policy.allow().iter().any(|a| a.covers(rule))
                }
            },
        }
    }
}
