//! Local sync out: set-uid/set-gid/sticky bits in the workspace are cleared (both ways)
//! unless kept, holes stay holes, and the per-entry byte bound
//! refuses leaving the target as it was.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::{Harness, Scratch, bounded};
use envrt_runtime_core::{LeaseStatus, SyncFile, SyncOperation};

fn op(files: Vec<SyncFile>) -> [SyncOperation; 1] {
    [SyncOperation {
        operation_id: "op".into(),
        files,
        post_upload_commands: Vec::new(),
    }]
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_bits_in_the_workspace_are_cleared_unless_kept() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);
    // What a lease command made (sync copies as the host program: root).
    fs::create_dir_all(ws.join("d/shared")).unwrap();
    fs::copy("/bin/true", ws.join("d/su")).unwrap();
    fs::set_permissions(ws.join("d/su"), fs::Permissions::from_mode(0o4755)).unwrap();
    fs::set_permissions(ws.join("d/shared"), fs::Permissions::from_mode(0o2777)).unwrap();
    fs::set_permissions(ws.join("d"), fs::Permissions::from_mode(0o1777)).unwrap();
    let host = Scratch::new("bits");
    let out = host.join("out");
    bounded(
        h.runtime
            .sync_out(&lease.id, &op(vec![SyncFile::directory("d", out.to_str().unwrap())])),
    )
    .await
    .unwrap();
    assert_eq!(
        (mode(&out), mode(&out.join("shared")), mode(&out.join("su"))),
        (0o777, 0o777, 0o755)
    );
    let kept = host.join("kept");
    let mut file = SyncFile::directory("d", kept.to_str().unwrap());
    file.keep_special_bits = Some(true);
    bounded(h.runtime.sync_out(&lease.id, &op(vec![file]))).await.unwrap();
    assert_eq!(
        (mode(&kept), mode(&kept.join("shared")), mode(&kept.join("su"))),
        (0o1777, 0o2777, 0o4755)
    );
    // Sync in: the same rule.
    bounded(
        h.runtime
            .sync_in(&lease.id, &op(vec![SyncFile::directory(kept.to_str().unwrap(), "in")])),
    )
    .await
    .unwrap();
    assert_eq!((mode(&ws.join("in")), mode(&ws.join("in/su"))), (0o777, 0o755));
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sparse_gigabyte_comes_out_sparse_and_a_small_bound_is_refused() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);
    fs::File::create(ws.join("big")).unwrap().set_len(1 << 30).unwrap();
    fs::create_dir(ws.join("d")).unwrap();
    fs::write(ws.join("d/two"), vec![1u8; 2 << 20]).unwrap();
    let host = Scratch::new("sparse");
    let big = host.join("big");
    let result = bounded(
        h.runtime
            .sync_out(&lease.id, &op(vec![SyncFile::file("big", big.to_str().unwrap())])),
    )
    .await
    .unwrap();
    assert_eq!(result.operations[0].bytes_transferred, 1 << 30);
    let meta = fs::metadata(&big).unwrap();
    assert_eq!(meta.len(), 1 << 30);
    assert!(meta.blocks() * 512 < 1 << 20, "allocated {} bytes", meta.blocks() * 512);

    let out = host.join("out");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("old"), b"old").unwrap();
    let mut file = SyncFile::directory("d", out.to_str().unwrap());
    file.max_bytes = Some(1 << 20);
    let err = bounded(h.runtime.sync_out(&lease.id, &op(vec![file])))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "Sync out of \"d\" exceeds the limit of 1048576 bytes.");
    assert_eq!(fs::read_dir(&out).unwrap().count(), 1);
    assert_eq!(fs::read(out.join("old")).unwrap(), b"old");
    let mut names: Vec<_> = fs::read_dir(host.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["big", "out"], "no staging left behind");
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}
