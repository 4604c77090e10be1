//! The driver targets the scenarios run over, as the conformance kit's `Target` is one
//! driver the kit runs over: how to open a lease on each driver through the facade, and
//! the bare tools on the same machine that its baselines use. A scenario
//! (`crate::scenario`) runs on every target that supports it.

pub(crate) mod docker;
pub(crate) mod local;
pub(crate) mod sandbox;
pub(crate) mod ssh;

/// The driver keys of the targets, in the order the rows run.
pub(crate) const KEYS: &[&str] = &["local", "docker", "sandbox", "ssh"];
