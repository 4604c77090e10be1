//! The local driver's recovery group against real processes and directories, through
//! `EnvironmentRuntime::reconcile`: a workspace whose lease record is lost is removed and
//! the process working in it killed; the workspaces of active, retained and reusable
//! leases stay; a dry run removes nothing; a watchdog whose workspace is gone is ended.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Harness, processes_with, survivors, unique_sleep};
use envrt_driver_local::{KIND_WATCHDOG, KIND_WORKSPACE, LocalConfig, LocalDriver};
use envrt_runtime_core::{
    AcquireRequest, EnvironmentDriver, EnvironmentRuntime, InventoryItem, Lease, LeasePolicy, LeaseStatus, Timestamp,
};

/// A process working in `workspace` (its directory and `HOME`), as a command of a holder
/// that died leaves it: nothing in this process's driver knows of it.
fn tied_process(workspace: &std::path::Path, nap: &str) -> Child {
    Command::new("sleep")
        .arg(nap)
        .current_dir(workspace)
        .env("HOME", workspace)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits (bounded, 20 s) until `done` holds; whether it did.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(20);
    while !done() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// A second runtime over the same root (another process after a crash) whose store has
/// only the records of `kept`.
async fn survivor_runtime(h: &Harness, kept: &[&Lease]) -> (EnvironmentRuntime, Arc<LocalDriver>) {
    let driver = Arc::new(
        LocalDriver::new(LocalConfig {
            root: Some(h.root.clone()),
            ..Default::default()
        })
        .unwrap(),
    );
    let runtime = EnvironmentRuntime::new();
    runtime.register_driver(driver.clone());
    for lease in kept {
        let record = h.runtime.lease(&lease.id).await.unwrap().unwrap();
        runtime.store().put_lease(&record).await.unwrap();
    }
    (runtime, driver)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_removes_a_lost_leases_workspace_and_kills_what_runs_there() {
    let h = Harness::new().await;
    let active = h.lease().await;
    let reusable = h.lease_with(LeasePolicy::ReuseByEnvironment).await;
    h.runtime
        .release_lease(&reusable.id, LeaseStatus::Released)
        .await
        .unwrap();
    let retained = h.lease_with(LeasePolicy::RetainOnFailure).await;
    let retained = h
        .runtime
        .release_lease(&retained.id, LeaseStatus::Failed)
        .await
        .unwrap();
    assert_eq!(retained.status, LeaseStatus::Retained);
    let lost = h.lease().await;
    let lost_workspace = h.workspace(&lost);
    let nap = unique_sleep();
    let mut child = tied_process(&lost_workspace, &nap);
    // One of the kept leases runs something too, which must survive.
    let kept_nap = unique_sleep();
    let mut kept_child = tied_process(&h.workspace(&active), &kept_nap);
    assert!(eventually(
        || !processes_with(&nap).is_empty() && !processes_with(&kept_nap).is_empty()
    ));

    let (runtime, _driver) = survivor_runtime(&h, &[&active, &reusable, &retained]).await;
    let dry = runtime.reconcile(true).await.unwrap();
    assert!(dry.failures.is_empty(), "{:?}", dry.failures);
    let orphans: Vec<&InventoryItem> = dry.orphans.iter().map(|o| &o.item).collect();
    assert_eq!(
        orphans,
        [&InventoryItem {
            kind: KIND_WORKSPACE.into(),
            id: lost_workspace.to_str().unwrap().into(),
            lease_id: Some(lost.id.clone()),
        }]
    );
    assert_eq!(dry.orphans[0].driver, "local");
    assert_eq!(dry.kept, 3);
    assert!(lost_workspace.is_dir(), "a dry run removes nothing");
    assert_eq!(child.try_wait().unwrap(), None, "a dry run kills nothing");

    let report = runtime.reconcile(false).await.unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(report.orphans.len(), 1);
    assert!(!lost_workspace.exists(), "the lost lease's workspace is removed");
    child.wait().unwrap();
    assert!(survivors(&nap).await.is_empty(), "the process working there is killed");
    for kept in [&active, &reusable, &retained] {
        assert!(
            h.workspace(kept).is_dir(),
            "{} keeps its workspace",
            kept.lease_policy.as_str()
        );
    }
    assert_eq!(kept_child.try_wait().unwrap(), None, "the active lease's process lives");
    assert!(
        runtime.reconcile(false).await.unwrap().orphans.is_empty(),
        "a second pass finds nothing"
    );

    // Not a command of the driver's (it would be in the lease's cgroup): ours to end.
    kept_child.kill().unwrap();
    kept_child.wait().unwrap();
    for kept in [&active, &reusable, &retained] {
        h.runtime.destroy_lease(&kept.id).await.unwrap();
    }
    h.runtime.release_lease(&lost.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_whose_workspace_is_gone_is_an_item_and_reaping_ends_it() {
    let h = Harness::new().await;
    let mut request = AcquireRequest::new("env-local", "acme");
    request.requested_expires_at = Some(Timestamp::now().after(Duration::from_secs(600)));
    let lease = h.runtime.acquire_lease(request).await.unwrap();
    let workspace = h.workspace(&lease);
    let ws = workspace.to_str().unwrap().to_owned();
    assert!(
        eventually(|| processes_with(&ws).len() == 1),
        "the lease's watchdog runs"
    );
    // The workspace vanished by other means; the watchdog still waits.
    std::fs::remove_dir(&workspace).unwrap();

    let (runtime, driver) = survivor_runtime(&h, &[]).await;
    let inventory = driver.as_recovery().unwrap().inventory().await.unwrap();
    assert_eq!(inventory.len(), 1, "{inventory:?}");
    assert_eq!(inventory[0].kind, KIND_WATCHDOG);
    assert_eq!(inventory[0].lease_id.as_deref(), Some(lease.id.as_str()));
    let report = runtime.reconcile(false).await.unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(report.orphans.len(), 1);
    assert!(survivors(&ws).await.is_empty(), "the watchdog is ended");
    assert!(h.leftovers().is_empty(), "its pid file is gone: {:?}", h.leftovers());
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn reap_refuses_what_is_not_this_drivers_and_kill_leftovers_kills_a_dead_holders_commands() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let recovery = h.driver.as_recovery().unwrap();
    let elsewhere = std::env::temp_dir().join(format!("lease-{}", lease.id));
    let outside = InventoryItem {
        kind: KIND_WORKSPACE.into(),
        id: elsewhere.to_str().unwrap().into(),
        lease_id: Some(lease.id.clone()),
    };
    assert_eq!(
        recovery.reap(&outside).await.unwrap_err().to_string(),
        format!(
            "Invalid input: {} is not the workspace of lease {} under {}",
            elsewhere.display(),
            lease.id,
            h.root.display()
        )
    );
    let anonymous = InventoryItem {
        lease_id: None,
        ..outside.clone()
    };
    assert_eq!(
        recovery.reap(&anonymous).await.unwrap_err().to_string(),
        format!("Invalid input: local workspace {} names no lease", elsewhere.display())
    );
    let container = InventoryItem {
        kind: "container".into(),
        ..outside
    };
    assert_eq!(
        recovery.reap(&container).await.unwrap_err().to_string(),
        "Invalid input: the local driver has no container items"
    );
    assert!(h.workspace(&lease).is_dir(), "nothing was removed");

    let nap = unique_sleep();
    let mut child = tied_process(&h.workspace(&lease), &nap);
    assert!(eventually(|| !processes_with(&nap).is_empty()));
    let record = h.runtime.lease(&lease.id).await.unwrap().unwrap();
    assert_eq!(recovery.kill_leftovers(&record).await.unwrap(), 1);
    child.wait().unwrap();
    assert!(survivors(&nap).await.is_empty());
    assert_eq!(recovery.kill_leftovers(&record).await.unwrap(), 0, "nothing is left");
    assert!(h.workspace(&lease).is_dir(), "killing leftovers keeps the workspace");
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}
