//! The turn of an owner scope across every process on one database
//! ([`LeaseStore::lock_scope`](envrt_runtime_core::LeaseStore::lock_scope)): an exclusive
//! `flock` on one of [`BUCKETS`] sidecar files, `<db>.scope-{n}.lock`, chosen by a hash of
//! the scope. `flock` excludes every other open file description, so two runtimes in one
//! process exclude each other as two processes do; the lock goes with the file
//! (or the process), so a crashed holder never keeps it. A fixed number of files bounds
//! what scopes leave on disk; two scopes in one bucket only take turns.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use envrt_runtime_core::{ScopeGuard, StoreError};

/// How many lock files one database may have beside it.
pub(crate) const BUCKETS: u64 = 64;

/// FNV-1a: stable across processes and releases (unlike std's hasher), so every process
/// picks the same bucket for a scope.
fn bucket(scope: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in scope.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash % BUCKETS
}

/// Blocks until this process holds the turn of `scope` on the database at `path`.
pub(crate) fn lock(path: &Path, scope: &str) -> Result<ScopeGuard, StoreError> {
    let file_path = crate::private::sibling(path, &format!(".scope-{}.lock", bucket(scope)));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(crate::private::FILE_MODE)
        .open(&file_path)
        .map_err(|e| StoreError {
            message: format!("cannot open the scope lock \"{}\": {e}", file_path.display()),
            source: Some(Box::new(e)),
        })?;
    file.lock().map_err(|e| StoreError {
        message: format!("cannot lock the scope lock \"{}\": {e}", file_path.display()),
        source: Some(Box::new(e)),
    })?;
    Ok(ScopeGuard::new(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_stable_and_bounded() {
        assert_eq!(bucket(""), 0xcbf2_9ce4_8422_2325 % BUCKETS);
        assert_eq!(bucket("acme/agent-1"), bucket("acme/agent-1"));
        assert!((0..1000).all(|n| bucket(&format!("scope-{n}")) < BUCKETS));
    }
}
