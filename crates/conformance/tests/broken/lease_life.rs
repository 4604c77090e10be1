//! Faults of the lease life cycle v2 for the kit's own tests: a fork whose copies start
//! empty, and the helper that empties a resumed workspace.

use std::path::Path;

use async_trait::async_trait;
use envrt_runtime_core::driver::{AcquireInput, ForkLease, LeaseContext, LeaseGrant};
use envrt_runtime_core::{DriverError, EnvironmentDriver};

use super::{Fault, Faulty};

#[async_trait]
impl ForkLease for Faulty {
    async fn fork_lease(&self, source: &LeaseContext, copies: &[AcquireInput]) -> Result<Vec<LeaseGrant>, DriverError> {
        if !self.has(Fault::ForkCopiesAreEmpty) {
            let mut grants = self.inner.fork_lease(source, copies).await?;
            for grant in &mut grants {
                grant.metadata.insert("driver".into(), self.key().into());
            }
            return Ok(grants);
        }
        let mut grants = Vec::new();
        for input in copies {
            grants.push(self.acquire_lease(input).await?);
        }
        Ok(grants)
    }
}

/// Removes everything inside `dir`, keeping `dir`.
pub(crate) fn empty(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            let _ = match entry.file_type() {
                Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(&path),
                _ => std::fs::remove_file(&path),
            };
        }
    }
}
