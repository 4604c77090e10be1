//! Calls while a crashed worker waits out its restart backoff, against the scriptable
//! worker: they fail at once with a retryable error saying when the host tries again,
//! instead of waiting (up to their timeout) for a restart that may be minutes away.

mod host_common;

use std::time::{Duration, Instant};

use envrt_driver_plugin_sandbox::{RestartPolicy, SandboxError, SandboxOptions};
use envrt_runtime_core::{AcquireRequest, DriverError, RuntimeError};
use host_common::*;
use serde_json::json;

/// A restart backoff of 4 s ± 25 %: far longer than the calls below may take.
fn slow_restarts() -> SandboxOptions {
    SandboxOptions {
        restart: RestartPolicy {
            base: Duration::from_secs(4),
            ..RestartPolicy::default()
        },
        ..SandboxOptions::default()
    }
}

/// Splits `Worker for plugin "fault.plugin" is unavailable ({reason}); the host tries it
/// again in {n} ms.` into the reason and `n`, failing on any other text.
fn restarting_text(text: &str) -> (String, u64) {
    let rest = text
        .strip_prefix("Worker for plugin \"fault.plugin\" is unavailable (")
        .unwrap_or_else(|| panic!("not the restarting text: {text}"));
    let (reason, rest) = rest
        .rsplit_once("); the host tries it again in ")
        .unwrap_or_else(|| panic!("not the restarting text: {text}"));
    let ms = rest
        .strip_suffix(" ms.")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not the restarting text: {text}"));
    (reason.to_owned(), ms)
}

fn restarting(err: &DriverError) -> (String, u64) {
    assert_eq!(err.kind(), "unavailable", "{err:?}");
    let Some(typed @ SandboxError::WorkerRestarting { retry_in_ms, .. }) = SandboxError::of(err) else {
        panic!("not the restarting error: {err:?}")
    };
    assert_eq!(typed.code(), Some(-32000));
    assert_eq!(typed.retry_after(), Some(Duration::from_millis(*retry_in_ms)));
    restarting_text(&err.to_string())
}

#[tokio::test]
async fn calls_during_the_restart_backoff_fail_at_once_and_succeed_once_the_worker_is_back() {
    let dir = TempDir::new("backoff");
    let fault_file = dir.join("modes");
    std::fs::write(&fault_file, "die-on-health").unwrap();
    let manifest = script_manifest("", &[("FAULT_FILE", fault_file.to_str().unwrap())]);
    let driver = start(manifest, slow_restarts()).await;
    let runtime = runtime_with(driver.clone()).await;
    let pid = driver.worker_pid().unwrap();
    // the restarted worker is healthy
    std::fs::remove_file(&fault_file).unwrap();

    // the worker exits during a call
    let err = bounded("health", driver.health()).await.unwrap_err();
    assert_eq!(err.to_string(), "Worker process exited (code=1, signal=null)");

    // during the backoff every call fails at once (the RPC timeout is 30 s), naming the
    // exit and how long until the host tries again
    for _ in 0..3 {
        let began = Instant::now();
        let err = driver.health().await.unwrap_err();
        assert!(began.elapsed() < Duration::from_secs(1), "{:?}", began.elapsed());
        let (reason, ms) = restarting(&err);
        assert_eq!(reason, "it exited: code=1, signal=null");
        assert!(ms <= 5000, "{err}");
    }
    // an acquire through the facade too
    let began = Instant::now();
    let err = runtime
        .acquire_lease(AcquireRequest::new("env-1", "co-1"))
        .await
        .unwrap_err();
    assert!(began.elapsed() < Duration::from_secs(1), "{:?}", began.elapsed());
    let RuntimeError::Driver(err) = &err else {
        panic!("not a driver error: {err:?}")
    };
    assert_eq!(restarting(err).0, "it exited: code=1, signal=null");

    // once the worker is back, calls succeed again
    restarted(&driver, pid).await;
    assert_eq!(bounded("health", driver.health()).await.unwrap()["status"], "ok");
    let lease = acquire(&runtime).await;
    assert_eq!(lease.provider_lease_id.as_deref(), Some("lease-1"));
}

#[tokio::test]
async fn a_worker_that_crashes_on_every_start_fails_calls_at_once_with_the_restart_failure() {
    let dir = TempDir::new("backoff-init");
    let fault_file = dir.join("modes");
    let options = SandboxOptions {
        restart: RestartPolicy {
            base: Duration::from_millis(200),
            ..RestartPolicy::default()
        },
        ..SandboxOptions::default()
    };
    let manifest = script_manifest("", &[("FAULT_FILE", fault_file.to_str().unwrap())]);
    let driver = start(manifest, options).await;
    let pid = driver.worker_pid().unwrap();
    // every start from now on dies in initialize
    std::fs::write(&fault_file, "init-exit").unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // once a restart has failed, each call fails at once with why
    let err = bounded("a failed restart", async {
        loop {
            let began = Instant::now();
            let err = driver.call("health", json!({})).await.unwrap_err();
            assert!(
                began.elapsed() < Duration::from_secs(1),
                "{:?} for {err}",
                began.elapsed()
            );
            // a call issued before the host saw the kill meets the dying worker
            let dying = matches!(SandboxError::of(&err), Some(SandboxError::WorkerExited { .. }));
            if !dying && restarting(&err).0.starts_with("its restart failed") {
                return err;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(
        restarting(&err).0,
        "its restart failed: Worker initialize failed for \"fault.plugin\": Worker process exited (code=3, signal=null)"
    );
    // a worker that can start again serves
    std::fs::remove_file(&fault_file).unwrap();
    bounded("a served call", async {
        while driver.call("health", json!({})).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}
