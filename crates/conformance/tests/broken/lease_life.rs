//! Faults of the lease life cycle v2 for the kit's own tests: a fork whose copies start
//! empty, the helper that empties a resumed workspace, and an acquire that returns before
//! the workspace is in place.

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

/// Where [`Fault::NotReadyAtAcquire`] keeps a new lease's workspace until its first use.
fn hidden(workspace: &Path) -> std::path::PathBuf {
    let name = workspace.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    workspace.with_file_name(format!(".settling-{name}"))
}

impl Faulty {
    /// [`Fault::NotReadyAtAcquire`]: moves the new lease's workspace out of its place, as
    /// a driver that hands out the lease while still setting it up.
    pub(crate) fn hide_workspace(&self, lease_id: &str) -> Result<(), DriverError> {
        let workspace = self.inner.workspace_of(lease_id)?;
        std::fs::rename(&workspace, hidden(&workspace)).map_err(|e| DriverError::io("hide the workspace", e))
    }

    /// Puts a hidden workspace back (after the first use of the lease, or at its release).
    pub(crate) fn settle(&self, lease_id: &str) {
        if let Ok(workspace) = self.inner.workspace_of(lease_id) {
            let _ = std::fs::rename(hidden(&workspace), &workspace);
        }
    }
}
