//! The address ranges denied even under `egress = "open"`, and CIDR arithmetic.
//!
//! An address in one of these ranges is reachable only when an allow entry that is a CIDR
//! *inside* that range covers it (so `0.0.0.0/0` does not open the metadata address, but
//! `169.254.169.254/32` does). IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) are judged as
//! the IPv4 address they carry.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A network: an address and a prefix length, host bits zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    len: u8,
}

impl Cidr {
    /// A network from an address and a prefix length, or `None` when the length is too long
    /// or host bits are set.
    pub fn new(addr: IpAddr, len: u8) -> Option<Self> {
        let max = max_len(addr);
        if len > max || mask(addr, len) != bits(addr) {
            return None;
        }
        Some(Self { addr, len })
    }

    /// The network's address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// Whether `ip` is in this network (IPv4 and IPv6 never mix).
    pub fn contains(&self, ip: IpAddr) -> bool {
        same_family(self.addr, ip) && mask(ip, self.len) == bits(self.addr)
    }

    /// Whether `other` lies entirely inside this network.
    pub fn covers(&self, other: &Cidr) -> bool {
        other.len >= self.len && self.contains(other.addr)
    }

    /// Whether the two networks share any address.
    pub fn overlaps(&self, other: &Cidr) -> bool {
        self.covers(other) || other.covers(self)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

fn same_family(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

fn max_len(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

fn bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn mask(addr: IpAddr, len: u8) -> u128 {
    let width = u32::from(max_len(addr));
    let len = u32::from(len).min(width);
    if len == 0 {
        return 0;
    }
    let full = if width == 128 { !0u128 } else { (1u128 << width) - 1 };
    let host = (1u128 << (width - len)) - 1;
    bits(addr) & full & !host
}

/// One denied range: the network and the name a refusal gives it.
#[derive(Clone, Copy, Debug)]
pub struct DeniedRange {
    /// The network.
    pub net: Cidr,
    /// What it is, as refusals name it ("private", "cloud metadata", ...).
    pub what: &'static str,
}

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8, what: &'static str) -> DeniedRange {
    DeniedRange {
        net: Cidr {
            addr: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
            len,
        },
        what,
    }
}

const fn v6(s: [u16; 8], len: u8, what: &'static str) -> DeniedRange {
    DeniedRange {
        net: Cidr {
            addr: IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])),
            len,
        },
        what,
    }
}

/// Every range denied unless an allow CIDR inside it names it. Most specific first, so a
/// refusal names the narrowest range ("cloud metadata" before "link-local").
pub const DENIED: &[DeniedRange] = &[
    v4(169, 254, 169, 254, 32, "cloud metadata"),
    v4(168, 63, 129, 16, 32, "cloud metadata"),
    v4(100, 100, 100, 200, 32, "cloud metadata"),
    v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254], 128, "cloud metadata"),
    v4(0, 0, 0, 0, 8, "this-network"),
    v4(10, 0, 0, 0, 8, "private"),
    v4(100, 64, 0, 0, 10, "CGNAT"),
    v4(127, 0, 0, 0, 8, "loopback"),
    v4(169, 254, 0, 0, 16, "link-local"),
    v4(172, 16, 0, 0, 12, "private"),
    v4(192, 0, 0, 0, 24, "IETF protocol assignments"),
    v4(192, 168, 0, 0, 16, "private"),
    v4(224, 0, 0, 0, 4, "multicast"),
    v4(240, 0, 0, 0, 4, "reserved"),
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128, "unspecified"),
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, "loopback"),
    v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96, "IPv4-mapped"),
    v6([0, 0, 0, 0, 0, 0, 0, 0], 96, "IPv4-compatible"),
    v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, "NAT64"),
    v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, "NAT64"),
    v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "discard"),
    v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "unique-local"),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "link-local"),
    v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "site-local"),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "multicast"),
];

/// An address as policy judges it: IPv4-mapped IPv6 becomes the IPv4 address it carries.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// The denied ranges `ip` falls in (most specific first); empty when none.
pub(crate) fn denied_ranges(ip: IpAddr) -> impl Iterator<Item = &'static DeniedRange> {
    let ip = canonical(ip);
    DENIED.iter().filter(move |r| r.net.contains(ip))
}
