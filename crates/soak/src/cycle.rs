//! The lease cycles: acquire, execute, sync in and out, duplex where granted, then
//! release (three in four) or destroy, each timed, from concurrent tasks.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use envrt_runtime_core::{AcquireRequest, EnvironmentRuntime, ExecuteRequest, LeaseStatus, SyncFile, SyncOperation};

use crate::drivers::{ENVIRONMENT, Setup};
use crate::{Options, Shared, fail, time};

/// Runs `options.leases` cycles from `options.tasks` tasks.
pub(crate) async fn run(setup: &Setup, options: &Options, record: Shared) {
    let next = Arc::new(AtomicUsize::new(0));
    let files = match tempfile::tempdir() {
        Ok(dir) => Arc::new(dir),
        Err(e) => return fail(&record, format!("no scratch dir for sync: {e}")),
    };
    let mut tasks = Vec::new();
    for _ in 0..options.tasks {
        let runtime = setup.runtime.clone();
        let next = next.clone();
        let record = record.clone();
        let files = files.clone();
        let total = options.leases;
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= total {
                    return;
                }
                if n > 0 && n.is_multiple_of(100) {
                    eprintln!("soak: {n} of {total} cycles started");
                }
                if let Err(e) = one(&runtime, n, files.path(), &record).await {
                    fail(&record, format!("cycle {n}: {e}"));
                }
            }
        }));
    }
    for task in tasks {
        if let Err(e) = task.await {
            fail(&record, format!("a cycle task died: {e}"));
        }
    }
}

async fn one(runtime: &EnvironmentRuntime, n: usize, files: &std::path::Path, record: &Shared) -> Result<(), String> {
    let t = Instant::now();
    let lease = runtime
        .acquire_lease(AcquireRequest::new(ENVIRONMENT, "soak"))
        .await
        .map_err(|e| format!("acquire: {e}"))?;
    time(record, "acquire", t.elapsed());
    let used = use_lease(runtime, &lease.id, n, files, record).await;
    let t = Instant::now();
    let ended = if n % 4 == 3 {
        runtime.destroy_lease(&lease.id).await.map(|_| "destroy")
    } else {
        runtime
            .release_lease(&lease.id, LeaseStatus::Released)
            .await
            .map(|_| "release")
    };
    match ended {
        Ok(op) => time(record, op, t.elapsed()),
        Err(e) => {
            // Still leave nothing behind.
            let _ = runtime.destroy_lease(&lease.id).await;
            return Err(format!("ending lease {}: {e}", lease.id));
        }
    }
    used
}

async fn use_lease(
    runtime: &EnvironmentRuntime,
    lease: &str,
    n: usize,
    files: &std::path::Path,
    record: &Shared,
) -> Result<(), String> {
    let payload = format!("cycle {n}\n");
    let t = Instant::now();
    let mut request = ExecuteRequest::new("sh", ["-c", "cat; echo done"]);
    request.stdin = Some(payload.clone().into_bytes());
    let result = runtime
        .execute(lease, request)
        .await
        .map_err(|e| format!("execute: {e}"))?;
    time(record, "execute", t.elapsed());
    if result.exit_code != Some(0) || result.stdout != format!("{payload}done\n").as_bytes() {
        return Err(format!(
            "execute: exit {:?}, stdout {:?}, stderr {:?}",
            result.exit_code,
            String::from_utf8_lossy(&result.stdout),
            String::from_utf8_lossy(&result.stderr)
        ));
    }

    let source = files.join(format!("in-{n}.txt"));
    std::fs::write(&source, &payload).map_err(|e| e.to_string())?;
    let op = |file: SyncFile| SyncOperation {
        operation_id: format!("op-{n}"),
        files: vec![file],
        post_upload_commands: Vec::new(),
    };
    let t = Instant::now();
    runtime
        .sync_in(lease, &[op(SyncFile::file(source.display().to_string(), "in.txt"))])
        .await
        .map_err(|e| format!("sync in: {e}"))?;
    time(record, "sync_in", t.elapsed());
    let back = files.join(format!("out-{n}.txt"));
    let t = Instant::now();
    runtime
        .sync_out(lease, &[op(SyncFile::file("in.txt", back.display().to_string()))])
        .await
        .map_err(|e| format!("sync out: {e}"))?;
    time(record, "sync_out", t.elapsed());
    let got = std::fs::read_to_string(&back).map_err(|e| format!("sync out wrote nothing: {e}"))?;
    let _ = std::fs::remove_file(&source);
    let _ = std::fs::remove_file(&back);
    if got != payload {
        return Err(format!("sync round trip: {got:?} != {payload:?}"));
    }

    let granted = runtime
        .resolve_capabilities(lease)
        .await
        .map_err(|e| format!("capabilities: {e}"))?
        .is_some_and(|s| s.duplex_command_stream);
    if granted {
        let t = Instant::now();
        let channel = runtime
            .open_duplex_channel(lease, &["cat".to_owned()])
            .await
            .map_err(|e| format!("duplex open: {e}"))?;
        channel
            .write(payload.as_bytes())
            .await
            .map_err(|e| format!("duplex write: {e}"))?;
        channel
            .close_input()
            .await
            .map_err(|e| format!("duplex close input: {e}"))?;
        let mut seen = Vec::new();
        while let Some(chunk) = channel.read().await.map_err(|e| format!("duplex read: {e}"))? {
            seen.extend_from_slice(&chunk);
        }
        let exit = channel.wait().await.map_err(|e| format!("duplex wait: {e}"))?;
        let _ = channel.close().await;
        time(record, "duplex", t.elapsed());
        if seen != payload.as_bytes() || exit.exit_code != Some(0) {
            return Err(format!(
                "duplex: got {:?}, exit {exit:?}",
                String::from_utf8_lossy(&seen)
            ));
        }
    }
    Ok(())
}
