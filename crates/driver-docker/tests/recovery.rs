//! The Docker driver's recovery group against a real engine, through
//! `EnvironmentRuntime::reconcile`: a container whose lease record is lost is removed; the
//! containers of active, retained and reusable leases stay; a dry run removes nothing.
//! Everything is scoped to the test's own label.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use envrt_driver_docker::{DockerDriver, KIND_CONTAINER};
use envrt_runtime_core::{EnvironmentDriver, EnvironmentRuntime, LeasePolicy, LeaseStatus};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_removes_the_container_of_a_lost_lease_and_keeps_the_rest() {
    let h = harness_or_skip!();
    common::bounded(240, async {
        let active = h.default_lease().await;
        let reusable = h.lease(json!({}), LeasePolicy::ReuseByEnvironment).await;
        h.runtime
            .release_lease(&reusable.id, LeaseStatus::Released)
            .await
            .unwrap();
        let retained = h.lease(json!({}), LeasePolicy::RetainOnFailure).await;
        let retained = h
            .runtime
            .release_lease(&retained.id, LeaseStatus::Failed)
            .await
            .unwrap();
        assert_eq!(retained.status, LeaseStatus::Retained);
        let lost = h.default_lease().await;
        let lost_container = lost.provider_lease_id.clone().unwrap();

        // Another process over the same engine and labels whose store lost `lost`'s record.
        let driver = Arc::new(DockerDriver::connect(common::scoped_config(&h.run)).await.unwrap());
        let runtime = EnvironmentRuntime::new();
        runtime.register_driver(driver.clone());
        for kept in [&active.id, &reusable.id, &retained.id] {
            let lease = h.runtime.lease(kept).await.unwrap().unwrap();
            runtime.store().put_lease(&lease).await.unwrap();
        }

        let dry = runtime.reconcile(true).await.unwrap();
        assert!(dry.failures.is_empty(), "{:?}", dry.failures);
        assert_eq!(dry.orphans.len(), 1, "{:?}", dry.orphans);
        let orphan = &dry.orphans[0];
        assert_eq!(orphan.driver, "docker");
        assert_eq!(orphan.item.kind, KIND_CONTAINER);
        assert_eq!(orphan.item.id, lost_container);
        assert_eq!(orphan.item.lease_id.as_deref(), Some(lost.id.as_str()));
        assert_eq!(dry.kept, 3);
        assert_eq!(
            driver.managed_containers().await.unwrap().len(),
            4,
            "a dry run removes nothing"
        );
        // The lost lease's container still runs commands.
        assert_eq!(h.sh(&lost, "echo alive").await.stdout, b"alive\n");

        let report = runtime.reconcile(false).await.unwrap();
        assert!(report.failures.is_empty(), "{:?}", report.failures);
        assert_eq!(report.orphans.len(), 1);
        assert_eq!(report.orphans[0].item.id, lost_container);
        let left: BTreeSet<String> = driver
            .managed_containers()
            .await
            .unwrap()
            .into_iter()
            .map(|(_, lease)| lease)
            .collect();
        assert_eq!(
            left,
            BTreeSet::from([active.id.clone(), reusable.id.clone(), retained.id.clone()])
        );
        assert!(
            !common::cli_containers(&h.run).contains(&lost_container[..12].to_owned()),
            "the engine no longer has it"
        );
        // Reaping again is fine (idempotent), and a second pass finds nothing.
        driver_reap_again(&runtime, &report.orphans[0].item).await;
        assert!(runtime.reconcile(false).await.unwrap().orphans.is_empty());
    })
    .await;
    h.finish().await;
}

async fn driver_reap_again(runtime: &EnvironmentRuntime, item: &envrt_runtime_core::InventoryItem) {
    let driver = runtime.driver("docker").unwrap();
    driver.as_recovery().unwrap().reap(item).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_scoped_by_other_labels_sees_none_of_these_containers() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        // Another scope (another state directory, another test): an empty store, and still
        // nothing of this scope is touched.
        let other = format!("{}-other", h.run);
        let driver = Arc::new(DockerDriver::connect(common::scoped_config(&other)).await.unwrap());
        let runtime = EnvironmentRuntime::new();
        runtime.register_driver(driver);
        let report = runtime.reconcile(false).await.unwrap();
        assert!(report.orphans.is_empty(), "{:?}", report.orphans);
        assert_eq!(report.kept, 0);
        assert_eq!(h.driver.managed_containers().await.unwrap().len(), 1);
        let kind = envrt_runtime_core::InventoryItem {
            kind: "workspace".into(),
            id: "x".into(),
            lease_id: Some(lease.id.clone()),
        };
        let recovery = h.driver.as_recovery().unwrap();
        let refused = recovery.reap(&kind).await.unwrap_err();
        assert_eq!(
            refused.to_string(),
            "Invalid input: the Docker driver has no workspace items"
        );
        // A container id outside this driver's scope is not removed.
        let stranger = envrt_runtime_core::InventoryItem {
            kind: KIND_CONTAINER.into(),
            id: lease.provider_lease_id.clone().unwrap(),
            lease_id: Some(lease.id.clone()),
        };
        let other_scope = DockerDriver::connect(common::scoped_config(&other)).await.unwrap();
        other_scope.as_recovery().unwrap().reap(&stranger).await.unwrap();
        assert_eq!(
            h.driver.managed_containers().await.unwrap().len(),
            1,
            "not its to remove"
        );
    })
    .await;
    h.finish().await;
}
