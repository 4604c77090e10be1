//! `[environment.pool]` in `envrt.toml`: how many leases an environment keeps ready.

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PoolEntry {
    size: Option<toml::Value>,
}

/// The largest pool an environment may declare: each pooled lease holds a real resource
/// (a container, a sandbox) while it waits, so a typo such as `size = 1000` is refused.
pub const MAX_POOL_SIZE: i64 = 64;

/// The checked `size` of `[environment.pool]`.
pub(super) fn pool_size(pool: &PoolEntry) -> Result<usize, String> {
    let Some(size) = &pool.size else {
        return Err("[environment.pool] needs a size".into());
    };
    match size.as_integer() {
        Some(n) if (1..=MAX_POOL_SIZE).contains(&n) => Ok(n as usize),
        _ => Err(format!(
            "pool size expects a whole number from 1 to {MAX_POOL_SIZE}, got {}",
            super::file::shown(size)
        )),
    }
}
