//! The sandbox driver's recovery group against the real reference worker and bwrap: a
//! lease whose store record is lost is reaped by `EnvironmentRuntime::reconcile`, an
//! active one is kept; a worker without `envrtListLeases` offers no recovery group.

mod host_common;

use envrt_driver_plugin_sandbox::SandboxOptions;
use envrt_runtime_core::{EnvironmentDriver as _, ExecuteRequest};
use host_common::*;

#[tokio::test]
async fn reconcile_reaps_a_lease_the_store_lost_and_keeps_an_active_one() {
    let root = TempDir::new("recovery");
    // A first holder acquires a lease, then its store is lost (a new runtime, a new
    // worker over the same lease root: the lease directory is all that is left).
    let lost = {
        let driver = start(reference_manifest(root.path()).unwrap(), SandboxOptions::default()).await;
        let runtime = runtime_with(driver.clone()).await;
        let lease = bounded("acquire", acquire(&runtime)).await;
        driver.shutdown().await;
        lease
    };
    let lost_dir = root.join(lost.provider_lease_id.as_deref().unwrap());
    assert!(lost_dir.is_dir());

    let driver = start(reference_manifest(root.path()).unwrap(), SandboxOptions::default()).await;
    assert!(
        driver.as_recovery().is_some(),
        "the reference worker advertises envrtListLeases"
    );
    let runtime = runtime_with(driver.clone()).await;
    let active = bounded("acquire", acquire(&runtime)).await;
    let active_dir = root.join(active.provider_lease_id.as_deref().unwrap());

    let inventory = driver.as_recovery().unwrap().inventory().await.unwrap();
    assert_eq!(inventory.len(), 2, "{inventory:?}");
    assert!(inventory.iter().all(|item| item.kind == "sandbox-lease"));

    let dry = bounded("reconcile", runtime.reconcile(true)).await.unwrap();
    assert!(dry.failures.is_empty(), "{:?}", dry.failures);
    assert_eq!(dry.kept, 1);
    assert_eq!(dry.orphans.len(), 1);
    assert_eq!(dry.orphans[0].driver, "sandbox");
    assert_eq!(dry.orphans[0].item.id, lost.provider_lease_id.clone().unwrap());
    assert_eq!(dry.orphans[0].item.lease_id.as_deref(), Some(lost.id.as_str()));
    assert!(lost_dir.is_dir(), "a dry run removes nothing");

    let report = bounded("reconcile", runtime.reconcile(false)).await.unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!((report.orphans.len(), report.kept), (1, 1));
    assert!(!lost_dir.exists(), "the orphan's directory is destroyed");
    assert!(active_dir.is_dir(), "the active lease keeps its directory");
    let result = bounded(
        "execute",
        runtime.execute(&active.id, ExecuteRequest::new("true", [""; 0])),
    )
    .await
    .unwrap();
    assert_eq!(result.exit_code, Some(0));

    let again = bounded("reconcile", runtime.reconcile(false)).await.unwrap();
    assert!(again.orphans.is_empty() && again.failures.is_empty());
    assert_eq!(again.kept, 1);
    driver.shutdown().await;
}

#[tokio::test]
async fn a_worker_without_the_list_extension_offers_no_recovery() {
    let root = TempDir::new("recovery-sdk");
    let driver = start(sdk_manifest(root.path()), SandboxOptions::default()).await;
    assert!(!driver.supported_methods().contains("envrtListLeases"));
    assert!(driver.as_recovery().is_none());
    let runtime = runtime_with(driver.clone()).await;
    bounded("acquire", acquire(&runtime)).await;
    let report = bounded("reconcile", runtime.reconcile(false)).await.unwrap();
    assert!(report.orphans.is_empty() && report.failures.is_empty());
    assert_eq!(report.kept, 0, "no inventory, nothing counted");
    driver.shutdown().await;
}

#[tokio::test]
async fn a_failing_inventory_and_a_reap_without_destroy_are_refused_with_the_exact_texts() {
    // advertises the list verb but does not serve it, and cannot destroy
    let manifest = script_manifest("", &[("SUPPORTED", "health,envrtListLeases")]);
    let driver = start(manifest, SandboxOptions::default()).await;
    let recovery = driver.as_recovery().expect("the list verb is advertised");
    let error = recovery.inventory().await.unwrap_err();
    assert_eq!(error.to_string(), "Unknown method: envrtListLeases");
    let item = envrt_runtime_core::InventoryItem {
        kind: "sandbox-lease".into(),
        id: "sbx-1".into(),
        lease_id: Some("lease-1".into()),
    };
    assert_eq!(
        recovery.reap(&item).await.unwrap_err().to_string(),
        "Worker for plugin \"fault.plugin\" does not advertise \"environmentDestroyLease\"."
    );
    // reconcile reports the failed inventory and goes on
    let runtime = runtime_with(driver.clone()).await;
    let report = bounded("reconcile", runtime.reconcile(false)).await.unwrap();
    assert_eq!(report.failures.len(), 1);
    assert_eq!(report.failures[0].0, "sandbox");
    assert!(report.orphans.is_empty());
    driver.shutdown().await;
}
