//! Interop: the host against a real worker written with `@paperclipai/plugin-sdk`
//! (tests/fixtures/sdk-worker, installed by scripts/install-sdk-fixture.sh).

mod host_common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use envrt_driver_plugin_sandbox::SandboxOptions;
use envrt_runtime_core::{
    DuplexExit, EnvironmentDriver as _, ExecuteRequest, LeaseStatus, OutputStream, SyncFile, SyncOperation,
    WorkspaceRequest,
};
use host_common::*;

type Chunks = Vec<(OutputStream, Vec<u8>)>;

const FIXTURE_METHODS: [&str; 16] = [
    "health",
    "shutdown",
    "environmentValidateConfig",
    "environmentProbe",
    "environmentAcquireLease",
    "environmentResumeLease",
    "environmentReleaseLease",
    "environmentDestroyLease",
    "environmentRealizeWorkspace",
    "environmentExecute",
    "environmentSyncIn",
    "environmentSyncOut",
    "duplexChannelOpen",
    "duplexChannelWrite",
    "duplexChannelStop",
    "duplexChannelClose",
];

#[tokio::test]
async fn handshake_gating_and_capabilities() {
    let root = TempDir::new("sdk-hs");
    let driver = start(sdk_manifest(root.path()), SandboxOptions::default()).await;
    assert_eq!(driver.key(), "fixture");
    let methods = driver.supported_methods();
    let supported: Vec<&str> = methods.iter().map(String::as_str).collect();
    let mut expected = FIXTURE_METHODS.to_vec();
    expected.sort();
    assert_eq!(supported, expected);
    assert!(driver.as_execute().is_some() && driver.as_sync().is_some() && driver.as_duplex().is_some());
    assert!(driver.as_resume().is_some() && driver.as_destroy().is_some() && driver.as_realize().is_some());
    let health = bounded("health", driver.health()).await.unwrap();
    assert_eq!(health["status"], "ok");

    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    assert!(lease.provider_lease_id.as_deref().unwrap().starts_with("fxl-"));
    assert_eq!(lease.provider.as_deref(), Some("fixture"));
    let caps = runtime.resolve_capabilities(&lease.id).await.unwrap().unwrap();
    // manifest declares reusableLeases, but the ephemeral policy narrows it off
    assert!(!caps.reusable_leases);
    assert!(caps.native_sync_in && caps.native_sync_out);
    assert!(caps.incremental_session_output && caps.duplex_command_stream && caps.independent_control_commands);
    // declared false, or no verb
    assert!(!caps.persistent_process_sessions && !caps.concurrent_sync_operations && !caps.runner_web_socket_ingress);

    // the SDK never advertises our extensions: plain text execute, no half-close
    assert!(!driver.supported_methods().contains("environmentExecuteBinary"));
    let err = runtime
        .execute(
            &lease.id,
            ExecuteRequest {
                stdin: Some(vec![0xff, 0xfe]),
                ..ExecuteRequest::new("cat", [""; 0])
            },
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid input: stdin is not valid UTF-8 and the worker does not advertise \"environmentExecuteBinary\""
    );
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    let pid = driver.worker_pid().unwrap();
    bounded("shutdown", driver.shutdown()).await;
    assert!(
        wait_gone(pid, Duration::from_secs(10)).await,
        "worker {pid} survived shutdown"
    );
    let err = driver.health().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Worker for plugin \"envrt.fixture\" is unavailable: the worker was shut down"
    );
}

#[tokio::test]
async fn execute_streams_execute_log_chunks_to_the_sink() {
    let root = TempDir::new("sdk-exec");
    let driver = start(sdk_manifest(root.path()), SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    let seen: Arc<Mutex<Chunks>> = Arc::default();
    let sink_seen = seen.clone();
    let request = ExecuteRequest {
        stdin: Some(b"from-stdin\n".to_vec()),
        timeout: Some(Duration::from_secs(20)),
        sink: Some(Arc::new(move |stream: OutputStream, chunk: &[u8]| {
            sink_seen.lock().unwrap().push((stream, chunk.to_vec()))
        })),
        ..ExecuteRequest::new(
            "/bin/sh",
            [
                "-c",
                "echo out1; echo err1 1>&2; sleep 0.1; printf 'out2 \\303\\251'; cat",
            ],
        )
    };
    let result = bounded("execute", runtime.execute(&lease.id, request)).await.unwrap();
    assert_eq!(result.exit_code, Some(0));
    assert!(!result.timed_out);
    assert_eq!(
        String::from_utf8(result.stdout.clone()).unwrap(),
        "out1\nout2 éfrom-stdin\n"
    );
    assert_eq!(result.stderr, b"err1\n");
    let seen = seen.lock().unwrap().clone();
    let joined = |s: OutputStream| -> Vec<u8> {
        seen.iter()
            .filter(|(k, _)| *k == s)
            .flat_map(|(_, c)| c.clone())
            .collect()
    };
    assert_eq!(joined(OutputStream::Stdout), result.stdout);
    assert_eq!(joined(OutputStream::Stderr), result.stderr);
    // How the bytes of one stream are cut into chunks is up to the pipe and the load (a
    // busy machine delivers `out1` and `out2` as one); that they arrive while the command
    // runs is shown below, by a command that waits for the sink.
    assert!(
        seen.iter().all(|(_, chunk)| !chunk.is_empty()),
        "no empty chunk reaches the sink: {seen:?}"
    );

    // proof that chunks arrive while the command runs: it finishes only after the sink
    // has seen its first line and created the marker it waits for
    let marker_dir = TempDir::new("sdk-marker");
    let marker = marker_dir.join("seen");
    let sink_marker = marker.clone();
    let request = ExecuteRequest {
        timeout: Some(Duration::from_secs(20)),
        sink: Some(Arc::new(move |_: OutputStream, chunk: &[u8]| {
            if chunk.starts_with(b"ready") {
                std::fs::write(&sink_marker, b"").unwrap();
            }
        })),
        ..ExecuteRequest::new(
            "/bin/sh",
            [
                "-c".to_owned(),
                format!(
                    "echo ready; while [ ! -e '{}' ]; do sleep 0.02; done; echo done",
                    marker.display()
                ),
            ],
        )
    };
    let result = bounded("streaming execute", runtime.execute(&lease.id, request))
        .await
        .unwrap();
    assert!(
        !result.timed_out,
        "the sink never saw the first line while the command ran"
    );
    assert_eq!(result.stdout, b"ready\ndone\n");

    // the cap applies host-side too
    let capped = runtime
        .execute(
            &lease.id,
            ExecuteRequest {
                max_output_bytes: Some(4),
                ..ExecuteRequest::new("echo", ["hello"])
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (capped.stdout.as_slice(), capped.stdout_truncated),
        (&b"hell"[..], true)
    );

    // a missing program and a timeout come back as results
    let missing = runtime
        .execute(&lease.id, ExecuteRequest::new("definitely-not-a-program-xyz", [""; 0]))
        .await
        .unwrap();
    assert_eq!(missing.exit_code, Some(127));
    let slow = runtime
        .execute(
            &lease.id,
            ExecuteRequest {
                timeout: Some(Duration::from_millis(300)),
                ..ExecuteRequest::new("/bin/sh", ["-c", "echo start; sleep 30"])
            },
        )
        .await
        .unwrap();
    assert!(slow.timed_out);
    assert_eq!(slow.exit_code, None);
    assert_eq!(slow.stdout, b"start\n");
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

#[tokio::test]
async fn sync_in_and_out_and_lease_lifecycle() {
    let root = TempDir::new("sdk-sync");
    let host_src = TempDir::new("sdk-src");
    let host_dst = TempDir::new("sdk-dst");
    std::fs::create_dir_all(host_src.join("proj/sub")).unwrap();
    std::fs::write(host_src.join("proj/a.txt"), b"alpha").unwrap();
    std::fs::write(host_src.join("proj/sub/b.txt"), b"beta!").unwrap();
    std::fs::write(host_src.join("proj/skip.log"), b"nope").unwrap();

    let driver = start(sdk_manifest(root.path()), SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    let ws = runtime
        .realize_workspace(&lease.id, &WorkspaceRequest::default())
        .await
        .unwrap();
    assert!(ws.cwd.starts_with(root.path().to_str().unwrap()));

    let mut upload = SyncFile::directory(host_src.join("proj").to_str().unwrap(), format!("{}/proj", ws.cwd));
    upload.exclude = vec!["*.log".into()];
    let result = runtime
        .sync_in(
            &lease.id,
            &[SyncOperation {
                operation_id: "in-1".into(),
                files: vec![upload],
                post_upload_commands: vec![],
            }],
        )
        .await
        .unwrap();
    assert_eq!(result.operations[0].operation_id, "in-1");
    assert_eq!(
        (
            result.operations[0].files_transferred,
            result.operations[0].bytes_transferred
        ),
        (2, 10)
    );
    let listed = runtime
        .execute(
            &lease.id,
            ExecuteRequest::new("cat", [format!("{}/proj/sub/b.txt", ws.cwd)]),
        )
        .await
        .unwrap();
    assert_eq!(listed.stdout, b"beta!");

    let back = SyncFile::directory(format!("{}/proj", ws.cwd), host_dst.join("back").to_str().unwrap());
    let result = runtime
        .sync_out(
            &lease.id,
            &[SyncOperation {
                operation_id: "out-1".into(),
                files: vec![back],
                post_upload_commands: vec![],
            }],
        )
        .await
        .unwrap();
    assert_eq!(result.operations[0].files_transferred, 2);
    assert_eq!(std::fs::read(host_dst.join("back/a.txt")).unwrap(), b"alpha");
    assert_eq!(std::fs::read(host_dst.join("back/sub/b.txt")).unwrap(), b"beta!");
    assert!(!host_dst.join("back/skip.log").exists());

    // a post-upload cwd outside the targets is refused before anything is sent
    let err = runtime
        .sync_in(
            &lease.id,
            &[SyncOperation {
                operation_id: "in-2".into(),
                files: vec![SyncFile::file(
                    host_src.join("proj/a.txt").to_str().unwrap(),
                    format!("{}/x.txt", ws.cwd),
                )],
                post_upload_commands: vec![envrt_runtime_core::sync::PostUploadCommand {
                    command: "true".into(),
                    cwd: Some("/etc".into()),
                    timeout_ms: None,
                }],
            }],
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Post-upload command cwd \"/etc\" must be an absolute path under one of the operation's targets."
    );
    assert!(!std::path::Path::new(&format!("{}/x.txt", ws.cwd)).exists());

    // an ephemeral release (the host releases, then destroys) removes the provider's lease
    // dir; another destroy after it is idempotent
    let lease_dir = lease.metadata["fixtureRoot"].as_str().unwrap().to_owned();
    assert!(std::path::Path::new(&lease_dir).exists());
    let released = runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(released.status, LeaseStatus::Released);
    assert!(!std::path::Path::new(&lease_dir).exists());
    // the SDK worker's receipts: "stopped" by the release, then "destroyed" (the last wins)
    assert_eq!(
        released.metadata[envrt_runtime_core::TERMINATION_RECEIPT_KEY],
        serde_json::json!({"providerLeaseId": lease.provider_lease_id.clone().unwrap(), "state": "destroyed"})
    );
    let context = envrt_runtime_core::LeaseContext {
        lease: released,
        environment: runtime.environment("env-1").await.unwrap(),
    };
    driver.as_destroy().unwrap().destroy_lease(&context).await.unwrap();
    // resume of a gone lease (providerLeaseId null) is "gone", not an error
    assert_eq!(driver.as_resume().unwrap().resume_lease(&context).await.unwrap(), None);
}

#[tokio::test]
async fn duplex_round_trip_exit_and_refusals() {
    let root = TempDir::new("sdk-duplex");
    let driver = start(sdk_manifest(root.path()), SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;

    let channel = runtime
        .open_duplex_channel(&lease.id, &["cat".to_owned()])
        .await
        .unwrap();
    let payload: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    channel.write(&payload).await.unwrap();
    let mut echoed = Vec::new();
    while echoed.len() < payload.len() {
        let chunk = bounded("read", channel.read()).await.unwrap().expect("cat output");
        echoed.extend(chunk);
    }
    assert_eq!(echoed, payload);
    let err = channel.close_input().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Duplex channel half-close is not supported: the worker does not advertise \"duplexChannelCloseInput\"."
    );
    channel.stop().await.unwrap();
    let exit = bounded("wait", channel.wait()).await.unwrap();
    assert_eq!(
        exit,
        DuplexExit {
            exit_code: None,
            transport_closed: false
        }
    );
    channel.close().await.unwrap();
    channel.close().await.unwrap();
    assert!(matches!(channel.write(b"x").await, Err(e) if e.to_string().contains("the channel is closed")));

    // a command that exits by itself: output first, then the exit code; slot held until close
    let slots_before = driver_slots_in_use();
    let channel = runtime
        .open_duplex_channel(&lease.id, &["/bin/sh".into(), "-c".into(), "printf hi; exit 3".into()])
        .await
        .unwrap();
    let exit = bounded("wait", channel.wait()).await.unwrap();
    assert_eq!(exit.exit_code, Some(3));
    assert_eq!(bounded("read", channel.read()).await.unwrap().unwrap(), b"hi");
    assert_eq!(bounded("read", channel.read()).await.unwrap(), None);
    assert_eq!(driver_slots_in_use(), slots_before + 1);
    channel.close().await.unwrap();
    assert_eq!(driver_slots_in_use(), slots_before);
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

fn driver_slots_in_use() -> usize {
    envrt_driver_plugin_sandbox::RouteSlots::global().in_use()
}

#[tokio::test]
async fn a_missing_duplex_declaration_refuses_before_the_worker() {
    let root = TempDir::new("sdk-nodecl");
    let mut manifest = sdk_manifest(root.path());
    manifest.environment_drivers[0]
        .sandbox_capabilities
        .as_mut()
        .unwrap()
        .duplex_command_stream = None;
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    let Err(err) = runtime.open_duplex_channel(&lease.id, &["cat".to_owned()]).await else {
        panic!("duplex must be refused")
    };
    assert_eq!(
        err.to_string(),
        "Sandbox lease does not grant the duplex command stream capability."
    );
    let health = driver.health().await.unwrap();
    assert_eq!(health["details"]["openChannels"], 0);
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

#[tokio::test]
async fn environment_probe_answers_refuses_and_times_out_with_exact_texts() {
    let root = TempDir::new("sdk-probe");
    let driver = start(sdk_manifest(root.path()), SandboxOptions::default()).await;
    let environment = |probe: Option<&str>| {
        let mut environment = envrt_runtime_core::Environment::new("fx", "fx", "fixture");
        if let Some(probe) = probe {
            environment.config.insert("probe".into(), probe.into());
        }
        environment
    };
    let answer = driver
        .probe_environment(&environment(None), Duration::from_secs(10))
        .await
        .expect("the fixture advertises environmentProbe")
        .unwrap();
    assert!(answer.ok);
    assert!(
        answer.summary.starts_with("fixture sandbox provider ready (root /"),
        "{}",
        answer.summary
    );
    assert_eq!(
        driver
            .probe(&environment(Some("refuse")), Duration::from_secs(10))
            .await
            .unwrap_err(),
        "the worker refused environmentProbe: fixture probe refused on request"
    );
    let started = std::time::Instant::now();
    assert_eq!(
        driver
            .probe(&environment(Some("hang")), Duration::from_millis(300))
            .await
            .unwrap_err(),
        "environmentProbe got no answer within 300 ms"
    );
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    // The worker still answers afterwards.
    assert!(driver.probe(&environment(None), Duration::from_secs(10)).await.is_ok());

    if let Some(manifest) = reference_manifest(root.path()) {
        let reference = start(manifest, SandboxOptions::default()).await;
        let answer = reference
            .probe(
                &envrt_runtime_core::Environment::new("box", "box", "sandbox"),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        assert!(answer.ok);
        assert!(
            answer.summary.starts_with("bubblewrap sandbox ready ("),
            "{}",
            answer.summary
        );
        reference.shutdown().await;
    }
    driver.shutdown().await;
}
