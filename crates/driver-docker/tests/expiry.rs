//! Lease expiry on Docker: the container carries its expiry and stops (and is removed) at
//! that time, by its own main process and (local engine) a detached host watchdog, so a
//! lease whose holder is gone still ends on time.

mod common;

use std::time::{Duration, Instant};

use envrt_runtime_core::{AcquireRequest, ExecuteRequest, LeasePolicy, LeaseStatus, RuntimeError, Timestamp};
use serde_json::json;

/// Waits (bounded, 30 s) until the docker CLI lists no container of this test.
async fn containers_gone(run: &str) -> bool {
    let until = Instant::now() + Duration::from_secs(30);
    while !common::cli_containers(run).is_empty() {
        if Instant::now() > until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_expiry_the_container_stops_and_goes_by_itself_and_the_lease_refuses() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let env = h.environment(json!({})).await;
        let mut request = AcquireRequest::new(env, "acme");
        let requested = Timestamp::now().after(Duration::from_millis(3500));
        request.requested_expires_at = Some(requested);
        let lease = h.runtime.acquire_lease(request).await.unwrap();
        let at = lease.expires_at.expect("an attested expiry");
        assert!(at <= requested && at.0 % 1000 == 0, "{at} for {requested}");
        let id = lease.provider_lease_id.clone().unwrap();
        let labels = std::process::Command::new("docker")
            .args(["inspect", "-f", "{{json .Config.Labels}}", &id])
            .output()
            .unwrap();
        let labels: serde_json::Value = serde_json::from_slice(&labels.stdout).unwrap();
        assert_eq!(labels["envrt.expires-at"], at.to_rfc3339().as_str());
        // A command that would run for an hour ends with the container.
        let out = h
            .runtime
            .execute(&lease.id, ExecuteRequest::new("sleep", ["3600"]))
            .await;
        if let Ok(out) = &out {
            assert_ne!(out.exit_code, Some(0), "the command finished instead of dying");
        }
        assert!(containers_gone(&h.run).await, "the container outlived the expiry");
        let error = h
            .runtime
            .execute(&lease.id, ExecuteRequest::new("true", Vec::<String>::new()))
            .await
            .unwrap_err();
        assert!(matches!(error, RuntimeError::LeaseExpired { .. }));
        assert_eq!(
            error.to_string(),
            format!("Lease \"{}\" expired at {}.", lease.id, at.to_rfc3339())
        );
        let report = h.runtime.release_expired().await.unwrap();
        assert_eq!(report.released.len(), 1, "{:?}", report.failures);
        assert_eq!(report.released[0].status, LeaseStatus::Expired);
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_host_process_left_the_container_still_ends_at_expiry() {
    let h = harness_or_skip!();
    let run = h.run.clone();
    common::bounded(120, async {
        let env = h.environment(json!({})).await;
        let mut request = AcquireRequest::new(env, "acme");
        request.requested_expires_at = Some(Timestamp::now().after(Duration::from_millis(2500)));
        h.runtime.acquire_lease(request).await.unwrap();
        assert_eq!(common::cli_containers(&run).len(), 1);
    })
    .await;
    // The holder is gone: no runtime, no driver, no connection to the engine.
    h.abandon();
    let gone = containers_gone(&run).await;
    if !gone {
        let ids = common::cli_containers(&run);
        let _ = std::process::Command::new("docker")
            .arg("rm")
            .arg("-f")
            .args(&ids)
            .output();
    }
    assert!(gone, "the container outlived the expiry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reusable_lease_keeps_its_stopped_container_and_an_early_release_removes_it() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let env = h.environment(json!({})).await;
        let mut request = AcquireRequest::new(env.clone(), "acme");
        request.policy = LeasePolicy::ReuseByEnvironment;
        request.requested_expires_at = Some(Timestamp::now().after(Duration::from_millis(2500)));
        let lease = h.runtime.acquire_lease(request).await.unwrap();
        let id = lease.provider_lease_id.clone().unwrap();
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let state = std::process::Command::new("docker")
                .args(["inspect", "-f", "{{.State.Running}}", &id])
                .output()
                .unwrap();
            if String::from_utf8_lossy(&state.stdout).trim() == "false" {
                break;
            }
            assert!(Instant::now() < until, "the container never stopped");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        h.runtime.destroy_lease(&lease.id).await.unwrap();
        // Released well before its expiry: removed at once like any ephemeral lease.
        let mut request = AcquireRequest::new(env, "acme");
        request.requested_expires_at = Some(Timestamp::now().after(Duration::from_secs(600)));
        let lease = h.runtime.acquire_lease(request).await.unwrap();
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        assert!(common::cli_containers(&h.run).is_empty());
    })
    .await;
    h.finish().await;
}
