//! Native sync (contract section 6) through the archive API: `sync_in` (host →
//! container), `sync_out` (container → host) and the tar streams both build and read
//! (`archive`).

pub(crate) mod archive;
pub(crate) mod sync_in;
pub(crate) mod sync_out;
