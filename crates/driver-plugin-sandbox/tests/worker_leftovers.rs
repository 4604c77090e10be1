//! Nothing a worker started outlives it: a third-party worker (the script fixture) that
//! leaves a command running in its own session loses it when the host retires the worker
//! (forged frame) or when the worker crashes; calls in flight fail at once with the
//! worker-exit error, and calls issued meanwhile never wait for the RPC timeout.

mod host_common;

use std::time::Duration;

use envrt_driver_plugin_sandbox::{SandboxDriver, SandboxError, SandboxOptions};
use host_common::*;
use serde_json::json;

/// Kills a leftover at the end of a (failing) test, so none is left on the machine.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if alive(self.0) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.0 as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

fn cgroup_v2_writable() -> bool {
    let ok = std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| m.contains(" - cgroup2 "))
        && rustix::process::geteuid().is_root();
    if !ok {
        eprintln!("SKIPPED: no writable cgroup v2 here (the worker cgroup needs one)");
    }
    ok
}

async fn detach(driver: &SandboxDriver, tag: &str) -> (u32, KillOnDrop) {
    let arg = format!("300.{}{tag}", std::process::id());
    let answer = bounded("detach", driver.call("test.detach", json!({ "arg": arg })))
        .await
        .unwrap();
    let pid = answer["pid"].as_u64().unwrap() as u32;
    assert!(alive(pid));
    (pid, KillOnDrop(pid))
}

#[tokio::test]
async fn what_a_retired_worker_started_dies_with_it() {
    if !cgroup_v2_writable() {
        return;
    }
    let driver = start(script_manifest("", &[]), SandboxOptions::default()).await;
    let worker = driver.worker_pid().unwrap();
    let (left, _guard) = detach(&driver, "1").await;
    // a frame for a pair the host never issued retires (kills) the worker
    let line = json!({"jsonrpc": "2.0", "method": "duplexChannel.data",
        "params": {"hostRouteId": "duplex-route-999999998", "workerSessionId": "s-1", "chunk": "aGk="}});
    let _ = bounded("emit", driver.call("test.emit", json!({ "line": line }))).await;
    assert!(
        wait_gone(worker, Duration::from_secs(10)).await,
        "the worker was not retired"
    );
    assert!(
        wait_gone(left, Duration::from_secs(10)).await,
        "the detached command outlived its retired worker"
    );
}

#[tokio::test]
async fn a_crash_mid_call_fails_the_calls_at_once_and_kills_what_the_worker_left() {
    if !cgroup_v2_writable() {
        return;
    }
    let driver = start(script_manifest("", &[]), SandboxOptions::default()).await;
    let worker = driver.worker_pid().unwrap();
    let (left, _guard) = detach(&driver, "2").await;
    let in_flight = {
        let driver = driver.clone();
        tokio::spawn(async move { driver.call("test.hang", json!({})).await })
    };
    // let the request reach the worker, then crash it
    tokio::time::sleep(Duration::from_millis(200)).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // a call issued around the crash
    let around = {
        let driver = driver.clone();
        tokio::spawn(async move { driver.call("health", json!({})).await })
    };
    // Far below the 30 s RPC timeout: the in-flight call fails with the exit error...
    let err = tokio::time::timeout(Duration::from_secs(5), in_flight)
        .await
        .expect("the in-flight call waited for its timeout")
        .unwrap()
        .unwrap_err();
    assert_eq!(err.to_string(), "Worker process exited (code=null, signal=SIGKILL)");
    assert!(matches!(
        SandboxError::of(&err),
        Some(SandboxError::WorkerExited { .. })
    ));
    // ...and the call issued around it fails the same way, or at once with the restart
    // backoff's error, or is served by the restarted worker, never waiting for the timeout.
    let around = tokio::time::timeout(Duration::from_secs(5), around)
        .await
        .expect("a call issued around the crash waited for its timeout")
        .unwrap();
    if let Err(e) = &around {
        assert!(
            matches!(
                SandboxError::of(e),
                Some(SandboxError::WorkerExited { .. } | SandboxError::WorkerRestarting { .. })
            ),
            "{e}"
        );
    }
    assert!(
        wait_gone(left, Duration::from_secs(10)).await,
        "the detached command outlived its crashed worker"
    );
}

#[tokio::test]
async fn empty_worker_cgroups_left_by_a_killed_host_are_removed() {
    if !cgroup_v2_writable() {
        return;
    }
    let mount = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .find_map(|l| {
            let (fields, tail) = l.split_once(" - ")?;
            tail.starts_with("cgroup2 ")
                .then(|| fields.split_whitespace().nth(4).unwrap().to_owned())
        })
        .unwrap();
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(|p| p.trim_start_matches('/').to_owned()))
        .unwrap();
    let stale = std::path::Path::new(&mount)
        .join(own)
        .join(format!("envrt-worker-stale-{}", std::process::id()));
    std::fs::create_dir(&stale).unwrap();
    // left by a host killed two minutes ago (younger ones may be another host's, not yet joined)
    let aged = std::process::Command::new("touch")
        .args(["-d", "2 minutes ago"])
        .arg(&stale)
        .status()
        .unwrap();
    assert!(aged.success());
    let fresh = stale.with_file_name(format!("envrt-worker-fresh-{}", std::process::id()));
    std::fs::create_dir(&fresh).unwrap();
    let driver = start(script_manifest("", &[]), SandboxOptions::default()).await;
    assert!(!stale.exists(), "the stale empty cgroup is still there");
    assert!(fresh.exists(), "a young cgroup was removed");
    std::fs::remove_dir(&fresh).unwrap();
    driver.shutdown().await;
}
