//! The worker's inventory for the `envrtListLeases` extension: every lease directory
//! under the root, with the envrt lease id the host gave at acquire (kept in a record
//! `.lease-<providerLeaseId>` beside the directory, outside what any sandbox sees) and the
//! pending expiry, if any.

use std::path::Path;

use envrt_plugin_protocol::environment::{ListLeasesResult, WorkerLease};
use envrt_runtime_core::{DriverError, Timestamp};

use super::lease::Leases;

/// Prefix of the records naming a lease's envrt lease id.
const RECORD_PREFIX: &str = ".lease-";

fn record_of(lease_dir: &Path) -> Option<std::path::PathBuf> {
    let name = lease_dir.file_name()?.to_str()?;
    Some(lease_dir.parent()?.join(format!("{RECORD_PREFIX}{name}")))
}

/// Records which envrt lease the lease directory `dir` belongs to.
pub(crate) fn record(dir: &Path, envrt_lease_id: &str) -> Result<(), DriverError> {
    let Some(path) = record_of(dir) else { return Ok(()) };
    std::fs::write(&path, envrt_lease_id)
        .map_err(|e| DriverError::io(format!("Writing lease record {}", path.display()), e))
}

/// Drops the record of a destroyed lease (gone already is fine).
pub(crate) fn forget(dir: &Path) {
    if let Some(path) = record_of(dir) {
        let _ = std::fs::remove_file(path);
    }
}

/// Every lease directory under the root; records whose directory is gone (an expiry
/// removed it) are dropped on the way.
pub(crate) fn list(leases: &Leases) -> Result<ListLeasesResult, DriverError> {
    let root = &leases.root;
    let entries =
        std::fs::read_dir(root).map_err(|e| DriverError::io(format!("Reading lease root {}", root.display()), e))?;
    let mut result = ListLeasesResult::default();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(id) = name.strip_prefix(RECORD_PREFIX) {
            if !root.join(id).is_dir() {
                let _ = std::fs::remove_file(entry.path());
            }
            continue;
        }
        let Some(dir) = leases.path_of(name) else { continue };
        if !dir.is_dir() {
            continue;
        }
        let read = |prefix: &str| std::fs::read_to_string(root.join(format!("{prefix}{name}"))).ok();
        result.leases.push(WorkerLease {
            provider_lease_id: name.to_owned(),
            envrt_lease_id: read(RECORD_PREFIX)
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty()),
            expires_at: read(super::expiry::RECORD_PREFIX)
                .and_then(|t| t.trim().parse::<u64>().ok())
                .map(|ms| Timestamp(ms).to_rfc3339()),
        });
    }
    result
        .leases
        .sort_by(|a, b| a.provider_lease_id.cmp(&b.provider_lease_id));
    Ok(result)
}
