//! # envrt-driver-files
//!
//! The file helpers envrt drivers share, kept out of both the driver API (so that it stays
//! a small, dependency-light contract) and the runtime (so that a driver needs no runtime
//! crate):
//!
//! - [`archive`]: the one tar extractor of every driver's sync out, writing beneath a
//!   staging directory with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`;
//! - [`sparse`]: hole-keeping, byte-bounded copies (`SEEK_DATA`/`SEEK_HOLE`);
//! - [`tree`]: bounded tree walks and the link checks of sync out;
//! - [`fds`]: the descriptors a child inherits (the crate's one `unsafe`, a `pre_exec` hook);
//! - [`stale`]: the sweep of scratch directories left by killed processes.
//!
//! They are synchronous (`std::fs`, `rustix`, `tar`) and depend on no async runtime; a
//! driver calls them from its own blocking context. `envrt-runtime-core` re-exports the
//! three modules at `envrt_runtime_core::{archive, sparse, tree}`.

#![deny(unsafe_code)]

pub mod archive;
pub mod fds;
pub mod sparse;
pub mod stale;
pub mod tree;
