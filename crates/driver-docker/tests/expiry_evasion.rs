//! Docker expiry the command cannot evade: stopping every process it can see (the
//! container's expiry `sleep` among them) does not keep the container past its TTL once
//! the host program is gone, also for a reused lease resumed by a fresh runtime (its
//! container was stopped at release and started again with a new init), and a release
//! before the expiry leaves no watchdog.

mod common;

use std::time::{Duration, Instant};

use std::sync::Arc;

use envrt_driver_docker::DockerDriver;
use envrt_runtime_core::{AcquireRequest, EnvironmentRuntime, LeasePolicy, LeaseStatus, MemoryStore, Timestamp};
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

/// Stops every process of the lease's container the command can see (the expiry `sleep`
/// among them).
const STOP_ALL: &str =
    "for p in /proc/[0-9]*; do q=${p#/proc/}; [ \"$q\" = $$ ] || kill -STOP \"$q\"; done 2>/dev/null; echo done";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_lease_resumed_by_a_fresh_runtime_still_ends_at_its_expiry() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let store = Arc::new(MemoryStore::new());
        let first = EnvironmentRuntime::with_store(store.clone());
        first.register_driver(h.driver.clone());
        let mut config = serde_json::Map::new();
        config.insert("image".into(), common::image().into());
        let env = envrt_runtime_core::Environment::new("ctr", "Docker", "docker").with_config(config);
        first.put_environment(env).await.unwrap();
        let mut request = AcquireRequest::new("ctr", "acme");
        request.policy = LeasePolicy::ReuseByEnvironment;
        request.requested_expires_at = Some(Timestamp::now().after(Duration::from_secs(12)));
        let lease = first.acquire_lease(request).await.unwrap();
        let container = lease.provider_lease_id.clone().unwrap();
        // Released: the container is stopped (its watchdog exits with its init).
        first.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        drop(first);
        // A fresh runtime and driver (another process, say the next CLI call) resumes it.
        let driver = Arc::new(DockerDriver::connect(common::scoped_config(&h.run)).await.unwrap());
        let fresh = EnvironmentRuntime::with_store(store);
        fresh.register_driver(driver);
        let resumed = fresh.resume_lease(&lease.id).await.unwrap();
        assert_eq!(resumed.provider_lease_id.as_deref(), Some(container.as_str()));
        assert_eq!(resumed.expires_at, lease.expires_at);
        // One watchdog for the new init (the old one's exits within a second of the
        // stop), and a second resume of the running container starts no other.
        let init = std::process::Command::new("docker")
            .args(["inspect", "-f", "{{.State.Pid}}", &container])
            .output()
            .unwrap();
        let init = String::from_utf8_lossy(&init.stdout).trim().to_owned();
        let watchdogs = || host_processes(&format!("envrt-docker-expiry {container} {init} ")).len();
        assert_eq!(watchdogs(), 1);
        fresh.resume_lease(&lease.id).await.unwrap();
        assert_eq!(watchdogs(), 1);
        let stop = fresh
            .execute(
                &lease.id,
                envrt_runtime_core::ExecuteRequest::new("sh", ["-c", STOP_ALL]),
            )
            .await
            .unwrap();
        assert_eq!(stop.stdout, b"done\n");
        drop(fresh);
        // The engine reports the container's stop (`docker wait` returns when it stops);
        // 60 s only bounds a broken expiry.
        let waited = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::process::Command::new("docker")
                .args(["wait", &container])
                .output(),
        )
        .await;
        let stopped = waited.expect("the resumed container outlived its expiry").unwrap();
        assert!(stopped.status.success(), "{}", String::from_utf8_lossy(&stopped.stderr));
        let state = std::process::Command::new("docker")
            .args(["inspect", "-f", "{{.State.Running}}", &container])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&state.stdout).trim(), "false");
        assert!(
            Timestamp::now() >= lease.expires_at.unwrap(),
            "stopped before its expiry"
        );
    })
    .await;
    h.finish().await;
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
