//! Lease expiry on the local driver: the requested expiry is attested, and at expiry a
//! watchdog that does not depend on the acquiring program kills what the lease runs and
//! removes its workspace; a lease released early leaves no watchdog behind.

mod common;

use std::time::{Duration, Instant};

use common::{Harness, bounded, processes_with, survivors, unique_sleep};
use envrt_driver_local::LocalConfig;
use envrt_runtime_core::{AcquireRequest, ExecuteRequest, LeasePolicy, LeaseStatus, RuntimeError, Timestamp};

fn request(policy: LeasePolicy, expires_in: Duration) -> AcquireRequest {
    let mut request = AcquireRequest::new("env-local", "acme");
    request.policy = policy;
    request.requested_expires_at = Some(Timestamp::now().after(expires_in));
    request
}

/// Waits (bounded, 20 s) until `done` holds; whether it did.
async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(20);
    while !done() {
        if Instant::now() > until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test]
async fn at_expiry_commands_die_the_workspace_goes_and_the_lease_refuses_with_its_text() {
    expires_for_real(true).await;
}

#[tokio::test]
async fn without_cgroups_the_watchdog_still_kills_and_removes() {
    expires_for_real(false).await;
}

async fn expires_for_real(cgroups: bool) {
    let h = Harness::with_config(LocalConfig {
        cgroups,
        ..Default::default()
    })
    .await;
    eprintln!("containment: {}", h.driver.containment());
    let wanted = request(LeasePolicy::Ephemeral, Duration::from_secs(2));
    let at = wanted.requested_expires_at;
    let lease = h.runtime.acquire_lease(wanted).await.unwrap();
    assert_eq!(lease.expires_at, at, "the driver attests the requested expiry");
    let workspace = h.workspace(&lease);
    let nap = unique_sleep();
    // A command still running at expiry; nobody in this process ends it.
    let script = format!("sleep {nap}");
    let running = h
        .runtime
        .execute(&lease.id, ExecuteRequest::new("sh", ["-c", script.as_str()]));
    let watch = async {
        assert!(
            eventually(|| !processes_with(&nap).is_empty()).await,
            "the command never started"
        );
        // The watchdog alone (no release, no gc) ends the command and removes the workspace.
        assert!(
            eventually(|| !workspace.exists()).await,
            "the workspace outlived the expiry"
        );
        assert!(survivors(&nap).await.is_empty(), "the command outlived the expiry");
    };
    let (out, ()) = tokio::join!(bounded(running), watch);
    let out = out.unwrap();
    assert_ne!(out.exit_code, Some(0), "the command was killed, not finished");
    let error = h
        .runtime
        .execute(&lease.id, ExecuteRequest::new("true", Vec::<String>::new()))
        .await
        .unwrap_err();
    assert!(matches!(error, RuntimeError::LeaseExpired { .. }));
    assert_eq!(
        error.to_string(),
        format!("Lease \"{}\" expired at {}.", lease.id, at.unwrap().to_rfc3339())
    );
    let expired = h.runtime.release_expired().await.unwrap();
    assert_eq!(expired.released.len(), 1);
    assert_eq!(expired.released[0].status, LeaseStatus::Expired);
    assert!(
        eventually(|| h.leftovers().is_empty()).await,
        "left: {:?}",
        h.leftovers()
    );
    h.finish();
}

#[tokio::test]
async fn a_reused_workspace_is_kept_at_expiry_but_its_commands_die() {
    let h = Harness::new().await;
    let lease = h
        .runtime
        .acquire_lease(request(LeasePolicy::ReuseByEnvironment, Duration::from_secs(2)))
        .await
        .unwrap();
    let workspace = h.workspace(&lease);
    let nap = unique_sleep();
    let script = format!("sleep {nap}");
    let running = h
        .runtime
        .execute(&lease.id, ExecuteRequest::new("sh", ["-c", script.as_str()]));
    let watch = async {
        assert!(
            eventually(|| !processes_with(&nap).is_empty()).await,
            "the command never started"
        );
        assert!(survivors(&nap).await.is_empty(), "the command outlived the expiry");
    };
    let (out, ()) = tokio::join!(bounded(running), watch);
    out.unwrap();
    // The watchdog is done once its pid file is gone; the workspace stays for reuse.
    assert!(eventually(|| !h.leftovers().iter().any(|n| n.starts_with(".watchdog-"))).await);
    assert!(workspace.is_dir(), "reuse_by_environment keeps its workspace");
    h.runtime.destroy_lease(&lease.id).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_lease_released_before_expiry_leaves_no_watchdog() {
    let h = Harness::new().await;
    for end in ["release", "destroy"] {
        let lease = h
            .runtime
            .acquire_lease(request(LeasePolicy::Ephemeral, Duration::from_secs(600)))
            .await
            .unwrap();
        let workspace = h.workspace(&lease);
        let ws = workspace.to_str().unwrap().to_owned();
        // Right after the spawn the watchdog may still be in exec (no command line yet).
        assert!(
            eventually(|| processes_with(&ws).len() == 1).await,
            "{end}: one watchdog per expiring lease"
        );
        if end == "release" {
            h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        } else {
            h.runtime.destroy_lease(&lease.id).await.unwrap();
        }
        assert!(
            survivors(&ws).await.is_empty(),
            "{end}: the watchdog outlived the lease"
        );
        assert!(h.leftovers().is_empty(), "{end}: left {:?}", h.leftovers());
    }
    // Without a requested expiry there is no watchdog and no expiry.
    let lease = h.lease().await;
    assert_eq!(lease.expires_at, None);
    assert!(processes_with(h.workspace(&lease).to_str().unwrap()).is_empty());
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_release_right_after_acquire_still_ends_the_watchdog() {
    // The watchdog may still be in exec (no command line yet) when acquire returns; the
    // driver tells it by its start time, so an immediate release must still end it.
    let h = Harness::new().await;
    let mut workspaces = Vec::new();
    for _ in 0..20 {
        let lease = h
            .runtime
            .acquire_lease(request(LeasePolicy::Ephemeral, Duration::from_secs(600)))
            .await
            .unwrap();
        workspaces.push(h.workspace(&lease).to_str().unwrap().to_owned());
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    }
    for ws in &workspaces {
        assert!(
            survivors(ws).await.is_empty(),
            "a watchdog outlived its released lease ({ws})"
        );
    }
    assert!(h.leftovers().is_empty(), "left {:?}", h.leftovers());
    h.finish();
}
