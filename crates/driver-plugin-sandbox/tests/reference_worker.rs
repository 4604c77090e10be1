//! The host against the crate's own reference worker (`envrt-sandbox-worker`, a binary of
//! this crate). Both extensions are advertised there, so this is where binary execute and
//! half-close run end to end. While the binary is not part of the build (the host and
//! the worker were written on separate branches) the tests say so and return.

mod host_common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use envrt_driver_plugin_sandbox::SandboxOptions;
use envrt_runtime_core::{
    DuplexExit, ExecuteRequest, LeaseStatus, OutputStream, SpawnRequest, SyncFile, SyncOperation, WorkspaceRequest,
};
use host_common::*;

#[tokio::test]
async fn binary_execute_and_half_close_run_end_to_end() {
    let root = TempDir::new("ref");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    let driver = start(manifest, SandboxOptions::default()).await;
    let methods = driver.supported_methods();
    for verb in [
        "environmentExecuteBinary",
        "duplexChannelCloseInput",
        "duplexChannelOpen",
        "environmentSyncIn",
    ] {
        assert!(methods.contains(verb), "{verb} not in {methods:?}");
    }
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    let caps = runtime.resolve_capabilities(&lease.id).await.unwrap().unwrap();
    assert!(caps.duplex_command_stream && caps.native_sync_in && caps.native_sync_out);
    // The worker starts a supervisor per lease (`envrtStartProcessSupervisor`, advertised
    // as it finds `envrt-agent` beside itself), so the lease grants process sessions and a
    // spawn runs (tests/reference_processes.rs has the rest).
    assert!(methods.contains("envrtStartProcessSupervisor"), "{methods:?}");
    assert!(caps.persistent_process_sessions);
    let spawned = runtime.spawn(&lease.id, SpawnRequest::new(["true"])).await.unwrap();
    let status = runtime.wait_process(&spawned.id.to_string(), None).await.unwrap();
    assert_eq!(status, envrt_runtime_core::ProcessStatus::Exited { code: 0 });

    // arbitrary bytes survive execute both ways, and stream to the sink
    let bytes: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    let seen: Arc<Mutex<Vec<u8>>> = Arc::default();
    let sink_seen = seen.clone();
    let request = ExecuteRequest {
        stdin: Some(bytes.clone()),
        timeout: Some(Duration::from_secs(20)),
        sink: Some(Arc::new(move |stream: OutputStream, chunk: &[u8]| {
            if stream == OutputStream::Stdout {
                sink_seen.lock().unwrap().extend_from_slice(chunk)
            }
        })),
        ..ExecuteRequest::new("cat", [""; 0])
    };
    let result = bounded("execute", runtime.execute(&lease.id, request)).await.unwrap();
    assert_eq!(
        result.exit_code,
        Some(0),
        "{:?}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert_eq!(result.stdout, bytes);
    assert_eq!(*seen.lock().unwrap(), bytes);

    // duplex: bytes in order, half-close gives EOF, the exit code comes back
    let channel = runtime
        .open_duplex_channel(&lease.id, &["cat".to_owned()])
        .await
        .unwrap();
    channel.write(&bytes).await.unwrap();
    channel.close_input().await.unwrap();
    let mut echoed = Vec::new();
    while let Some(chunk) = bounded("read", channel.read()).await.unwrap() {
        echoed.extend(chunk);
    }
    assert_eq!(echoed, bytes);
    assert_eq!(
        bounded("wait", channel.wait()).await.unwrap(),
        DuplexExit {
            exit_code: Some(0),
            transport_closed: false
        }
    );
    channel.close().await.unwrap();

    // sync in and out through the workspace
    let host_src = TempDir::new("ref-src");
    let host_dst = TempDir::new("ref-dst");
    std::fs::write(host_src.join("a.bin"), &bytes).unwrap();
    let ws = runtime
        .realize_workspace(&lease.id, &WorkspaceRequest::default())
        .await
        .unwrap();
    let target = format!("{}/a.bin", ws.cwd);
    runtime
        .sync_in(
            &lease.id,
            &[SyncOperation {
                operation_id: "in".into(),
                files: vec![SyncFile::file(host_src.join("a.bin").to_str().unwrap(), target.clone())],
                post_upload_commands: vec![],
            }],
        )
        .await
        .unwrap();
    runtime
        .sync_out(
            &lease.id,
            &[SyncOperation {
                operation_id: "out".into(),
                files: vec![SyncFile::file(target, host_dst.join("b.bin").to_str().unwrap())],
                post_upload_commands: vec![],
            }],
        )
        .await
        .unwrap();
    assert_eq!(std::fs::read(host_dst.join("b.bin")).unwrap(), bytes);
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    let pid = driver.worker_pid().unwrap();
    bounded("shutdown", driver.shutdown()).await;
    assert!(wait_gone(pid, Duration::from_secs(10)).await);
}

#[tokio::test]
async fn a_worker_killed_during_execute_fails_the_call_and_the_next_one_runs() {
    let root = TempDir::new("ref-kill");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = Arc::new(runtime_with(driver.clone()).await);
    let lease = acquire(&runtime).await;
    let old_pid = driver.worker_pid().unwrap();
    let call_runtime = runtime.clone();
    let lease_id = lease.id.clone();
    let call = tokio::spawn(async move {
        call_runtime
            .execute(&lease_id, ExecuteRequest::new("sleep", ["30"]))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let err = bounded("killed call", call).await.unwrap().unwrap_err();
    assert!(
        err.to_string()
            .starts_with("Worker process exited (code=null, signal=SIGKILL)"),
        "{err}"
    );
    // the lease's sandbox is per lease directory: a restarted worker serves it again
    restarted(&driver, old_pid).await;
    let result = bounded(
        "next call",
        runtime.execute(&lease.id, ExecuteRequest::new("echo", ["again"])),
    )
    .await
    .unwrap();
    assert_eq!(result.stdout, b"again\n");
    assert_ne!(driver.worker_pid(), Some(old_pid));
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}
