//! Docker expiry the command cannot evade: stopping every process it can see (the
//! container's expiry `sleep` among them) does not keep the container past its TTL once
//! the host program is gone, and a release before the expiry leaves no watchdog.

mod common;

use std::time::{Duration, Instant};

use envrt_runtime_core::{AcquireRequest, LeaseStatus, Timestamp};
use serde_json::json;

/// Host processes whose command line contains `needle`.
fn host_processes(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(needle))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_stops_every_process_it_sees_does_not_outlive_the_expiry() {
    let h = harness_or_skip!();
    let run = h.run.clone();
    common::bounded(120, async {
        let env = h.environment(json!({})).await;
        let mut request = AcquireRequest::new(env, "acme");
        request.requested_expires_at = Some(Timestamp::now().after(Duration::from_secs(5)));
        let lease = h.runtime.acquire_lease(request).await.unwrap();
        let script = "for p in /proc/[0-9]*; do q=${p#/proc/}; [ \"$q\" = $$ ] || kill -STOP \"$q\"; done 2>/dev/null; echo done";
        assert_eq!(h.sh(&lease, script).await.stdout, b"done\n");
        // The host program goes away without releasing anything.
        h.abandon();
        let until = Instant::now() + Duration::from_secs(30);
        while !common::cli_containers(&run).is_empty() {
            assert!(Instant::now() < until, "the container outlived its expiry");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_before_the_expiry_leaves_no_watchdog() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let env = h.environment(json!({})).await;
        let mut request = AcquireRequest::new(env, "acme");
        request.requested_expires_at = Some(Timestamp::now().after(Duration::from_secs(600)));
        let lease = h.runtime.acquire_lease(request).await.unwrap();
        let container = lease.provider_lease_id.clone().unwrap();
        assert_eq!(host_processes(&format!("envrt-docker-expiry {container}")).len(), 1);
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while !host_processes(&format!("envrt-docker-expiry {container}")).is_empty() {
            assert!(Instant::now() < until, "the watchdog outlived the release");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    h.finish().await;
}
