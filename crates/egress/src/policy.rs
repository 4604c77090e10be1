//! The network policy: `egress = "none" | "allow" | "open"`, the allow list, what a lease may
//! be granted, and the decisions the proxy and the DNS stub take from it.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::entry::{Host, Rule, parse_list};
use crate::ranges::{self, Cidr};

/// How much of the network a lease may reach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Egress {
    /// Nothing (the default).
    #[default]
    None,
    /// Only what the allow list names.
    Allow,
    /// Every name and public address; the denied ranges stay denied unless a CIDR names them.
    Open,
}

impl Egress {
    /// The value as written in TOML.
    pub fn as_str(self) -> &'static str {
        match self {
            Egress::None => "none",
            Egress::Allow => "allow",
            Egress::Open => "open",
        }
    }

    fn parse(s: &str) -> Result<Self, PolicyError> {
        match s {
            "none" => Ok(Egress::None),
            "allow" => Ok(Egress::Allow),
            "open" => Ok(Egress::Open),
            other => Err(PolicyError::UnknownEgress(other.to_string())),
        }
    }
}

/// A policy that does not parse; each text is pinned by a test.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A `[[environment.network.credential]]` entry that does not parse.
    #[error(transparent)]
    Credential(#[from] crate::credential::CredentialError),
    /// `egress` is not one of the three values.
    #[error("egress = \"{0}\": unknown value (expected \"none\", \"allow\" or \"open\")")]
    UnknownEgress(String),
    /// An entry is the empty string.
    #[error("{list}: entry {index} is empty")]
    EmptyEntry {
        /// `allow` or `grantable`.
        list: &'static str,
        /// Its position, from 0.
        index: usize,
    },
    /// A CIDR that is not one.
    #[error("{list}: \"{entry}\": bad CIDR: {reason}")]
    BadCidr {
        /// `allow` or `grantable`.
        list: &'static str,
        /// The entry as written.
        entry: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A port that is not 1 to 65535.
    #[error("{list}: \"{entry}\": bad port \"{port}\": a port is a number from 1 to 65535")]
    BadPort {
        /// `allow` or `grantable`.
        list: &'static str,
        /// The entry as written.
        entry: String,
        /// The port text.
        port: String,
    },
    /// A `*` anywhere but as a whole leading label.
    #[error("{list}: \"{entry}\": bad wildcard: only a whole leading label \"*.\" may be a wildcard")]
    BadWildcard {
        /// `allow` or `grantable`.
        list: &'static str,
        /// The entry as written.
        entry: String,
    },
    /// A host name that is not one.
    #[error("{list}: \"{entry}\": bad name: {reason}")]
    BadName {
        /// `allow` or `grantable`.
        list: &'static str,
        /// The entry as written.
        entry: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Allow entries under `egress = "none"`, which would silently mean nothing.
    #[error("allow: entries need egress = \"allow\" or \"open\" (egress is \"none\")")]
    AllowUnderNone,
}

/// Why the policy refuses a connection or a name; the proxy's 403 bodies and the DNS stub's
/// logs carry this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The policy is `egress = "none"`.
    #[error("egress is \"none\"")]
    EgressNone,
    /// No allow entry names the host.
    #[error("host \"{0}\" is not in the allow list")]
    NameNotAllowed(String),
    /// The host is named, but not with this port.
    #[error("port {port} is not allowed for host \"{host}\"")]
    PortNotAllowed {
        /// The host as asked for.
        host: String,
        /// The port asked for.
        port: u16,
    },
    /// No allow CIDR covers the address.
    #[error("address {0} is not in the allow list")]
    AddressNotAllowed(IpAddr),
    /// The address is in a denied range no allow CIDR inside it names.
    #[error("address {ip} is in the {what} range {range}")]
    DeniedRange {
        /// The address (IPv4-mapped IPv6 shown as IPv4).
        ip: IpAddr,
        /// The denied range.
        range: Cidr,
        /// What the range is.
        what: &'static str,
    },
}

/// A policy: the egress level and the allow list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    egress: Egress,
    allow: Vec<Rule>,
}

/// The wire shape of a policy (`egress`, `allow`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    /// `"none"`, `"allow"` or `"open"`; absent means `"none"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<String>,
    /// Allow entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
}

impl TryFrom<RawPolicy> for Policy {
    type Error = PolicyError;
    fn try_from(raw: RawPolicy) -> Result<Self, PolicyError> {
        let egress = raw.egress.as_deref().map_or(Ok(Egress::None), Egress::parse)?;
        let entries: Vec<&str> = raw.allow.iter().map(String::as_str).collect();
        Policy::new(egress, &entries)
    }
}

impl From<Policy> for RawPolicy {
    fn from(p: Policy) -> Self {
        RawPolicy {
            egress: Some(p.egress.as_str().to_string()),
            allow: p.allow.iter().map(ToString::to_string).collect(),
        }
    }
}

impl Serialize for Policy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RawPolicy::from(self.clone()).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Policy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Policy::try_from(RawPolicy::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl Policy {
    /// A policy from its level and allow entries (the grammar is in the crate docs).
    pub fn new(egress: Egress, allow: &[&str]) -> Result<Self, PolicyError> {
        let allow = parse_list("allow", allow)?;
        if egress == Egress::None && !allow.is_empty() {
            return Err(PolicyError::AllowUnderNone);
        }
        Ok(Self { egress, allow })
    }

    /// `egress = "none"`.
    pub fn none() -> Self {
        Self::default()
    }

    /// The egress level.
    pub fn egress(&self) -> Egress {
        self.egress
    }

    /// The allow entries.
    pub fn allow(&self) -> &[Rule] {
        &self.allow
    }

    /// Whether a connection to host name `name` may be made at all (`port: None`: at any
    /// port, as the DNS stub asks). The addresses it resolves to are judged by
    /// [`Policy::check_resolved`].
    pub fn check_name(&self, name: &str, port: Option<u16>) -> Result<(), Refusal> {
        let name = normalize(name);
        match self.egress {
            Egress::None => Err(Refusal::EgressNone),
            Egress::Open => Ok(()),
            Egress::Allow => {
                let mut named = self.allow.iter().filter(|r| r.host.matches_name(&name)).peekable();
                if named.peek().is_none() {
                    return Err(Refusal::NameNotAllowed(name));
                }
                match port {
                    None => Ok(()),
                    Some(p) if named.any(|r| r.port_ok(p)) => Ok(()),
                    Some(p) => Err(Refusal::PortNotAllowed { host: name, port: p }),
                }
            }
        }
    }

    /// Whether an address that an allowed name resolved to may be connected to (`port:
    /// None`: at any port).
    pub fn check_resolved(&self, ip: IpAddr, port: Option<u16>) -> Result<(), Refusal> {
        if self.egress == Egress::None {
            return Err(Refusal::EgressNone);
        }
        self.check_denied(ranges::canonical(ip), port)
    }

    /// Whether a connection to a raw address (no name) may be made.
    pub fn check_ip(&self, ip: IpAddr, port: u16) -> Result<(), Refusal> {
        let ip = ranges::canonical(ip);
        if self.egress == Egress::None {
            return Err(Refusal::EgressNone);
        }
        self.check_denied(ip, Some(port))?;
        if self.egress == Egress::Open {
            return Ok(());
        }
        let mut covering = self.cidrs().filter(|(c, _)| c.contains(ip)).peekable();
        if covering.peek().is_none() {
            return Err(Refusal::AddressNotAllowed(ip));
        }
        if covering.any(|(_, r)| r.port_ok(port)) {
            Ok(())
        } else {
            Err(Refusal::PortNotAllowed {
                host: ip.to_string(),
                port,
            })
        }
    }

    fn cidrs(&self) -> impl Iterator<Item = (&Cidr, &Rule)> {
        self.allow.iter().filter_map(|r| match &r.host {
            Host::Net(c) => Some((c, r)),
            _ => None,
        })
    }

    /// Refuses `ip` when it lies in a denied range that no allow CIDR inside that range
    /// covers (with a matching port).
    fn check_denied(&self, ip: IpAddr, port: Option<u16>) -> Result<(), Refusal> {
        for d in ranges::denied_ranges(ip) {
            let exempt = self
                .cidrs()
                .any(|(c, r)| d.net.covers(c) && c.contains(ip) && port.is_none_or(|p| r.port_ok(p)));
            if !exempt {
                return Err(Refusal::DeniedRange {
                    ip,
                    range: d.net,
                    what: d.what,
                });
            }
        }
        Ok(())
    }
}

/// A host name as policy compares it: lower case, one trailing dot dropped.
pub(crate) fn normalize(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
