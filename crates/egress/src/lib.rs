//! envrt egress (docs written below).

mod dns;
mod entry;
mod handle;
mod network;
mod policy;
mod proxy;
mod ranges;
mod resolve;
mod tunnel;

pub use dns::{ANSWER_TTL, DnsStub, MAX_QUERY};
pub use entry::{Host, Rule};
pub use network::{GrantError, NetworkConfig, RawNetwork};
pub use policy::{Egress, Policy, PolicyError, RawPolicy, Refusal};
pub use proxy::{EgressProxy, Limits, too_many_connections_text};
pub use ranges::{Cidr, DENIED, DeniedRange};
pub use resolve::{MAX_ADDRESSES, ResolveError, Resolver};
