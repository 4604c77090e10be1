//! What a command starts cannot outlive its lease: a `setsid`
//! child, out of reach of the process-group kill, dies on timeout, release and destroy,
//! whether it keeps the workspace as `HOME`/cwd or not. These run against the real
//! kernel: with cgroup v2 writable (as root in CI) every case is contained by cgroups;
//! elsewhere the fallback's cases (HOME or cwd in the workspace) still hold.

mod common;

use std::time::Duration;

use common::{Harness, survivors, unique_sleep};
use envrt_runtime_core::{ExecuteRequest, LeaseStatus};

/// Whether this machine gives the driver cgroups (printed, so a run says which path it
/// tested).
fn cgroups(h: &Harness) -> bool {
    let mode = h.driver.containment();
    eprintln!("containment: {mode}");
    mode.starts_with("cgroup v2")
}

/// A script that starts a `setsid` sleeper which also leaves the workspace and clears
/// its environment (so only a cgroup can find it), then waits.
fn escapee(nap: &str) -> String {
    format!("cd / && setsid env -i sleep {nap} & sleep 3600")
}

/// A script whose `setsid` sleeper keeps the workspace as cwd and `HOME` (what the
/// fallback's scan finds).
fn plain_escapee(nap: &str) -> String {
    format!("setsid sleep {nap} & sleep 3600")
}

async fn wait_for(nap: &str) {
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while common::processes_with(nap).is_empty() {
        assert!(std::time::Instant::now() < until, "the sleeper never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_setsid_child_dies_when_its_command_times_out() {
    let h = Harness::new().await;
    if !cgroups(&h) {
        return; // The fallback does not scan on a timeout (it would hit sibling commands).
    }
    let lease = h.lease().await;
    let nap = unique_sleep();
    let mut request = ExecuteRequest::new("sh", ["-c", &escapee(&nap)]);
    request.timeout = Some(Duration::from_millis(500));
    let out = h.execute(&lease, request).await;
    assert!(out.timed_out);
    assert!(
        survivors(&nap).await.is_empty(),
        "the setsid sleeper survived the timeout"
    );
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

/// Runs the script on the lease and, once its sleeper is up, `end` (a release or a
/// destroy) beside it; the call must end too.
async fn run_then<F: std::future::Future<Output = ()>>(h: &Harness, lease_id: &str, script: String, nap: &str, end: F) {
    let call = async {
        let _ = h
            .runtime
            .execute(lease_id, ExecuteRequest::new("sh", ["-c", &script]))
            .await;
    };
    let ender = async {
        wait_for(nap).await;
        end.await;
    };
    tokio::time::timeout(Duration::from_secs(30), async { tokio::join!(call, ender) })
        .await
        .expect("the call did not end with its lease");
}

#[tokio::test]
async fn a_setsid_child_dies_on_release_and_on_destroy() {
    let h = Harness::new().await;
    let contained = cgroups(&h);
    for destroy in [false, true] {
        let lease = h.lease().await;
        let nap = unique_sleep();
        let script = if contained { escapee(&nap) } else { plain_escapee(&nap) };
        let end = async {
            if destroy {
                h.runtime.destroy_lease(&lease.id).await.unwrap();
            } else {
                h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
            }
        };
        run_then(&h, &lease.id, script, &nap, end).await;
        assert!(
            survivors(&nap).await.is_empty(),
            "the setsid sleeper survived (destroy: {destroy})"
        );
    }
    h.finish();
}

#[tokio::test]
async fn a_reused_lease_keeps_its_workspace_but_not_its_escaped_processes() {
    let h = Harness::new().await;
    let contained = cgroups(&h);
    let lease = h.lease_with(envrt_runtime_core::LeasePolicy::ReuseByEnvironment).await;
    let nap = unique_sleep();
    let script = if contained { escapee(&nap) } else { plain_escapee(&nap) };
    let end = async {
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    };
    run_then(&h, &lease.id, script, &nap, end).await;
    assert!(survivors(&nap).await.is_empty());
    assert!(h.workspace(&lease).is_dir());
    h.runtime.destroy_lease(&lease.id).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn without_cgroups_the_release_scan_still_kills_a_setsid_child_tied_to_the_workspace() {
    let h = Harness::with_config(envrt_driver_local::LocalConfig {
        cgroups: false,
        ..Default::default()
    })
    .await;
    assert_eq!(h.driver.containment(), "process groups and a /proc scan on release");
    for destroy in [false, true] {
        let lease = h.lease().await;
        // One sleeper keeps HOME, the other only its cwd in the workspace.
        let (home, cwd) = (unique_sleep(), unique_sleep());
        let script =
            format!("setsid sleep {home} & mkdir -p sub && cd sub && setsid env -u HOME sleep {cwd} & sleep 3600");
        let end = async {
            if destroy {
                h.runtime.destroy_lease(&lease.id).await.unwrap();
            } else {
                h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
            }
        };
        let wait_both = async {
            wait_for(&home).await;
            wait_for(&cwd).await;
            end.await;
        };
        let call = async {
            let _ = h
                .runtime
                .execute(&lease.id, ExecuteRequest::new("sh", ["-c", &script]))
                .await;
        };
        tokio::time::timeout(Duration::from_secs(30), async { tokio::join!(call, wait_both) })
            .await
            .expect("the call did not end with its lease");
        assert!(
            survivors(&home).await.is_empty(),
            "HOME-tied sleeper survived (destroy: {destroy})"
        );
        assert!(
            survivors(&cwd).await.is_empty(),
            "cwd-tied sleeper survived (destroy: {destroy})"
        );
    }
    h.finish();
}
