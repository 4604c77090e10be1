//! The host against the reference worker, hardened: an execute without a timeout is
//! bound by the worker's life (not the RPC timeout) and stops its command when the host
//! gives up; oversized requests are refused up front naming the limit; the worker's
//! refusals come back as the typed runtime-core errors.

mod host_common;

use std::sync::Arc;
use std::time::Duration;

use envrt_driver_plugin_sandbox::{PluginManifest, SandboxDriver, SandboxOptions};
use envrt_runtime_core::{DriverError, ExecuteRequest, RuntimeError, SyncFile, SyncOperation};
use host_common::*;

/// The reference worker with extra flags; `None` when the binary is not built.
fn manifest_with(root: &std::path::Path, flags: &[&str]) -> Option<PluginManifest> {
    let mut manifest = reference_manifest(root)?;
    manifest.worker.command.extend(flags.iter().map(|f| f.to_string()));
    Some(manifest)
}

async fn driver(root: &TempDir, flags: &[&str], options: SandboxOptions) -> Option<Arc<SandboxDriver>> {
    let Some(manifest) = manifest_with(root.path(), flags) else {
        eprintln!("SKIPPED: the envrt-sandbox-worker binary is not part of this build");
        return None;
    };
    Some(start(manifest, options).await)
}

#[tokio::test]
async fn an_execute_without_timeout_outlives_the_rpc_timeout() {
    let root = TempDir::new("no-timeout");
    let options = SandboxOptions {
        rpc_timeout: Duration::from_secs(2),
        ..SandboxOptions::default()
    };
    let Some(driver) = driver(&root, &[], options).await else {
        return;
    };
    let runtime = runtime_with(driver).await;
    let lease = acquire(&runtime).await;
    // 4 s: twice the RPC timeout
    let result = bounded(
        "execute",
        runtime.execute(&lease.id, ExecuteRequest::new("sh", ["-c", "sleep 4; echo done"])),
    )
    .await
    .unwrap();
    assert_eq!((result.exit_code, result.stdout.as_slice()), (Some(0), &b"done\n"[..]));
    assert!(!result.timed_out);
}

#[tokio::test]
async fn a_dropped_execute_stops_its_command() {
    let root = TempDir::new("cancel");
    let Some(driver) = driver(&root, &[], SandboxOptions::default()).await else {
        return;
    };
    let runtime = Arc::new(runtime_with(driver.clone()).await);
    let lease = acquire(&runtime).await;
    let arg = format!("600.{}", std::process::id());
    let call_runtime = runtime.clone();
    let (lease_id, call_arg) = (lease.id.clone(), arg.clone());
    let call = tokio::spawn(async move {
        call_runtime
            .execute(&lease_id, ExecuteRequest::new("sleep", [call_arg.as_str()]))
            .await
    });
    bounded("the command to start", async {
        while pids_with_argv(&["sleep", &arg]).is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let pids = pids_with_argv(&["sleep", &arg]);
    call.abort();
    for pid in pids {
        assert!(
            wait_gone(pid, Duration::from_secs(10)).await,
            "the command of a dropped execute still runs"
        );
    }
    // the worker is fine and serves the next call
    let result = bounded(
        "next execute",
        runtime.execute(&lease.id, ExecuteRequest::new("true", [""; 0])),
    )
    .await
    .unwrap();
    assert_eq!(result.exit_code, Some(0));
}

#[tokio::test]
async fn stdin_past_the_request_limit_is_refused_up_front_naming_it() {
    const LIMIT: usize = 1024 * 1024;
    let root = TempDir::new("big-stdin");
    let options = SandboxOptions {
        max_request_bytes: LIMIT,
        ..SandboxOptions::default()
    };
    let Some(driver) = driver(&root, &["--max-line-bytes", &LIMIT.to_string()], options).await else {
        return;
    };
    let runtime = runtime_with(driver).await;
    let lease = acquire(&runtime).await;
    // Below the limit (base64 grows it by a third): every byte arrives.
    let below: Vec<u8> = (0..600 * 1024).map(|i| (i % 251) as u8).collect();
    let request = ExecuteRequest {
        stdin: Some(below.clone()),
        ..ExecuteRequest::new("cat", [""; 0])
    };
    let result = bounded("execute below", runtime.execute(&lease.id, request))
        .await
        .unwrap();
    assert_eq!(result.stdout, below);
    // Above: refused before anything is sent, at once, naming the limit.
    let request = ExecuteRequest {
        stdin: Some(vec![b'x'; 800 * 1024]),
        ..ExecuteRequest::new("cat", [""; 0])
    };
    let err = bounded("execute above", runtime.execute(&lease.id, request))
        .await
        .unwrap_err();
    let RuntimeError::Driver(DriverError::InvalidInput { message }) = &err else {
        panic!("expected Invalid input, got {err:?}");
    };
    let size: usize = message
        .strip_prefix("the \"environmentExecuteBinary\" request is ")
        .and_then(|rest| rest.split_once(' '))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("{message}"));
    assert!(size > LIMIT, "{message}");
    assert_eq!(
        err.to_string(),
        format!(
            "Invalid input: the \"environmentExecuteBinary\" request is {size} bytes once encoded, over the limit of 1048576 bytes per request (stdin, arguments and environment count towards it)"
        )
    );
    // and the worker still serves
    let result = bounded(
        "execute after",
        runtime.execute(&lease.id, ExecuteRequest::new("true", [""; 0])),
    )
    .await
    .unwrap();
    assert_eq!(result.exit_code, Some(0));
}

#[tokio::test]
async fn worker_refusals_keep_their_type() {
    let root = TempDir::new("typed");
    let Some(driver) = driver(&root, &[], SandboxOptions::default()).await else {
        return;
    };
    let runtime = runtime_with(driver).await;
    let lease = acquire(&runtime).await;
    let host = TempDir::new("typed-host");
    std::fs::write(host.join("f.txt"), "x").unwrap();
    let op = |source: String, target: &str| SyncOperation {
        operation_id: "op".into(),
        files: vec![SyncFile::file(source, target)],
        post_upload_commands: Vec::new(),
    };
    // Any path of the sandbox is a sync target now (envrtFilesAnywhere); `..` is not.
    let err = runtime
        .sync_in(&lease.id, &[op(host.join("f.txt").display().to_string(), "../x")])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Driver(DriverError::PathOutsideWorkspace { path }) if path == "../x"),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "Path \"../x\" is outside the lease workspace.");
    let err = runtime
        .sync_out(
            &lease.id,
            &[op("/workspace/missing".into(), &host.join("out").display().to_string())],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Driver(DriverError::SourceMissing { path }) if path == "/workspace/missing"),
        "{err:?}"
    );
    let err = runtime
        .execute(&lease.id, ExecuteRequest::new("echo", ["a\0b"]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Driver(DriverError::InvalidInput { message })
            if message == "the command and its arguments must not contain NUL bytes"),
        "{err:?}"
    );
    // Any directory of the sandbox is a cwd now (tests/reference_user_cwd_and_tmp.rs); `..` is not.
    let mut request = ExecuteRequest::new("true", [""; 0]);
    request.cwd = Some("../etc".into());
    let err = runtime.execute(&lease.id, request).await.unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Driver(DriverError::PathOutsideWorkspace { path }) if path == "../etc"),
        "{err:?}"
    );
}

/// The CLI's default stdin limit is `MAX_STDIN_BYTES`: a stdin of exactly that size, with a
/// command and environment, must fit the default request limit and reach the command, even
/// on a worker without the data plane (stdin in the request, as for an SDK worker).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_stdin_front_ends_allow_fits_the_default_request_limit() {
    let root = TempDir::new("max-stdin");
    let options = SandboxOptions {
        data_plane: false,
        ..SandboxOptions::default()
    };
    let Some(driver) = driver(&root, &[], options).await else {
        return;
    };
    let runtime = runtime_with(driver).await;
    let lease = acquire(&runtime).await;
    let mut request = ExecuteRequest {
        stdin: Some(vec![b'z'; envrt_driver_plugin_sandbox::MAX_STDIN_BYTES]),
        ..ExecuteRequest::new("wc", ["-c"])
    };
    request.env.insert("SOME_VARIABLE".into(), "some value".into());
    let result = bounded("execute at the stdin limit", runtime.execute(&lease.id, request))
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&result.stdout).trim(),
        envrt_driver_plugin_sandbox::MAX_STDIN_BYTES.to_string()
    );
}

/// Inspect's `test_exec_input_large`: with the data plane, stdin streams in frames under the
/// worker's credit, so stdin past the request limit (here 80 MiB, 107 MiB as base64) reaches
/// the command whole and in order; small stdin still rides in the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_past_the_request_limit_streams_over_the_data_plane() {
    let root = TempDir::new("stream-stdin");
    let Some(driver) = driver(&root, &[], SandboxOptions::default()).await else {
        return;
    };
    let runtime = runtime_with(driver).await;
    let lease = acquire(&runtime).await;
    let mut stdin = Vec::with_capacity(81 * 1024 * 1024);
    let mut lines = 0u64;
    while stdin.len() < 80 * 1024 * 1024 {
        stdin.extend_from_slice(format!("line {lines} of the stream\n").as_bytes());
        lines += 1;
    }
    let bytes = stdin.len();
    let count = "{ bytes += length($0) + 1 } $2 != NR - 1 { bad++ } END { print NR, bad + 0, bytes }";
    for (stdin, lines, bytes) in [(stdin, lines, bytes), (b"line 0 small\n".to_vec(), 1, 13)] {
        let request = ExecuteRequest {
            stdin: Some(stdin),
            ..ExecuteRequest::new("awk", [count])
        };
        let result = bounded("execute with a large stdin", runtime.execute(&lease.id, request))
            .await
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&result.stdout),
            format!("{lines} 0 {bytes}\n"),
            "{}",
            String::from_utf8_lossy(&result.stderr)
        );
    }
    // A command that reads none of it ends the call; the worker serves the next one.
    let request = ExecuteRequest {
        stdin: Some(vec![b'x'; 8 * 1024 * 1024]),
        ..ExecuteRequest::new("true", [""; 0])
    };
    let result = bounded("execute ignoring its stdin", runtime.execute(&lease.id, request))
        .await
        .unwrap();
    assert_eq!(result.exit_code, Some(0));
    let result = bounded(
        "execute after",
        runtime.execute(&lease.id, ExecuteRequest::new("echo", ["still here"])),
    )
    .await
    .unwrap();
    assert_eq!(result.stdout, b"still here\n");
}
