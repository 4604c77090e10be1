//! envrt egress: the network policy a lease runs under, and the egress proxy and DNS stub
//! that enforce it. `envrt-runtime-core` uses its policy type and grant rules for an
//! environment's `[environment.network]` (`envrt_runtime_core::network`); the `envrt-egress`
//! binary ([`standalone`]) runs one lease's proxy and stub on unix sockets that a driver
//! binds into a lease with no route of its own (Docker does).
//!
//! # The policy (`[environment.network]`)
//!
//! ```toml
//! [environment.network]
//! egress = "allow"            # "none" (the default) | "allow" | "open"
//! allow = ["pypi.org", "*.pythonhosted.org:443", "203.0.113.0/24", "198.51.100.7/32:8080",
//!          "[2001:db8::/32]:443"]
//! grantable = ["api.github.com:443"]   # what a lease may add for itself
//! ```
//!
//! An entry is one of:
//! - a host name, lower-cased, labels of letters, digits and `-` (at most 63 characters each,
//!   253 in all), the last label not all digits; it names exactly that host;
//! - `*.` and a name: every name strictly below it (`*.example.com` is not `example.com`);
//!   no other `*` is accepted;
//! - a CIDR `a.b.c.d/len` or `v6/len` (host bits must be zero), or a bare address (a /32 or
//!   /128); an IPv6 CIDR with a port is written in brackets: `[2001:db8::/32]:443`;
//! - each optionally followed by `:port` (1 to 65535); without one, every port.
//!
//! Parse errors ([`PolicyError`]) name the list and the entry: `allow: entry 2 is empty`,
//! `allow: "10.0.0.1/8": bad CIDR: host bits are set (the network is 10.0.0.0/8)`,
//! `allow: "pypi.org:0": bad port "0": a port is a number from 1 to 65535`, `allow:
//! "py*.org": bad wildcard: only a whole leading label "*." may be a wildcard`, `egress =
//! "some": unknown value (expected "none", "allow" or "open")`. Allow entries under `"none"`
//! are an error, not silently ignored.
//!
//! Decisions ([`Policy::check_name`], [`Policy::check_resolved`], [`Policy::check_ip`]):
//! - `"none"`: nothing.
//! - `"allow"`: a name must match a name entry (and its port); a raw address must be in a
//!   CIDR entry (and its port); the addresses a name resolves to need no CIDR.
//! - `"open"`: every name and every address, except the denied ranges.
//! - Under both, an address in a denied range ([`DENIED`]: private 10/8, 172.16/12,
//!   192.168/16; loopback; link-local; CGNAT 100.64/10; this-network 0/8; multicast;
//!   reserved 240/4; IPv6 unspecified, loopback, unique-local fc00::/7, link-local,
//!   site-local, multicast, NAT64, IPv4-compatible; cloud metadata 169.254.169.254,
//!   fd00:ec2::254, 168.63.129.16, 100.100.100.200) is refused unless a CIDR entry lying
//!   *inside* that range covers it: `10.200.0.0/16` opens those addresses, `0.0.0.0/0` opens
//!   none of the denied ranges, and `169.254.0.0/16` does not open the metadata address
//!   (only `169.254.169.254/32` does). IPv4-mapped IPv6 addresses are judged as IPv4.
//!
//! Refusals ([`Refusal`]) read `host "x" is not in the allow list`, `port 8080 is not allowed
//! for host "x"`, `address 203.0.113.9 is not in the allow list`, `address 10.1.2.3 is in the
//! private range 10.0.0.0/8`, `egress is "none"`.
//!
//! Per lease ([`NetworkConfig::lease_policy`]): a lease may ask for any policy within the
//! environment's (narrowing) and may add entries only from `grantable` (widening); `"allow"`
//! may be granted over `"none"` when every entry is grantable, `"open"` only by an `"open"`
//! environment. Refusals: `the lease asks for "x", which the environment's policy neither
//! allows nor lists as grantable`, `the lease asks for egress = "open", but the environment's
//! policy is egress = "allow" and "open" is not grantable`.
//!
//! # The proxy ([`EgressProxy`])
//!
//! An HTTP/1 proxy (hyper) on a unix socket ([`EgressProxy::serve_unix`]) or a TCP listener
//! ([`EgressProxy::serve_tcp`]). It enforces:
//! - `CONNECT host:port` and absolute-URI `http://` requests only; the host is judged by the
//!   policy; a name is resolved by the proxy itself through its [`Resolver`] (a configured
//!   upstream, never `/etc/resolv.conf`), every address is judged (an allowed name that
//!   resolves only into denied ranges is refused: DNS rebinding), and the connection goes to
//!   the first allowed address resolved — nothing is resolved again.
//! - CONNECT tunnels must start with a TLS ClientHello (read with rustls's `Acceptor`, at
//!   most [`Limits::max_hello_bytes`] within [`Limits::hello_timeout`]) whose server name is
//!   the CONNECT host (a raw-address CONNECT must carry no server name); only then are the
//!   bytes sent upstream. A mismatch, a missing name or non-TLS bytes get a fatal TLS
//!   `access_denied` alert and a close (the 200 has already been sent, so no HTTP status);
//!   the log says why (`the TLS server name "x" does not match the CONNECT host "y"`, `the
//!   ClientHello names no server, but CONNECT named "y"`, `the ClientHello is longer than N
//!   bytes`, `no whole ClientHello arrived`, `the tunnel does not start with a TLS
//!   ClientHello (...)`).
//! - A plain request's `Host` header must name the URI's host and port.
//! - Refusals are `403` with the body `envrt egress: refused: REASON\n` (REASON a
//!   [`Refusal`] text, or `host "x" resolves only to denied addresses (REFUSAL)`, or `the
//!   Host header "h" does not match the request's host "x"`); malformed requests `400`
//!   `envrt egress: bad request: WHAT\n`; unreachable or unresolvable hosts `502`
//!   `envrt egress: WHAT\n`.
//! - [`EgressProxy::update_policy`] swaps the policy: new connections and DNS answers use it
//!   at once, and every open tunnel and every plain-HTTP response still streaming that the
//!   new policy denies (name, port or the connected address) is cut. Plain-HTTP requests on
//!   a kept-alive client connection are each judged under the policy in force.
//!
//! Bounds ([`Limits`], defaults in brackets): client connections including tunnels (1024;
//! more get `503` with [`too_many_connections_text`], `envrt egress: too many connections
//! (the limit is N)\n`, without their request being read); headers per request or response
//! (64; more get hyper's `431`); head bytes (16 KiB); time to send a request head (30 s);
//! tunnel and forwarded-response idle time (300 s); ClientHello bytes (32 KiB) and time
//! (10 s); upstream connect time (10 s); DNS queries in flight plus DNS TCP connections (256
//! together); DNS messages ([`MAX_QUERY`], 4096 bytes); addresses kept per name
//! ([`MAX_ADDRESSES`]). Bodies are streamed, never buffered whole. A connection over the
//! bound is answered without its request being parsed (what it sent is read and dropped, at
//! most 64 KiB within 5 s, so that the close does not reset the answer away).
//!
//! # The DNS stub ([`DnsStub`])
//!
//! UDP ([`DnsStub::serve_udp`]) and TCP ([`DnsStub::serve_tcp`]). For a name the policy
//! allows (at any port), A and AAAA are answered from the proxy's own resolution, denied
//! addresses removed (TTL [`ANSWER_TTL`]); other types get an empty NOERROR. A name the
//! policy does not allow, and an allowed name whose addresses are all denied, get REFUSED
//! (not NXDOMAIN: the name may exist, the policy refuses it), and no packet is sent anywhere
//! for it: a name cannot carry data out. An unknown name upstream gives NXDOMAIN; an upstream
//! failure SERVFAIL.
//!
//! # Credential brokering ([`Broker`], [`Credential`])
//!
//! `[[environment.network.credential]]` binds a secret (by reference: `env:NAME` or
//! `file:/abs`) to one host and port, one header and a value template ([`Credential`], its
//! refusals [`CredentialError`]). A proxy made with [`EgressProxy::with_broker`] holds the
//! resolved values ([`Brokered`]), a CA of its own ([`LeaseCa`], name-constrained to the
//! credentialed hosts, its key never leaving the process) and a verifying client
//! ([`upstream_config`]: the system's roots plus extra roots). A `CONNECT` to a credentialed
//! host and port is terminated with a leaf for that name (the ClientHello's server name must
//! be the CONNECT host), each request judged, its `Host` checked, the credential's header
//! replaced, and sent over verified TLS to the real host; responses (redirects included)
//! come back as they are. Every other host stays a plain tunnel. Plain `http://` to a
//! credentialed host is refused. The `envrt-egress` process reads the credentials on stdin
//! and writes the CA bundle ([`credential_stdin`]).
//!
//! # What it does not do (yet)
//!
//! - No exposed lease ports; credential brokering for HTTP/1.1 only (no HTTP/2, no
//!   WebSocket upgrade on a credentialed host).
//! - No HTTP/2 to the proxy, no `https://` absolute URIs (use CONNECT), no non-TLS CONNECT
//!   (ssh or other protocols through the proxy are refused), no TLS ClientHello split over
//!   more than [`Limits::max_hello_bytes`].
//! - The upstream resolver speaks UDP only (no TCP fallback for truncated answers) to one
//!   server, without a cache.
//! - A raw-address CONNECT to an address the stub returned for an allowed name is judged as a
//!   raw address (clients that honour the proxy send names).
//! - Domain fronting (an HTTP `Host` inside TLS that differs from the SNI) cannot be seen
//!   without terminating TLS.

// The policy: its grammar, the denied ranges and the grant rules, free of any runtime so
// the driver API's data model can carry it (`default-features = false`).
mod credential;
mod entry;
#[cfg(feature = "proxy")]
#[doc(hidden)]
pub mod fuzzing;
mod hop;
mod network;
mod policy;
mod ranges;

// The enforcement: the proxy, the DNS stub and the resolver (feature `proxy`, the default).
#[cfg(feature = "proxy")]
mod broker;
#[cfg(feature = "proxy")]
pub mod credential_stdin;
#[cfg(feature = "proxy")]
mod dns;
#[cfg(feature = "proxy")]
mod forwarded;
#[cfg(feature = "proxy")]
mod handle;
#[cfg(feature = "proxy")]
mod proxy;
#[cfg(feature = "proxy")]
mod resolve;
#[cfg(feature = "proxy")]
pub mod standalone;
#[cfg(feature = "proxy")]
mod tls;
#[cfg(feature = "proxy")]
mod tunnel;

#[cfg(feature = "proxy")]
pub use broker::Broker;
pub use credential::{
    Brokered, Credential, CredentialError, MAX_CREDENTIALS, MAX_SECRET_BYTES, PLACEHOLDER, RawCredential, Secret,
    SecretRef, placeholder_env,
};
#[cfg(feature = "proxy")]
pub use dns::{ANSWER_TTL, DnsStub, MAX_QUERY};
pub use entry::{Host, Rule};
pub use network::{GrantError, NetworkConfig, RawNetwork};
pub use policy::{Egress, Policy, PolicyError, RawPolicy, Refusal};
#[cfg(feature = "proxy")]
pub use proxy::{EgressProxy, Limits, too_many_connections_text};
pub use ranges::{Cidr, DENIED, DeniedRange};
#[cfg(feature = "proxy")]
pub use resolve::{MAX_ADDRESSES, ResolveError, Resolver};
#[cfg(feature = "proxy")]
pub use tls::{LeaseCa, TlsError, upstream_config};
