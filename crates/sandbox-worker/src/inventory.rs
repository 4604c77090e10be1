//! The worker's inventory for the `envrtListLeases` extension: every lease directory
//! under the root, with the envrt lease id the host gave at acquire and the pending
//! expiry, if any.
//!
//! The envrt lease id is kept as an extended attribute of the lease directory, so it
//! goes with the directory (destroy, expiry) and adds nothing to the root or to the
//! workspace a sandbox sees: `trusted.envrt.lease` when the worker runs as root (the
//! sandboxed user, who owns the directory, cannot change it), else `user.envrt.lease`.
//! On a filesystem without extended attributes the lease is simply not recorded (listed
//! without an id, so recovery never reaps it).

use std::path::Path;

use envrt_driver_api::{DriverError, Timestamp};
use envrt_plugin_protocol::environment::{ListLeasesResult, WorkerLease};
use rustix::fs::XattrFlags;

use super::lease::Leases;

/// The attribute naming a lease's envrt lease id.
fn attribute() -> &'static str {
    if rustix::process::geteuid().is_root() {
        "trusted.envrt.lease"
    } else {
        "user.envrt.lease"
    }
}

/// Records which envrt lease the lease directory `dir` belongs to (best effort: a
/// filesystem without extended attributes leaves it unrecorded, said on stderr).
pub(crate) fn record(dir: &Path, envrt_lease_id: &str) {
    if let Err(e) = rustix::fs::setxattr(dir, attribute(), envrt_lease_id.as_bytes(), XattrFlags::empty()) {
        eprintln!(
            "envrt-sandbox-worker: cannot record lease {envrt_lease_id} on {}: {e}",
            dir.display()
        );
    }
}

/// The envrt lease id recorded on `dir`, if any.
fn recorded(dir: &Path) -> Option<String> {
    let mut buf = vec![0u8; 512];
    let len = rustix::fs::getxattr(dir, attribute(), &mut buf[..]).ok()?;
    let id = String::from_utf8(buf.get(..len)?.to_vec()).ok()?;
    (!id.is_empty()).then_some(id)
}

/// Every lease directory under the root, in id order.
pub(crate) fn list(leases: &Leases) -> Result<ListLeasesResult, DriverError> {
    let root = &leases.root;
    let entries =
        std::fs::read_dir(root).map_err(|e| DriverError::io(format!("Reading lease root {}", root.display()), e))?;
    let mut result = ListLeasesResult::default();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(dir) = leases.path_of(name) else { continue };
        if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        let expiry = root.join(format!("{}{name}", super::expiry::RECORD_PREFIX));
        result.leases.push(WorkerLease {
            provider_lease_id: name.to_owned(),
            envrt_lease_id: recorded(&dir),
            expires_at: std::fs::read_to_string(expiry)
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
                .map(|ms| Timestamp(ms).to_rfc3339()),
        });
    }
    result
        .leases
        .sort_by(|a, b| a.provider_lease_id.cmp(&b.provider_lease_id));
    Ok(result)
}
