//! One allow entry: a host name (optionally `*.`-wildcarded) or a CIDR, with an optional port;
//! parsing and coverage (whether one entry grants everything another does).

use std::net::IpAddr;

use crate::policy::PolicyError;
use crate::ranges::Cidr;

/// What an entry names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// Exactly this name.
    Name(String),
    /// Every name strictly below this suffix (`*.example.com` → `example.com`).
    Wildcard(String),
    /// Every address in this network.
    Net(Cidr),
}

impl Host {
    /// Whether a (normalized) host name is named by this entry.
    pub fn matches_name(&self, name: &str) -> bool {
        match self {
            Host::Name(n) => n == name,
            Host::Wildcard(suffix) => is_below(name, suffix),
            Host::Net(_) => false,
        }
    }
}

fn is_below(name: &str, suffix: &str) -> bool {
    name.len() > suffix.len() + 1 && name.ends_with(suffix) && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
}

/// One parsed allow entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// What it names.
    pub host: Host,
    /// The one port it allows, or every port.
    pub port: Option<u16>,
}

impl Rule {
    /// Whether `port` is allowed by this entry.
    pub fn port_ok(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }

    /// Whether this entry grants everything `other` grants.
    pub fn covers(&self, other: &Rule) -> bool {
        let port = match (self.port, other.port) {
            (None, _) => true,
            (Some(a), Some(b)) => a == b,
            (Some(_), None) => false,
        };
        port && match (&self.host, &other.host) {
            (Host::Name(a), Host::Name(b)) => a == b,
            (Host::Wildcard(d), Host::Name(n)) => is_below(n, d),
            (Host::Wildcard(d), Host::Wildcard(e)) => e == d || is_below(e, d),
            (Host::Net(a), Host::Net(b)) => a.covers(b),
            _ => false,
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.host, self.port) {
            (Host::Name(n), None) => write!(f, "{n}"),
            (Host::Name(n), Some(p)) => write!(f, "{n}:{p}"),
            (Host::Wildcard(d), None) => write!(f, "*.{d}"),
            (Host::Wildcard(d), Some(p)) => write!(f, "*.{d}:{p}"),
            (Host::Net(c), None) => write!(f, "{c}"),
            (Host::Net(c), Some(p)) if c.addr().is_ipv6() => write!(f, "[{c}]:{p}"),
            (Host::Net(c), Some(p)) => write!(f, "{c}:{p}"),
        }
    }
}

/// Parses a list of entries; `list` names it in errors (`allow`, `grantable`).
pub(crate) fn parse_list(list: &'static str, entries: &[&str]) -> Result<Vec<Rule>, PolicyError> {
    entries
        .iter()
        .enumerate()
        .map(|(index, e)| parse(list, index, e))
        .collect()
}

fn parse(list: &'static str, index: usize, entry: &str) -> Result<Rule, PolicyError> {
    if entry.is_empty() {
        return Err(PolicyError::EmptyEntry { list, index });
    }
    let bad_cidr = |reason: String| PolicyError::BadCidr {
        list,
        entry: entry.to_string(),
        reason,
    };
    let bad_port = |port: &str| PolicyError::BadPort {
        list,
        entry: entry.to_string(),
        port: port.to_string(),
    };
    let port_of = |text: &str| -> Result<u16, PolicyError> {
        match text.parse::<u16>() {
            Ok(p) if p != 0 && text.bytes().all(|b| b.is_ascii_digit()) => Ok(p),
            _ => Err(bad_port(text)),
        }
    };
    // `[v6]`, `[v6/len]`, each optionally `:port`.
    if let Some(rest) = entry.strip_prefix('[') {
        let Some((inner, after)) = rest.split_once(']') else {
            return Err(bad_cidr("a \"[\" without its \"]\"".to_string()));
        };
        let port = match after {
            "" => None,
            p => match p.strip_prefix(':') {
                Some(p) => Some(port_of(p)?),
                None => return Err(bad_cidr(format!("\"{after}\" after \"]\""))),
            },
        };
        let net = cidr(inner, true).map_err(bad_cidr)?;
        return Ok(Rule {
            host: Host::Net(net),
            port,
        });
    }
    if let Some((addr, rest)) = entry.split_once('/') {
        let (len, port) = match rest.split_once(':') {
            Some((len, p)) => (len, Some(port_of(p)?)),
            None => (rest, None),
        };
        let net = cidr(&format!("{addr}/{len}"), false).map_err(bad_cidr)?;
        return Ok(Rule {
            host: Host::Net(net),
            port,
        });
    }
    if let Ok(ip) = entry.parse::<IpAddr>() {
        let net = cidr(&ip.to_string(), false).map_err(bad_cidr)?;
        return Ok(Rule {
            host: Host::Net(net),
            port: None,
        });
    }
    let (name, port) = match entry.rsplit_once(':') {
        Some((n, p)) => (n, Some(port_of(p)?)),
        None => (entry, None),
    };
    if let Ok(ip) = name.parse::<std::net::Ipv4Addr>() {
        let net = cidr(&ip.to_string(), false).map_err(bad_cidr)?;
        return Ok(Rule {
            host: Host::Net(net),
            port,
        });
    }
    let (wild, name) = match name.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, name),
    };
    if name.contains('*') {
        return Err(PolicyError::BadWildcard {
            list,
            entry: entry.to_string(),
        });
    }
    let name = name.to_ascii_lowercase();
    check_name(&name).map_err(|reason| PolicyError::BadName {
        list,
        entry: entry.to_string(),
        reason,
    })?;
    let host = if wild { Host::Wildcard(name) } else { Host::Name(name) };
    Ok(Rule { host, port })
}

/// Parses `addr` or `addr/len` (IPv6 only when `v6_only`) into a network.
fn cidr(text: &str, v6_only: bool) -> Result<Cidr, String> {
    let (addr_text, len_text) = match text.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (text, None),
    };
    let addr: IpAddr = addr_text
        .parse()
        .map_err(|_| format!("\"{addr_text}\" is not an IP address"))?;
    if v6_only && addr.is_ipv4() {
        return Err(format!("\"{addr_text}\" in brackets is not an IPv6 address"));
    }
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len_text {
        None => max,
        Some(l) => match l.parse::<u8>() {
            Ok(n) if l.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(format!("\"{l}\" is not a prefix length")),
        },
    };
    if len > max {
        return Err(format!("the prefix length {len} is longer than {max}"));
    }
    Cidr::new(addr, len).ok_or_else(|| {
        let net = Cidr::new(network_of(addr, len), len).expect("masked network");
        format!("host bits are set (the network is {net})")
    })
}

fn network_of(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len))
            };
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

/// Checks a lower-cased host name (without a wildcard label).
fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("no name");
    }
    if name.len() > 253 {
        return Err("longer than 253 characters");
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("an empty label");
        }
        if label.len() > 63 {
            return Err("a label longer than 63 characters");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err("only letters, digits, \"-\" and \".\" may be in a name");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("a label starts or ends with \"-\"");
        }
    }
    if name
        .rsplit('.')
        .next()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err("the last label is all digits (not an IP address either)");
    }
    Ok(())
}
