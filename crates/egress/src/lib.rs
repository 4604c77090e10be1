//! envrt egress (docs written below).

mod entry;
mod network;
mod policy;
mod ranges;

pub use entry::{Host, Rule};
pub use network::{GrantError, NetworkConfig, RawNetwork};
pub use policy::{Egress, Policy, PolicyError, RawPolicy, Refusal};
pub use ranges::{Cidr, DENIED, DeniedRange};
