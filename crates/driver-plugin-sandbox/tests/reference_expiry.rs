//! Lease expiry through the host and the reference worker: `requestedExpiresAt` reaches
//! the worker, its `expiresAt` is the lease's, and at the expiry the lease's sandboxes die
//! and its directory goes, also when the worker itself was SIGKILLed before. A worker that
//! attests no expiry (the SDK fixture) gets the facade's exact refusal.

mod host_common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use envrt_driver_plugin_sandbox::SandboxOptions;
use envrt_runtime_core::{
    AcquireRequest, EnvironmentRuntime, ExecuteRequest, Lease, LeaseStatus, RuntimeError, Timestamp,
    UnsupportedOperation,
};
use host_common::*;

async fn acquire_expiring(runtime: &EnvironmentRuntime, expires_in: Duration) -> (Lease, Timestamp) {
    let mut request = AcquireRequest::new("env-1", "co-1");
    let at = Timestamp::now().after(expires_in);
    request.requested_expires_at = Some(at);
    (runtime.acquire_lease(request).await.unwrap(), at)
}

/// The host directory of a reference-worker lease.
fn lease_dir(root: &Path, lease: &Lease) -> PathBuf {
    root.join(lease.provider_lease_id.as_deref().unwrap())
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

/// Names left in the worker's root.
fn entries(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Live processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read(entry.path().join("cmdline"))
            .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle.as_bytes()))
            && alive(pid)
        {
            found.push(pid);
        }
    }
    found
}

fn unique_sleep() -> String {
    format!("3000.{:09}", uuid::Uuid::new_v4().as_u128() % 1_000_000_000)
}

#[tokio::test]
async fn at_expiry_the_sandbox_dies_the_directory_goes_and_the_lease_refuses() {
    let root = TempDir::new("expiry");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let (lease, requested) = acquire_expiring(&runtime, Duration::from_secs(2)).await;
    assert_eq!(
        lease.expires_at,
        Some(requested),
        "the worker attests the requested expiry"
    );
    let dir = lease_dir(root.path(), &lease);
    assert!(dir.is_dir());
    let nap = unique_sleep();
    let running = runtime.execute(&lease.id, ExecuteRequest::new("sleep", [nap.as_str()]));
    let watch = async {
        assert!(
            eventually(|| !processes_with(&nap).is_empty()).await,
            "the command never started"
        );
        assert!(
            eventually(|| processes_with(&nap).is_empty()).await,
            "the sandbox outlived the expiry"
        );
        assert!(
            eventually(|| !dir.exists()).await,
            "the lease directory outlived the expiry"
        );
    };
    let (out, ()) = tokio::join!(bounded("execute", running), watch);
    if let Ok(out) = out {
        assert_ne!(out.exit_code, Some(0), "the command finished instead of dying");
    }
    let error = runtime
        .execute(&lease.id, ExecuteRequest::new("true", [""; 0]))
        .await
        .unwrap_err();
    assert!(matches!(error, RuntimeError::LeaseExpired { .. }));
    assert_eq!(
        error.to_string(),
        format!("Lease \"{}\" expired at {}.", lease.id, requested.to_rfc3339())
    );
    let report = runtime.release_expired().await.unwrap();
    assert_eq!(report.released.len(), 1, "{:?}", report.failures);
    assert_eq!(report.released[0].status, LeaseStatus::Expired);
    assert!(
        eventually(|| entries(root.path()).is_empty()).await,
        "left: {:?}",
        entries(root.path())
    );
    driver.shutdown().await;
}

#[tokio::test]
async fn the_directory_goes_at_expiry_even_after_the_worker_was_sigkilled() {
    // The host restarts the worker; the new one re-arms the expiry it finds recorded.
    let root = TempDir::new("expiry-kill");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let (lease, _) = acquire_expiring(&runtime, Duration::from_secs(2)).await;
    let dir = lease_dir(root.path(), &lease);
    let worker = driver.worker_pid().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker as i32), nix::sys::signal::SIGKILL).unwrap();
    assert!(wait_gone(worker, Duration::from_secs(20)).await);
    assert!(dir.is_dir(), "nothing removes the directory before its expiry");
    assert!(
        eventually(|| !dir.exists()).await,
        "the lease directory outlived the expiry"
    );
    assert!(
        eventually(|| entries(root.path()).is_empty()).await,
        "left: {:?}",
        entries(root.path())
    );
    driver.shutdown().await;
}

#[tokio::test]
async fn a_worker_started_after_the_expiry_removes_what_a_dead_host_left() {
    let root = TempDir::new("expiry-later");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    let driver = start(manifest.clone(), SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let (lease, _) = acquire_expiring(&runtime, Duration::from_secs(2)).await;
    let dir = lease_dir(root.path(), &lease);
    // The host goes away before the expiry (its worker with it).
    driver.shutdown().await;
    drop(runtime);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(dir.is_dir(), "no worker ran: the directory is still there");
    // The next worker over the same root (what `envrt gc` starts) ends it.
    let later = start(manifest, SandboxOptions::default()).await;
    assert!(
        eventually(|| entries(root.path()).is_empty()).await,
        "left: {:?}",
        entries(root.path())
    );
    later.shutdown().await;
}

#[tokio::test]
async fn a_lease_released_before_expiry_drops_its_expiry_and_keeps_a_reusable_directory() {
    let root = TempDir::new("expiry-early");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let mut request = AcquireRequest::new("env-1", "co-1");
    request.policy = envrt_runtime_core::LeasePolicy::ReuseByEnvironment;
    request.requested_expires_at = Some(Timestamp::now().after(Duration::from_secs(2)));
    let lease = runtime.acquire_lease(request).await.unwrap();
    let dir = lease_dir(root.path(), &lease);
    let record = root.join(&format!(".expiry-{}", lease.provider_lease_id.as_deref().unwrap()));
    assert!(record.is_file(), "the expiry is recorded");
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert!(!record.exists(), "the release dropped the expiry");
    // Past the expiry it would have had, the released directory is still there.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        dir.is_dir(),
        "a released reusable lease lost its files to a stale expiry"
    );
    assert_eq!(entries(root.path()), vec![lease.provider_lease_id.clone().unwrap()]);
    runtime.destroy_lease(&lease.id).await.unwrap();
    assert!(entries(root.path()).is_empty());
    driver.shutdown().await;
}

#[tokio::test]
async fn a_worker_that_attests_no_expiry_is_refused_with_the_exact_text() {
    let root = TempDir::new("expiry-sdk");
    let driver = start(sdk_manifest(root.path()), SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let mut request = AcquireRequest::new("env-1", "co-1");
    request.requested_expires_at = Some(Timestamp::now().after(Duration::from_secs(600)));
    let error = runtime.acquire_lease(request).await.unwrap_err();
    assert!(matches!(
        error,
        RuntimeError::Unsupported {
            operation: UnsupportedOperation::Expiry,
            ..
        }
    ));
    assert_eq!(
        error.to_string(),
        format!("Environment driver \"{}\" does not support lease expiry.", {
            use envrt_runtime_core::EnvironmentDriver as _;
            driver.key().to_owned()
        })
    );
    driver.shutdown().await;
}

#[tokio::test]
async fn a_process_outlives_its_program_until_the_expiry_a_later_worker_fires() {
    let root = TempDir::new("expiry-process");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    let driver = start(manifest.clone(), SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let (lease, _) = acquire_expiring(&runtime, Duration::from_secs(3)).await;
    let (nap, escapee) = (unique_sleep(), unique_sleep());
    let script = format!("setsid sleep {escapee} & exec sleep {nap}");
    bounded(
        "spawn",
        runtime.spawn(&lease.id, envrt_runtime_core::SpawnRequest::new(["sh", "-c", &script])),
    )
    .await
    .unwrap();
    assert!(eventually(|| processes_with(&nap).len() == 1 && processes_with(&escapee).len() == 1).await);
    // The host goes away before the expiry, its worker with it: the process stays.
    driver.shutdown().await;
    drop(runtime);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(processes_with(&nap).len(), 1, "the process ended with its program");
    // The next worker over the same root ends the expired lease, its supervisor included.
    let later = start(manifest, SandboxOptions::default()).await;
    assert!(
        eventually(|| processes_with(&nap).is_empty() && processes_with(&escapee).is_empty()).await,
        "a process of the lease outlived its expiry"
    );
    assert!(
        eventually(|| entries(root.path()).is_empty()).await,
        "left: {:?}",
        entries(root.path())
    );
    later.shutdown().await;
}
