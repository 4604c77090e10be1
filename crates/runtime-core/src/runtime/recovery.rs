//! Reconciliation: each registered driver's real inventory (its optional
//! [`Recovery`](crate::driver::Recovery) group) against the store, reaping what no lease
//! keeps. `envrt gc` loops over drivers through this, never through driver-specific code.

use crate::driver::InventoryItem;
use crate::error::RuntimeError;
use crate::model::{Lease, LeasePolicy, LeaseStatus};
use crate::store::LeaseFilter;

use super::EnvironmentRuntime;

/// One inventory item of one driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverItem {
    /// The driver's registry key.
    pub driver: String,
    /// The item.
    pub item: InventoryItem,
}

/// The outcome of [`EnvironmentRuntime::reconcile`].
#[derive(Debug, Default)]
pub struct ReconcileReport {
    /// Items no lease keeps: removed, or (dry run) that would be.
    pub orphans: Vec<DriverItem>,
    /// How many items were kept because a lease owns them (or none is recorded).
    pub kept: usize,
    /// Drivers whose inventory failed, and items whose reap failed, with why.
    pub failures: Vec<(String, RuntimeError)>,
}

/// Whether a lease in this state still owns its backend resources.
pub(crate) fn lease_keeps_resources(lease: &Lease) -> bool {
    matches!(
        lease.status,
        LeaseStatus::Active | LeaseStatus::Retained | LeaseStatus::PendingCleanup
    ) || (lease.status == LeaseStatus::Released && lease.lease_policy == LeasePolicy::ReuseByEnvironment)
}

impl EnvironmentRuntime {
    /// Compares every registered driver's inventory with the store and reaps each item
    /// whose lease no longer keeps resources (or is unknown to the store). Items that name
    /// no lease are kept. With `dry_run` nothing is removed.
    pub async fn reconcile(&self, dry_run: bool) -> Result<ReconcileReport, RuntimeError> {
        let keep: std::collections::HashSet<String> = self
            .store
            .list_leases(&LeaseFilter::default())
            .await?
            .into_iter()
            .filter(lease_keeps_resources)
            .map(|l| l.id)
            .collect();
        let mut report = ReconcileReport::default();
        let mut keys = self.driver_keys();
        keys.sort();
        for key in keys {
            let Some(driver) = self.driver(&key) else { continue };
            let Some(recovery) = driver.as_recovery() else { continue };
            let items = match recovery.inventory().await {
                Ok(items) => items,
                Err(e) => {
                    report.failures.push((key.clone(), e.into()));
                    continue;
                }
            };
            for item in items {
                let orphan = item.lease_id.as_ref().is_some_and(|lease| !keep.contains(lease));
                if !orphan {
                    report.kept += 1;
                    continue;
                }
                if !dry_run && let Err(e) = recovery.reap(&item).await {
                    report.failures.push((key.clone(), e.into()));
                    continue;
                }
                report.orphans.push(DriverItem {
                    driver: key.clone(),
                    item,
                });
            }
        }
        Ok(report)
    }
}
