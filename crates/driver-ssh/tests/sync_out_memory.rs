//! Sync out's host memory does not grow with the archive: the remote stream is extracted
//! as it arrives. Alone in its test binary, so the process's peak resident size is this
//! test's.

mod common;

use std::os::unix::fs::MetadataExt;

use envrt_runtime_core::sync::{SyncFile, SyncOperation};
use envrt_runtime_core::{ExecuteRequest, LeaseStatus};

use common::{acquire, runtime, server};

/// The process's peak resident set size (`VmHWM`), in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_archive_is_extracted_in_bounded_memory() {
    let Some(server) = server() else { return };
    let (_driver, rt, _root) = runtime(&server, "memory", |_| {}).await;
    let lease = acquire(&rt).await;
    // 512 MiB written densely on the remote side: tar sends every byte.
    let size: u64 = 512 << 20;
    let made = rt
        .execute(
            &lease.id,
            ExecuteRequest::new("sh", ["-c".to_string(), format!("head -c {size} /dev/zero > big")]),
        )
        .await
        .unwrap();
    assert_eq!(made.exit_code, Some(0));
    let host = tempfile::tempdir().unwrap();
    let target = host.path().join("big");
    let before = peak_rss_kib();
    let op = SyncOperation {
        operation_id: "out".into(),
        files: vec![SyncFile::file("big", target.to_str().unwrap())],
        post_upload_commands: vec![],
    };
    let result = rt.sync_out(&lease.id, &[op]).await.unwrap();
    let growth_mib = (peak_rss_kib() - before) / 1024;
    assert_eq!(result.operations[0].bytes_transferred, size);
    assert_eq!(std::fs::metadata(&target).unwrap().len(), size);
    assert!(
        growth_mib < 128,
        "peak RSS grew by {growth_mib} MiB for a {} MiB archive",
        size >> 20
    );
    // Its zeros landed as a hole.
    assert!(std::fs::metadata(&target).unwrap().blocks() * 512 < 1 << 20);
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}
