//! Pause and unpause on the local driver, with and without cgroups, against real
//! processes: a paused lease's counter does not move while an unpaused lease's does, the
//! lease refuses execute, spawn and sync with the exact text, its spawned process and its
//! output buffer survive and go on after unpause; a paused lease's processes die at
//! release, at destroy and at expiry (the watchdog alone), leaving nothing behind.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Harness, bounded, marker, survivors};
use envrt_driver_local::LocalConfig;
use envrt_runtime_core::{
    AcquireRequest, ExecuteRequest, Lease, LeasePolicy, LeaseStatus, Offsets, OutputEvent, ProcessStream, SpawnRequest,
    SyncOperation, Timestamp, is_paused,
};

/// A counter that writes its next value to `count` (atomically) and prints it.
fn counter(tag: &str) -> SpawnRequest {
    let script = format!(
        "i=0; while :; do i=$((i+1)); echo $i > count.tmp; mv count.tmp count; echo {tag}-$i; sleep 0.02; done"
    );
    SpawnRequest::new(["sh", "-c", script.as_str(), tag])
}

fn count(workspace: &Path) -> u64 {
    std::fs::read_to_string(workspace.join("count"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits (bounded, 20 s) until `done` holds; whether it did.
async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(20);
    while !done() {
        if Instant::now() > until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// A lease running a counter, once the counter has counted.
async fn counting(h: &Harness, request: AcquireRequest, tag: &str) -> (Lease, String) {
    let lease = h.runtime.acquire_lease(request).await.unwrap();
    let info = h.runtime.spawn(&lease.id, counter(tag)).await.unwrap();
    let workspace = h.workspace(&lease);
    assert!(eventually(|| count(&workspace) > 2).await, "the counter never counted");
    (lease, info.id.to_string())
}

fn plain() -> AcquireRequest {
    AcquireRequest::new("env-local", "acme")
}

#[tokio::test]
async fn a_paused_lease_stands_still_refuses_and_goes_on_after_unpause_with_cgroups() {
    pause_round_trip(true).await;
}

#[tokio::test]
async fn a_paused_lease_stands_still_refuses_and_goes_on_after_unpause_without_cgroups() {
    pause_round_trip(false).await;
}

async fn pause_round_trip(cgroups: bool) {
    let h = Harness::with_config(LocalConfig {
        cgroups,
        ..Default::default()
    })
    .await;
    eprintln!("containment: {}", h.driver.containment());
    let tag = marker("paused");
    let (lease, process) = counting(&h, plain(), &tag).await;
    let reference_tag = marker("running");
    let (reference, _) = counting(&h, plain(), &reference_tag).await;
    let workspace = h.workspace(&lease);

    let paused = h.runtime.pause_lease(&lease.id).await.unwrap();
    assert!(is_paused(&paused));
    assert_eq!(paused.status, LeaseStatus::Active);
    assert!(
        is_paused(&h.runtime.lease(&lease.id).await.unwrap().unwrap()),
        "recorded in the store"
    );
    // Pausing again changes nothing.
    assert!(is_paused(&h.runtime.pause_lease(&lease.id).await.unwrap()));
    let frozen_at = count(&workspace);
    // The window: the unpaused lease's counter moves on by 20 while the paused one stands.
    let reference_ws = h.workspace(&reference);
    let start = count(&reference_ws);
    assert!(
        eventually(|| count(&reference_ws) >= start + 20).await,
        "the reference stopped too"
    );
    assert_eq!(count(&workspace), frozen_at, "the paused lease's counter moved");

    let text = format!("Lease \"{}\" is paused.", lease.id);
    let refused = h
        .runtime
        .execute(&lease.id, ExecuteRequest::new("true", Vec::<String>::new()))
        .await
        .unwrap_err();
    assert_eq!(refused.to_string(), text);
    assert_eq!(refused.kind(), "lease_paused");
    let refused = h
        .runtime
        .spawn(&lease.id, SpawnRequest::new(["true"]))
        .await
        .unwrap_err();
    assert_eq!(refused.to_string(), text);
    let nothing: [SyncOperation; 0] = [];
    let refused = h.runtime.sync_in(&lease.id, &nothing).await.unwrap_err();
    assert_eq!(refused.to_string(), text);
    let refused = h.runtime.sync_out(&lease.id, &nothing).await.unwrap_err();
    assert_eq!(refused.to_string(), text);
    let refused = h.runtime.output(&process, &Offsets::zero()).await.unwrap_err();
    assert_eq!(refused.to_string(), text);

    let unpaused = h.runtime.unpause_lease(&lease.id).await.unwrap();
    assert!(!is_paused(&unpaused));
    assert!(
        eventually(|| count(&workspace) > frozen_at + 2).await,
        "the counter did not go on"
    );
    // The process handle works, and its buffer holds what it printed before the pause.
    let mut output = h.runtime.output(&process, &Offsets::zero()).await.unwrap();
    let mut stdout = Vec::new();
    let after = format!("{tag}-{}\n", frozen_at + 2);
    while !String::from_utf8_lossy(&stdout).contains(&after) {
        match bounded(output.next()).await.unwrap() {
            Some(OutputEvent::Chunk(c)) if c.stream == ProcessStream::Stdout => stdout.extend(c.bytes),
            Some(OutputEvent::Chunk(_)) => {}
            other => panic!("the counter ended: {other:?}"),
        }
    }
    assert!(String::from_utf8_lossy(&stdout).starts_with(&format!("{tag}-1\n")));
    drop(output);
    // Unpausing again changes nothing; execute works again.
    assert!(!is_paused(&h.runtime.unpause_lease(&lease.id).await.unwrap()));
    assert_eq!(h.sh(&lease, "echo ok").await.stdout, b"ok\n");

    // Paused again, the lease still releases, and its processes die.
    h.runtime.pause_lease(&lease.id).await.unwrap();
    let released = h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert!(!is_paused(&released), "release drops the mark");
    assert!(survivors(&tag).await.is_empty(), "a paused process outlived release");
    h.runtime.pause_lease(&reference.id).await.unwrap();
    h.runtime.destroy_lease(&reference.id).await.unwrap();
    assert!(
        survivors(&reference_tag).await.is_empty(),
        "a paused process outlived destroy"
    );
    h.finish();
}

#[tokio::test]
async fn a_paused_lease_dies_at_its_expiry_with_cgroups() {
    paused_expiry(true).await;
}

#[tokio::test]
async fn a_paused_lease_dies_at_its_expiry_without_cgroups() {
    paused_expiry(false).await;
}

async fn paused_expiry(cgroups: bool) {
    let h = Harness::with_config(LocalConfig {
        cgroups,
        ..Default::default()
    })
    .await;
    let mut request = plain();
    request.policy = LeasePolicy::Ephemeral;
    request.requested_expires_at = Some(Timestamp::now().after(Duration::from_secs(3)));
    let tag = marker("expiring");
    let (lease, _) = counting(&h, request, &tag).await;
    let workspace = h.workspace(&lease);
    h.runtime.pause_lease(&lease.id).await.unwrap();
    // The watchdog alone (no release, no gc) ends the paused processes and the workspace.
    assert!(
        eventually(|| !workspace.exists()).await,
        "the workspace outlived the expiry"
    );
    assert!(survivors(&tag).await.is_empty(), "a paused process outlived the expiry");
    let report = h.runtime.release_expired().await.unwrap();
    assert_eq!(report.released.len(), 1, "{report:?}");
    let ended = h.runtime.lease(&lease.id).await.unwrap().unwrap();
    assert_eq!(ended.status, LeaseStatus::Expired);
    assert!(!is_paused(&ended));
    h.finish();
}
