//! Pause and unpause on the SSH driver against the test sshd (this machine): a counter
//! spawned under the lease's supervisor stands still while the lease is paused (measured
//! against an execute-run counter on another lease), goes on after unpause with its
//! handle and output buffer intact, and dies at release while paused.

mod common;

use std::time::{Duration, Instant};

use envrt_runtime_core::{AcquireRequest, ExecuteRequest, Lease, LeaseStatus, Offsets, OutputEvent, ProcessStream};

use common::supervisor::*;
use common::{server, survivors, unique_root};

fn count(workspace: &str) -> u64 {
    std::fs::read_to_string(format!("{workspace}/count"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(30);
    while !done() {
        if Instant::now() > until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

fn counter(marker: &str) -> String {
    format!(
        "i=0; while :; do i=$((i+1)); echo $i > count.tmp; mv count.tmp count; echo tick-$i; sleep 0.02; done; : {marker}"
    )
}

fn workspace(lease: &Lease) -> String {
    lease.metadata["workspace"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_lease_stands_still_and_its_spawned_process_goes_on_after_unpause() {
    let Some(server) = server() else { return };
    let relative = unique_root("pause");
    let _root = root_guard(&server, relative.clone());
    let control = control_dir();
    let (_driver, runtime) = runtime_on(&server, &relative, control.path(), None, |_| {}).await;
    let marker = format!("envrt-ssh-paused-{}", common::uuid_like());
    let lease = runtime
        .acquire_lease(AcquireRequest::new("env-ssh", "acme"))
        .await
        .unwrap();
    let process = tokio::time::timeout(BOUND, runtime.spawn(&lease.id, sh(&counter(&marker))))
        .await
        .unwrap()
        .unwrap()
        .id
        .to_string();
    let ws = workspace(&lease);
    assert!(eventually(|| count(&ws) > 2).await, "the counter never counted");
    // The reference counter runs through execute on a second lease.
    let reference = runtime
        .acquire_lease(AcquireRequest::new("env-ssh", "acme"))
        .await
        .unwrap();
    let reference_marker = format!("envrt-ssh-ref-{}", common::uuid_like());
    let mut request = ExecuteRequest::new("sh", ["-c", counter(&reference_marker).as_str()]);
    request.timeout = Some(Duration::from_secs(120));
    let running = {
        let id = reference.id.clone();
        let runtime = &runtime;
        async move { runtime.execute(&id, request).await }
    };
    let reference_ws = workspace(&reference);
    let watch = async {
        assert!(
            eventually(|| count(&reference_ws) > 2).await,
            "the reference never counted"
        );
        runtime.pause_lease(&lease.id).await.unwrap();
        let frozen_at = count(&ws);
        let start = count(&reference_ws);
        assert!(
            eventually(|| count(&reference_ws) >= start + 20).await,
            "the reference stopped too"
        );
        assert_eq!(count(&ws), frozen_at, "the paused lease's counter moved");
        runtime.unpause_lease(&lease.id).await.unwrap();
        assert!(
            eventually(|| count(&ws) > frozen_at + 2).await,
            "the counter did not go on"
        );
        let mut output = runtime.output(&process, &Offsets::zero()).await.unwrap();
        let mut stdout = Vec::new();
        let after = format!("tick-{}\n", frozen_at + 2);
        while !String::from_utf8_lossy(&stdout).contains(&after) {
            match tokio::time::timeout(BOUND, output.next()).await.unwrap().unwrap() {
                Some(OutputEvent::Chunk(c)) if c.stream == ProcessStream::Stdout => stdout.extend(c.bytes),
                Some(OutputEvent::Chunk(_)) => {}
                other => panic!("the counter ended: {other:?}"),
            }
        }
        assert!(String::from_utf8_lossy(&stdout).starts_with("tick-1\n"));
        drop(output);
        runtime.pause_lease(&lease.id).await.unwrap();
        runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        assert!(survivors(&marker).await.is_empty(), "a paused process outlived release");
        runtime
            .release_lease(&reference.id, LeaseStatus::Released)
            .await
            .unwrap();
    };
    let (ran, ()) = tokio::join!(tokio::time::timeout(BOUND * 2, running), watch);
    assert!(ran.is_ok(), "the reference execute did not end with its lease");
    assert!(survivors(&reference_marker).await.is_empty());
}
