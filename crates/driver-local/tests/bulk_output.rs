//! Output streams that carry bulk output are read by a thread of their own (the first
//! read that fills the task's buffer hands the stream over): the sink still sees every
//! byte in order and while the command runs, its panic still panics the call, timeouts
//! and escaped writers still end the call, and no sink call comes after the call is over.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Harness, bounded, marker, survivors, unique_sleep};
use envrt_driver_local::LocalConfig;
use envrt_runtime_core::{ExecuteRequest, LeaseStatus, OutputStream};

/// More than the task's first read (64 KiB), so that the stream goes to a thread.
const BULK: usize = 1_000_000;

#[tokio::test]
async fn after_bulk_output_a_line_still_reaches_the_sink_while_the_command_runs() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let flag = h.workspace(&lease).join("sink-saw-first");
    let sink_flag = flag.clone();
    let streamed: Arc<Mutex<Vec<u8>>> = Arc::default();
    let sink_streamed = streamed.clone();
    // The command can only succeed if the sink saw "first" (after a megabyte of zeros)
    // while the command was still running.
    let script = format!(
        "head -c {BULK} /dev/zero; echo first; i=0; while [ ! -e sink-saw-first ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; \
         [ -e sink-saw-first ] && echo second"
    );
    let mut request = ExecuteRequest::new("sh", ["-c", script.as_str()]);
    request.max_output_bytes = Some(2 * BULK);
    request.sink = Some(Arc::new(move |stream: OutputStream, chunk: &[u8]| {
        assert_eq!(stream, OutputStream::Stdout);
        let mut seen = sink_streamed.lock().unwrap();
        seen.extend_from_slice(chunk);
        if seen.ends_with(b"first\n") {
            let _ = std::fs::write(&sink_flag, b"");
        }
    }));
    let out = h.execute(&lease, request).await;
    assert_eq!(out.exit_code, Some(0));
    let mut expected = vec![0u8; BULK];
    expected.extend_from_slice(b"first\nsecond\n");
    assert!(
        out.stdout == expected,
        "captured output differs ({} bytes)",
        out.stdout.len()
    );
    assert!(!out.stdout_truncated);
    assert!(*streamed.lock().unwrap() == expected, "the sink saw other bytes");
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn bulk_output_on_both_streams_is_captured_and_capped_apart() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let seen: Arc<Mutex<(usize, usize)>> = Arc::default();
    let sink_seen = seen.clone();
    let script = format!("head -c {BULK} /dev/zero & head -c {} /dev/zero >&2; wait", BULK + 1);
    let mut request = ExecuteRequest::new("sh", ["-c", script.as_str()]);
    request.max_output_bytes = Some(BULK);
    request.sink = Some(Arc::new(move |stream: OutputStream, chunk: &[u8]| {
        let mut s = sink_seen.lock().unwrap();
        match stream {
            OutputStream::Stdout => s.0 += chunk.len(),
            OutputStream::Stderr => s.1 += chunk.len(),
        }
    }));
    let out = h.execute(&lease, request).await;
    assert_eq!(out.exit_code, Some(0));
    assert_eq!((out.stdout.len(), out.stdout_truncated), (BULK, false));
    assert_eq!((out.stderr.len(), out.stderr_truncated), (BULK, true));
    assert_eq!(*seen.lock().unwrap(), (BULK, BULK + 1));
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_sink_panicking_on_bulk_output_panics_the_call_and_kills_the_group() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let nap = unique_sleep();
    // The panic comes on the reader thread (past the first 64 KiB); the command would
    // sleep on after its output, so only the panic can end the call early.
    let script = format!("head -c {BULK} /dev/zero; sleep {nap}");
    let total = Arc::new(AtomicUsize::new(0));
    let mut request = ExecuteRequest::new("sh", ["-c", script.as_str()]);
    request.sink = Some(Arc::new(move |_: OutputStream, chunk: &[u8]| {
        if total.fetch_add(chunk.len(), Ordering::Relaxed) + chunk.len() > 200_000 {
            panic!("bulk-sink-panic-marker");
        }
    }));
    let call = std::panic::AssertUnwindSafe(h.runtime.execute(&lease.id, request));
    let panic = bounded(futures::FutureExt::catch_unwind(call)).await.unwrap_err();
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"bulk-sink-panic-marker"));
    assert!(survivors(&nap).await.is_empty());
    assert_eq!(h.driver.running_commands(&lease.id), 0);
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_timeout_ends_an_endless_bulk_writer_and_keeps_its_output_up_to_the_cap() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let mut request = ExecuteRequest::new("yes", ["envrt-bulk"]);
    request.timeout = Some(Duration::from_millis(500));
    request.max_output_bytes = Some(BULK);
    let out = h.execute(&lease, request).await;
    assert!(out.timed_out);
    assert_eq!(out.exit_code, None);
    assert_eq!((out.stdout.len(), out.stdout_truncated), (BULK, true));
    assert!(out.stdout.starts_with(b"envrt-bulk\nenvrt-bulk\n"));
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

/// Without cgroups a `setsid` writer escapes the group and keeps the pipe open and busy:
/// the drain gives up after its bound, the reader thread stops, and no sink call comes
/// after the call returned.
#[tokio::test]
async fn an_escaped_bulk_writer_cannot_hold_the_call_nor_reach_the_sink_after_it() {
    let h = Harness::with_config(LocalConfig {
        cgroups: false,
        ..Default::default()
    })
    .await;
    let lease = h.lease().await;
    let tag = marker("bulk-yes");
    let calls = Arc::new(AtomicUsize::new(0));
    let sink_calls = calls.clone();
    // The escapee writes forever (`yes`, renamed by exec -a so it can be found).
    let script = format!("head -c {BULK} /dev/zero; setsid bash -c 'exec -a {tag} yes' & sleep 0.2");
    let mut request = ExecuteRequest::new("bash", ["-c", script.as_str()]);
    request.max_output_bytes = Some(1000);
    request.sink = Some(Arc::new(move |_: OutputStream, _: &[u8]| {
        sink_calls.fetch_add(1, Ordering::SeqCst);
    }));
    let out = bounded(h.runtime.execute(&lease.id, request)).await.unwrap();
    assert_eq!(out.exit_code, Some(0));
    assert!(out.stdout_truncated);
    let after_return = calls.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        after_return,
        "the sink was called after the call returned"
    );
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert!(survivors(&tag).await.is_empty());
    h.finish();
}
