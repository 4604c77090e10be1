//! Recovery: what this driver really holds under its root, whichever process made it, and
//! removing what no lease keeps.
//!
//! The inventory is every lease workspace `{root}/lease-{id}` (with the processes and the
//! watchdog tied to it) and every expiry watchdog `{root}/.watchdog-lease-{id}` whose
//! workspace is already gone, and every template capture a crash cut short
//! (`{root}/.templates/.new-{template}.lease-{id}`, an item of the lease captured). Reaping
//! a workspace kills what the lease still runs (its
//! cgroup, or every process tied to the workspace), ends its watchdog and removes the
//! directory; reaping a lone watchdog ends it. Lease cgroups are not listed on their own:
//! every local driver of the host shares the cgroup base, so a cgroup without a workspace
//! under this root may well be another root's.
//!
//! The root belongs to one lease store: reconciliation removes every workspace under it
//! that the store does not keep, so two stores must not share a root.

use async_trait::async_trait;
use envrt_driver_api::{DriverError, InventoryItem, Lease, Recovery};

use crate::LocalDriver;
use crate::workspace::{LEASE_DIR_PREFIX, lease_dir_name};

/// The kind of a lease workspace item.
pub const KIND_WORKSPACE: &str = "workspace";
/// The kind of an expiry watchdog whose workspace is gone.
pub const KIND_WATCHDOG: &str = "watchdog";
/// The kind of a template capture's staging directory that a crash left.
pub const KIND_TEMPLATE_STAGING: &str = "template_staging";

/// The prefix of a watchdog's pid file name, before the lease directory name.
const WATCHDOG_PREFIX: &str = ".watchdog-";

/// The lease id a lease directory name carries, when it is one.
fn lease_of(dir_name: &str) -> Option<String> {
    let id = dir_name.strip_prefix(LEASE_DIR_PREFIX)?;
    // Only names the driver could have made (the same check as when it makes them).
    lease_dir_name(id).ok().map(|_| id.to_owned())
}

#[async_trait]
impl Recovery for LocalDriver {
    async fn inventory(&self) -> Result<Vec<InventoryItem>, DriverError> {
        let entries = std::fs::read_dir(self.root())
            .map_err(|e| DriverError::io(format!("cannot list workspace root {}", self.root().display()), e))?;
        let mut items = Vec::new();
        let mut watchdogs = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(lease) = lease_of(name) {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    items.push(InventoryItem {
                        kind: KIND_WORKSPACE.to_owned(),
                        id: entry.path().to_string_lossy().into_owned(),
                        lease_id: Some(lease),
                    });
                }
            } else if let Some(lease) = name.strip_prefix(WATCHDOG_PREFIX).and_then(lease_of) {
                watchdogs.push((lease, entry.path()));
            }
        }
        // A capture cut short: listed while nothing captures into it any more is unknown,
        // so it is its lease's until that lease ends.
        if let Ok(staged) = std::fs::read_dir(self.templates_dir()) {
            for entry in staged.flatten() {
                let name = entry.file_name();
                if let Some(lease) = name.to_str().and_then(crate::templates::staging_lease) {
                    items.push(InventoryItem {
                        kind: KIND_TEMPLATE_STAGING.to_owned(),
                        id: entry.path().to_string_lossy().into_owned(),
                        lease_id: Some(lease),
                    });
                }
            }
        }
        for (lease, pid_file) in watchdogs {
            // A workspace item covers its own watchdog.
            if !items.iter().any(|i| i.lease_id.as_deref() == Some(lease.as_str())) {
                items.push(InventoryItem {
                    kind: KIND_WATCHDOG.to_owned(),
                    id: pid_file.to_string_lossy().into_owned(),
                    lease_id: Some(lease),
                });
            }
        }
        items.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(items)
    }

    async fn reap(&self, item: &InventoryItem) -> Result<(), DriverError> {
        let Some(lease) = item.lease_id.as_deref() else {
            return Err(DriverError::invalid(format!(
                "local {} {} names no lease",
                item.kind, item.id
            )));
        };
        // The item must be where this driver would have put it: nothing else is removed.
        if item.kind == KIND_TEMPLATE_STAGING {
            let path = std::path::Path::new(&item.id);
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if path.parent() != Some(self.templates_dir().as_path())
                || crate::templates::staging_lease(name).as_deref() != Some(lease)
            {
                return Err(DriverError::invalid(format!(
                    "{} is not a template capture of lease {lease} under {}",
                    item.id,
                    self.root().display()
                )));
            }
            return self.remove_staging(name);
        }
        let expected = match item.kind.as_str() {
            KIND_WORKSPACE => self.workspace_of(lease)?,
            KIND_WATCHDOG => crate::expiry::pid_file(self.root(), &lease_dir_name(lease)?),
            other => return Err(DriverError::invalid(format!("the local driver has no {other} items"))),
        };
        if std::path::Path::new(&item.id) != expected {
            return Err(DriverError::invalid(format!(
                "{} is not the {} of lease {lease} under {}",
                item.id,
                item.kind,
                self.root().display()
            )));
        }
        match item.kind.as_str() {
            KIND_WORKSPACE => {
                // Whatever works in the directory dies too, in a cgroup or not: nothing may
                // keep writing into it while it is removed.
                crate::kill_tied_to(&expected);
                self.remove_workspace(lease).await
            }
            _ => self.stop_watchdog(lease),
        }
    }

    async fn kill_leftovers(&self, lease: &Lease) -> Result<usize, DriverError> {
        if lease.metadata_driver() != Some(crate::DRIVER_KEY) {
            return Ok(0);
        }
        let workspace = self.workspace_of(&lease.id)?;
        Ok(crate::kill_tied_to(&workspace))
    }

    /// Lost when its workspace directory is gone.
    async fn lost(&self, lease: &Lease) -> Result<bool, DriverError> {
        if lease.metadata_driver() != Some(crate::DRIVER_KEY) {
            return Ok(false);
        }
        let workspace = self.workspace_of(&lease.id)?;
        match std::fs::symlink_metadata(&workspace) {
            Ok(_) => Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
            Err(e) => Err(DriverError::io(
                format!("cannot look at workspace {}", workspace.display()),
                e,
            )),
        }
    }
}
