//! Faults, with small misbehaving workers (tests/fixtures/script-worker.py): stray and
//! oversized stdout lines, a worker killed during a call, initialize failures, timeouts.

mod host_common;

use std::time::{Duration, Instant};

use envrt_driver_plugin_sandbox::{SandboxDriver, SandboxError, SandboxOptions};
use envrt_runtime_core::{DriverError, ExecuteRequest, RuntimeError};
use host_common::*;
use serde_json::json;

fn sandbox_error(err: &RuntimeError) -> &SandboxError {
    match err {
        RuntimeError::Driver(d) => SandboxError::of(d).unwrap_or_else(|| panic!("not a sandbox error: {d:?}")),
        other => panic!("not a driver error: {other:?}"),
    }
}

#[tokio::test]
async fn garbage_and_oversized_stdout_lines_do_not_break_calls() {
    let options = SandboxOptions {
        max_line_bytes: 1024 * 1024,
        ..SandboxOptions::default()
    };
    // every answer is preceded by junk and a 3 MiB line (over the 1 MiB limit)
    let driver = start(script_manifest("garbage", &[("OVERSIZE_BYTES", "3145728")]), options).await;
    let pid = driver.worker_pid().unwrap();
    for _ in 0..3 {
        let health = bounded("health", driver.health()).await.unwrap();
        assert_eq!(health["status"], "ok");
    }
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    assert_eq!(lease.provider_lease_id.as_deref(), Some("lease-1"));
    let result = bounded(
        "execute",
        runtime.execute(&lease.id, ExecuteRequest::new("echo", ["x"])),
    )
    .await
    .unwrap();
    assert_eq!(result.stdout, b"ran echo");
    assert_eq!(driver.worker_pid(), Some(pid), "the worker was not restarted");
}

#[tokio::test]
async fn a_worker_killed_during_execute_fails_the_call_and_is_restarted() {
    let driver = start(script_manifest("", &[]), SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    let old_pid = driver.worker_pid().unwrap();

    let lease_id = lease.id.clone();
    let runtime = std::sync::Arc::new(runtime);
    let call_runtime = runtime.clone();
    let call = tokio::spawn(async move {
        call_runtime
            .execute(&lease_id, ExecuteRequest::new("hang", [""; 0]))
            .await
    });
    // let the request reach the worker
    tokio::time::sleep(Duration::from_millis(200)).await;
    let killed_at = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let err = bounded("the killed call", call).await.unwrap().unwrap_err();
    let failed_after = killed_at.elapsed();
    eprintln!("call failed {failed_after:?} after SIGKILL");
    match sandbox_error(&err) {
        SandboxError::WorkerExited { code, signal, .. } => {
            assert_eq!((*code, signal.as_deref()), (None, Some("SIGKILL")));
        }
        other => panic!("expected the worker-exit error, got {other:?}"),
    }
    assert_eq!(err.to_string(), "Worker process exited (code=null, signal=SIGKILL)");
    assert_eq!(sandbox_error(&err).code(), Some(-32000));
    // the call did not wait for its 30 s timeout
    assert!(failed_after < Duration::from_secs(5), "{failed_after:?}");

    // the next call, made during the restart backoff (1 s), fails at once saying so...
    let err = runtime
        .execute(&lease.id, ExecuteRequest::new("echo", [""; 0]))
        .await
        .unwrap_err();
    assert!(
        matches!(sandbox_error(&err), SandboxError::WorkerRestarting { .. }),
        "{err:?}"
    );
    // ...and once the worker is back it succeeds on a new worker
    restarted(&driver, old_pid).await;
    let result = bounded(
        "the next call",
        runtime.execute(&lease.id, ExecuteRequest::new("echo", [""; 0])),
    )
    .await
    .unwrap();
    assert_eq!(result.stdout, b"ran echo");
    let new_pid = driver.worker_pid().unwrap();
    assert_ne!(new_pid, old_pid);
    assert!(!alive(old_pid));
}

#[tokio::test]
async fn initialize_failures_are_reported_with_the_plugin_id() {
    let err = SandboxDriver::start(script_manifest("init-fail", &[]), SandboxOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Worker initialize failed for \"fault.plugin\": setup exploded"
    );
    assert!(matches!(
        SandboxError::of(&err),
        Some(SandboxError::InitializeFailed { .. })
    ));

    let err = SandboxDriver::start(script_manifest("init-exit", &[]), SandboxOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Worker initialize failed for \"fault.plugin\": Worker process exited (code=3, signal=null)\n\nWorker stderr:\nfatal: no config"
    );

    let options = SandboxOptions {
        initialize_timeout: Duration::from_millis(300),
        ..SandboxOptions::default()
    };
    let err = SandboxDriver::start(script_manifest("init-silent", &[]), options)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Worker initialize failed for \"fault.plugin\": RPC call \"initialize\" timed out after 300ms"
    );

    let mut manifest = script_manifest("", &[]);
    manifest.worker.command = vec!["/nonexistent/envrt-worker".into()];
    let err = SandboxDriver::start(manifest, SandboxOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Worker initialize failed for \"fault.plugin\": cannot start worker command \"/nonexistent/envrt-worker\": No such file or directory (os error 2)"
    );
}

#[tokio::test]
async fn a_call_without_an_answer_times_out_with_the_exact_text() {
    let options = SandboxOptions {
        rpc_timeout: Duration::from_millis(300),
        ..SandboxOptions::default()
    };
    let driver = start(script_manifest("", &[]), options).await;
    let pid = driver.worker_pid();
    let err: DriverError = bounded("hang", driver.call("test.hang", json!({}))).await.unwrap_err();
    assert_eq!(err.to_string(), "RPC call \"test.hang\" timed out after 300ms");
    assert_eq!(SandboxError::of(&err).and_then(SandboxError::code), Some(-32003));
    // the worker is still the same and still answers
    assert_eq!(driver.health().await.unwrap()["status"], "ok");
    assert_eq!(driver.worker_pid(), pid);
    // a worker error comes back with the worker's message and code
    let err = driver.call("noSuchMethod", json!({})).await.unwrap_err();
    assert_eq!(err.to_string(), "Unknown method: noSuchMethod");
    assert_eq!(SandboxError::of(&err).and_then(SandboxError::code), Some(-32601));
}

#[tokio::test]
async fn the_worker_environment_is_minimal() {
    let manifest = script_manifest("", &[("SUPPORTED", "health,environmentExecute")]);
    let driver = start(manifest, SandboxOptions::default()).await;
    let methods = driver.supported_methods();
    assert_eq!(
        methods.iter().map(String::as_str).collect::<Vec<_>>(),
        ["environmentExecute", "health"]
    );
    use envrt_runtime_core::EnvironmentDriver as _;
    assert!(driver.as_execute().is_some());
    assert!(driver.as_duplex().is_none() && driver.as_sync().is_none() && driver.as_resume().is_none());
    let pid = driver.worker_pid().unwrap();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let mut names: Vec<String> = environ
        .split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).split('=').next().unwrap().to_owned())
        .collect();
    names.sort();
    let mut expected = vec!["FAULT_MODE", "PATH", "SUPPORTED"];
    if std::env::var_os("TZ").is_some() {
        expected.push("TZ");
        expected.sort();
    }
    assert_eq!(names, expected);
}

#[tokio::test]
async fn a_worker_that_keeps_crashing_stays_down_after_the_limit() {
    let options = SandboxOptions {
        restart: envrt_driver_plugin_sandbox::RestartPolicy {
            base: Duration::from_millis(10),
            max_crashes: 3,
            ..Default::default()
        },
        ..SandboxOptions::default()
    };
    let driver = start(script_manifest("die-on-health", &[]), options).await;
    let mut crashed = None;
    for attempt in 1..=3 {
        // (calls during each restart backoff fail at once: wait for the restarted worker)
        if let Some(old_pid) = crashed {
            restarted(&driver, old_pid).await;
        }
        crashed = driver.worker_pid();
        let err = bounded("health", driver.health()).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "Worker process exited (code=1, signal=null)",
            "attempt {attempt}"
        );
    }
    let err = bounded("health", driver.health()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Worker for plugin \"fault.plugin\" is unavailable: it crashed 3 times in a row; not restarting"
    );
    assert_eq!(driver.worker_pid(), None);
}

#[tokio::test]
async fn binary_execute_is_used_when_advertised() {
    let manifest = script_manifest(
        "",
        &[(
            "SUPPORTED",
            "health,environmentAcquireLease,environmentReleaseLease,environmentExecuteBinary",
        )],
    );
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let sink_seen = seen.clone();
    let bytes: Vec<u8> = (0..=255u8).rev().collect();
    let request = ExecuteRequest {
        stdin: Some(bytes.clone()),
        sink: Some(std::sync::Arc::new(
            move |_: envrt_runtime_core::OutputStream, chunk: &[u8]| sink_seen.lock().unwrap().extend_from_slice(chunk),
        )),
        ..ExecuteRequest::new("cat", [""; 0])
    };
    let result = bounded("execute", runtime.execute(&lease.id, request)).await.unwrap();
    assert_eq!(result.stdout, bytes);
    assert_eq!(result.stderr, [0xff]);
    assert_eq!(*seen.lock().unwrap(), bytes);
    // the classifier counts the binary verb as the execute verb
    let caps = runtime.resolve_capabilities(&lease.id).await.unwrap().unwrap();
    assert!(caps.independent_control_commands);
    assert!(!caps.duplex_command_stream && !caps.native_sync_in);
}

#[tokio::test]
async fn shutdown_escalates_to_sigkill_for_a_worker_that_will_not_leave() {
    let options = SandboxOptions {
        kill_grace: Duration::from_millis(200),
        ..SandboxOptions::default()
    };
    let driver = start(script_manifest("stubborn", &[]), options).await;
    let pid = driver.worker_pid().unwrap();
    bounded("shutdown", driver.shutdown()).await;
    assert!(
        wait_gone(pid, Duration::from_secs(5)).await,
        "shutdown left the worker running"
    );
    let err = driver.health().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Worker for plugin \"fault.plugin\" is unavailable: the worker was shut down"
    );
}

#[tokio::test]
async fn a_worker_that_closes_stdout_is_killed_and_its_calls_fail() {
    let driver = start(script_manifest("close-stdout", &[]), SandboxOptions::default()).await;
    let pid = driver.worker_pid().unwrap();
    let err = bounded("health", driver.health()).await.unwrap_err();
    assert_eq!(err.to_string(), "Worker process exited (code=null, signal=SIGKILL)");
    assert!(!alive(pid));
}

#[tokio::test]
async fn an_unknown_driver_key_is_refused() {
    let options = SandboxOptions {
        driver_key: Some("nope".into()),
        ..SandboxOptions::default()
    };
    let err = SandboxDriver::start(script_manifest("", &[]), options)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid plugin manifest: no environmentDrivers entry has driverKey \"nope\""
    );
}

#[tokio::test]
async fn supported_methods_are_replaced_on_restart_and_gate_lifecycle_verbs() {
    use envrt_runtime_core::{EnvironmentDriver as _, LeaseStatus};
    let dir = TempDir::new("supported");
    let file = dir.join("supported");
    std::fs::write(
        &file,
        "health,environmentAcquireLease,environmentReleaseLease,duplexChannelOpen",
    )
    .unwrap();
    let manifest = script_manifest("", &[("SUPPORTED_FILE", file.to_str().unwrap())]);
    let driver = start(manifest, SandboxOptions::default()).await;
    assert!(driver.as_duplex().is_some());
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;

    // the restarted worker advertises less: the driver follows it live
    std::fs::write(&file, "health,environmentAcquireLease").unwrap();
    let old_pid = driver.worker_pid().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    bounded("restart", async {
        while driver.worker_pid().is_none_or(|pid| pid == old_pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(!driver.supported_methods().contains("duplexChannelOpen"));
    assert!(driver.as_duplex().is_none());
    let Err(err) = runtime.open_duplex_channel(&lease.id, &["cat".to_owned()]).await else {
        panic!("duplex must be refused once the worker stops advertising it")
    };
    assert_eq!(
        err.to_string(),
        "Environment driver \"sandbox\" does not support duplex channels."
    );
    // release is no longer advertised: it succeeds without being sent
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    let stats = driver.call("test.stats", json!({})).await.unwrap();
    assert_eq!(stats["calls"].get("environmentReleaseLease"), None, "{stats}");
    assert_eq!(stats["calls"]["initialize"], 1);
}

#[tokio::test]
async fn malformed_results_and_unadvertised_verbs_have_exact_errors() {
    use envrt_runtime_core::{
        AcquireRequest, EnvironmentDriver as _, LeaseContext, SyncFile, SyncOperation, Timestamp,
    };
    let driver = start(script_manifest("bad-acquire", &[]), SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let err = runtime
        .acquire_lease(AcquireRequest::new("env-1", "co-1"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Worker returned an invalid result for \"environmentAcquireLease\": providerLeaseId is missing"
    );

    // sync in advertised, sync out not: the verb is never sent
    let manifest = script_manifest(
        "",
        &[(
            "SUPPORTED",
            "health,environmentAcquireLease,environmentReleaseLease,environmentSyncIn",
        )],
    );
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    // the provider's attested expiry is kept
    assert_eq!(lease.expires_at, Some(Timestamp(1_893_553_445_678)));
    let context = LeaseContext {
        lease: lease.clone(),
        environment: runtime.environment("env-1").await.unwrap(),
    };
    let operations = [SyncOperation {
        operation_id: "o".into(),
        files: vec![SyncFile::file("/a", "/b")],
        post_upload_commands: vec![],
    }];
    let err = driver
        .as_sync()
        .unwrap()
        .sync_out(&context, &operations)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Worker for plugin \"fault.plugin\" does not advertise \"environmentSyncOut\"."
    );
    let stats = driver.call("test.stats", json!({})).await.unwrap();
    assert_eq!(stats["calls"].get("environmentSyncOut"), None);
    // the facade refuses first, from the capability snapshot
    let err = runtime.sync_out(&lease.id, &operations).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Environment driver \"sandbox\" does not support native file sync."
    );
}
