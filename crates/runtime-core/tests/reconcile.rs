//! Reconciliation at the facade: a driver's inventory against the store. Items of leases
//! that still keep resources stay; items of ended or unknown leases are reaped (or only
//! listed on a dry run); items that name no lease are never touched; a failing inventory
//! is reported and does not stop the other drivers.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use envrt_runtime_core::testkit::{ProbeDriver, ProbeShape};
use envrt_runtime_core::*;

/// A driver whose backend is a set of items, forwarding everything else to a probe.
struct Inventoried {
    probe: ProbeDriver,
    items: Mutex<Vec<InventoryItem>>,
    fail_inventory: bool,
    /// A lease recorded (active) in this store right after the next inventory is taken,
    /// as an acquire in another process does between making its resource and recording it.
    record_after_inventory: Mutex<Option<(Arc<dyn LeaseStore>, Lease)>>,
}

fn item(id: &str, lease: Option<&str>) -> InventoryItem {
    InventoryItem {
        kind: "thing".into(),
        id: id.into(),
        lease_id: lease.map(str::to_owned),
    }
}

#[async_trait]
impl EnvironmentDriver for Inventoried {
    fn key(&self) -> &str {
        self.probe.key()
    }
    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        self.items
            .lock()
            .unwrap()
            .push(item(&format!("res-{}", input.lease_id), Some(&input.lease_id)));
        self.probe.acquire_lease(input).await
    }
    async fn release_lease(&self, input: &ReleaseInput) -> Result<(), DriverError> {
        self.probe.release_lease(input).await
    }
    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        self.probe.resolve_capabilities(input).await
    }
    fn as_recovery(&self) -> Option<&dyn Recovery> {
        Some(self)
    }
}

#[async_trait]
impl Recovery for Inventoried {
    async fn inventory(&self) -> Result<Vec<InventoryItem>, DriverError> {
        if self.fail_inventory {
            return Err(DriverError::other("backend unreachable"));
        }
        let items = self.items.lock().unwrap().clone();
        let late = self.record_after_inventory.lock().unwrap().take();
        if let Some((store, lease)) = late {
            store.put_lease(&lease).await.unwrap();
        }
        Ok(items)
    }
    async fn reap(&self, target: &InventoryItem) -> Result<(), DriverError> {
        self.items.lock().unwrap().retain(|i| i != target);
        Ok(())
    }
}

fn ids(items: &[InventoryItem]) -> BTreeSet<String> {
    items.iter().map(|i| i.id.clone()).collect()
}

async fn setup(fail_inventory: bool) -> (Arc<EnvironmentRuntime>, Arc<Inventoried>) {
    let driver = Arc::new(Inventoried {
        probe: ProbeDriver::new("inv", ProbeShape::full(), None),
        items: Mutex::new(vec![item("stray", Some("lease-nobody-knows")), item("anonymous", None)]),
        fail_inventory,
        record_after_inventory: Mutex::new(None),
    });
    let runtime = Arc::new(EnvironmentRuntime::new());
    runtime.register_driver(driver.clone());
    runtime
        .put_environment(Environment::new("env", "Env", "inv"))
        .await
        .unwrap();
    (runtime, driver)
}

#[tokio::test]
async fn reconcile_reaps_what_no_lease_keeps_and_keeps_the_rest() {
    let (runtime, driver) = setup(false).await;
    let active = runtime.acquire_lease(AcquireRequest::new("env", "acme")).await.unwrap();
    let ended = runtime.acquire_lease(AcquireRequest::new("env", "acme")).await.unwrap();
    runtime.release_lease(&ended.id, LeaseStatus::Released).await.unwrap();

    let dry = runtime.reconcile(true).await.unwrap();
    let would: BTreeSet<String> = dry.orphans.iter().map(|o| o.item.id.clone()).collect();
    assert_eq!(would, BTreeSet::from(["stray".to_owned(), format!("res-{}", ended.id)]));
    assert_eq!(dry.kept, 2, "the active lease's item and the anonymous one");
    assert_eq!(driver.items.lock().unwrap().len(), 4, "a dry run removes nothing");

    let report = runtime.reconcile(false).await.unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(report.orphans.len(), 2);
    assert!(report.orphans.iter().all(|o| o.driver == "inv"));
    assert_eq!(
        ids(&driver.items.lock().unwrap()),
        BTreeSet::from(["anonymous".to_owned(), format!("res-{}", active.id)])
    );
    let again = runtime.reconcile(false).await.unwrap();
    assert!(
        again.orphans.is_empty(),
        "a second pass finds nothing: {:?}",
        again.orphans
    );
}

#[tokio::test]
async fn a_failing_inventory_is_reported_with_its_driver() {
    let (runtime, driver) = setup(true).await;
    let report = runtime.reconcile(false).await.unwrap();
    assert_eq!(report.failures.len(), 1);
    assert_eq!(report.failures[0].0, "inv");
    assert_eq!(report.failures[0].1.to_string(), "backend unreachable");
    assert_eq!(driver.items.lock().unwrap().len(), 2, "nothing reaped");
}

#[tokio::test]
async fn a_resource_whose_lease_is_recorded_during_the_settle_is_kept() {
    let (runtime, driver) = setup(false).await;
    let template = runtime.acquire_lease(AcquireRequest::new("env", "acme")).await.unwrap();
    // An acquire in flight: its resource exists, its record is written only after the
    // inventory was taken.
    let mut late = template.clone();
    late.id = "lease-in-flight".into();
    driver.items.lock().unwrap().push(item("in-flight", Some(&late.id)));
    *driver.record_after_inventory.lock().unwrap() = Some((runtime.store().clone(), late));

    let report = runtime.reconcile(false).await.unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(
        ids(&report.orphans.iter().map(|o| o.item.clone()).collect::<Vec<_>>()),
        BTreeSet::from(["stray".to_owned()])
    );
    assert!(
        ids(&driver.items.lock().unwrap()).contains("in-flight"),
        "the in-flight acquire keeps its resource"
    );
    assert_eq!(
        report.kept, 3,
        "the active lease's item, the anonymous one and the in-flight one"
    );
}
