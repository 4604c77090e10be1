//! Reconciliation: each registered driver's real inventory (its optional
//! [`Recovery`](crate::driver::Recovery) group) against the store, reaping what no lease
//! keeps. `envrt gc` loops over drivers through this, never through driver-specific code.

use std::collections::HashSet;
use std::sync::Arc;

use crate::driver::{EnvironmentDriver, InventoryItem};
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

/// How long reconciliation waits before a second look at the store when an orphan names
/// a lease the store does not know: an acquire in another process makes its resource
/// before it records the lease, so a resource seen in that gap is not yet an orphan.
pub const RECONCILE_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

impl EnvironmentRuntime {
    /// Whether the active lease `lease` is lost: its driver's recovery group says the
    /// backend resource its operations need is gone ([`Recovery::lost`](crate::driver::Recovery::lost)).
    /// `false` for a lease that is not active, whose driver is not registered or has no
    /// recovery group, or cannot tell. `envrt gc` ends the leases this finds.
    pub async fn is_lost(&self, lease: &Lease) -> Result<bool, RuntimeError> {
        if lease.status != LeaseStatus::Active {
            return Ok(false);
        }
        let environment = match &lease.environment_id {
            Some(id) => self.store.get_environment(id).await?,
            None => None,
        };
        let key = crate::model::resolve_driver_key(lease, environment.as_ref());
        let Some(driver) = self.driver(key) else {
            return Ok(false);
        };
        let Some(recovery) = driver.as_recovery() else {
            return Ok(false);
        };
        Ok(recovery.lost(lease).await?)
    }

    /// The ids of the leases that keep their resources, and of every lease the store has.
    async fn lease_sets(&self) -> Result<(HashSet<String>, HashSet<String>), RuntimeError> {
        let leases = self.store.list_leases(&LeaseFilter::default()).await?;
        let keep = leases
            .iter()
            .filter(|l| lease_keeps_resources(l))
            .map(|l| l.id.clone())
            .collect();
        let known = leases.into_iter().map(|l| l.id).collect();
        Ok((keep, known))
    }

    /// Compares every registered driver's inventory with the store and reaps each item
    /// whose lease no longer keeps resources (or is unknown to the store). Items that name
    /// no lease are kept. With `dry_run` nothing is removed. When an orphan names a lease
    /// the store does not know, the store is read again after [`RECONCILE_SETTLE`] and
    /// items whose lease was recorded meanwhile (an acquire in flight) are kept.
    pub async fn reconcile(&self, dry_run: bool) -> Result<ReconcileReport, RuntimeError> {
        let (keep, known) = self.lease_sets().await?;
        let mut report = ReconcileReport::default();
        let mut candidates: Vec<(Arc<dyn EnvironmentDriver>, DriverItem)> = Vec::new();
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
                let found = DriverItem {
                    driver: key.clone(),
                    item,
                };
                candidates.push((driver.clone(), found));
            }
        }
        let unknown = |c: &(Arc<dyn EnvironmentDriver>, DriverItem)| {
            c.1.item.lease_id.as_ref().is_some_and(|lease| !known.contains(lease))
        };
        if !dry_run && candidates.iter().any(unknown) {
            tokio::time::sleep(RECONCILE_SETTLE).await;
            let (keep_now, _) = self.lease_sets().await?;
            let before = candidates.len();
            candidates.retain(|(_, c)| c.item.lease_id.as_ref().is_none_or(|lease| !keep_now.contains(lease)));
            report.kept += before - candidates.len();
        }
        for (driver, found) in candidates {
            let Some(recovery) = driver.as_recovery() else { continue };
            if !dry_run && let Err(e) = recovery.reap(&found.item).await {
                report.failures.push((found.driver, e.into()));
                continue;
            }
            report.orphans.push(found);
        }
        Ok(report)
    }
}
