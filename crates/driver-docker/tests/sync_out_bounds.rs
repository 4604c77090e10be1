//! Sync out against a real engine: holes stay holes, the per-entry byte bound refuses
//! leaving the target as it was, and set-uid/set-gid/sticky bits are cleared both ways
//! unless the request keeps them.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use envrt_runtime_core::{SyncFile, SyncOperation};

fn op(files: Vec<SyncFile>) -> [SyncOperation; 1] {
    [SyncOperation {
        operation_id: "op".into(),
        files,
        post_upload_commands: Vec::new(),
    }]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sparse_gigabyte_comes_out_sparse_and_a_small_bound_is_refused() {
    let h = harness_or_skip!();
    common::bounded(300, async {
        let lease = h.default_lease().await;
        let r = h
            .sh(
                &lease,
                "cd /workspace && truncate -s 1G big && mkdir d && head -c 2097152 /dev/zero > d/two",
            )
            .await;
        assert_eq!(r.exit_code, Some(0));
        let host = tempfile::tempdir().unwrap();
        let big = host.path().join("big");
        let result = h
            .runtime
            .sync_out(&lease.id, &op(vec![SyncFile::file("big", big.to_str().unwrap())]))
            .await
            .unwrap();
        assert_eq!(result.operations[0].bytes_transferred, 1 << 30);
        let meta = fs::metadata(&big).unwrap();
        assert_eq!(meta.len(), 1 << 30);
        assert!(meta.blocks() * 512 < 1 << 20, "allocated {} bytes", meta.blocks() * 512);

        let out = host.path().join("out");
        fs::create_dir(&out).unwrap();
        fs::write(out.join("old"), b"old").unwrap();
        let mut file = SyncFile::directory("d", out.to_str().unwrap());
        file.max_bytes = Some(1 << 20);
        let err = h.runtime.sync_out(&lease.id, &op(vec![file])).await.unwrap_err();
        assert_eq!(err.to_string(), "Sync out of \"d\" exceeds the limit of 1048576 bytes.");
        assert_eq!(fs::read_dir(&out).unwrap().count(), 1);
        assert_eq!(fs::read(out.join("old")).unwrap(), b"old");
        let mut names: Vec<_> = fs::read_dir(host.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["big", "out"], "no staging left behind");
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_bits_are_cleared_both_ways_unless_kept() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let r = h
            .sh(&lease, "cd /workspace && mkdir -p d/shared && echo x > d/su && chmod 4755 d/su && chmod 2777 d/shared && chmod 1777 d")
            .await;
        assert_eq!(r.exit_code, Some(0));
        let host = tempfile::tempdir().unwrap();
        let mode = |p: &std::path::Path| fs::symlink_metadata(p).unwrap().mode() & 0o7777;
        let out = host.path().join("out");
        h.runtime
            .sync_out(&lease.id, &op(vec![SyncFile::directory("d", out.to_str().unwrap())]))
            .await
            .unwrap();
        assert_eq!((mode(&out), mode(&out.join("shared")), mode(&out.join("su"))), (0o777, 0o777, 0o755));
        let kept = host.path().join("kept");
        let mut file = SyncFile::directory("d", kept.to_str().unwrap());
        file.keep_special_bits = Some(true);
        h.runtime.sync_out(&lease.id, &op(vec![file])).await.unwrap();
        assert_eq!((mode(&kept), mode(&kept.join("shared")), mode(&kept.join("su"))), (0o1777, 0o2777, 0o4755));

        let src = host.path().join("src");
        fs::create_dir(&src).unwrap();
        fs::write(src.join("su"), b"x").unwrap();
        fs::set_permissions(src.join("su"), fs::Permissions::from_mode(0o4755)).unwrap();
        fs::create_dir(src.join("g")).unwrap();
        fs::set_permissions(src.join("g"), fs::Permissions::from_mode(0o2777)).unwrap();
        h.runtime
            .sync_in(&lease.id, &op(vec![SyncFile::directory(src.to_str().unwrap(), "in")]))
            .await
            .unwrap();
        let r = h.sh(&lease, "stat -c '%a %n' /workspace/in/su /workspace/in/g").await;
        assert_eq!(String::from_utf8_lossy(&r.stdout), "755 /workspace/in/su\n777 /workspace/in/g\n");
        let mut file = SyncFile::directory(src.to_str().unwrap(), "kept");
        file.keep_special_bits = Some(true);
        h.runtime.sync_in(&lease.id, &op(vec![file])).await.unwrap();
        let r = h.sh(&lease, "stat -c '%a %n' /workspace/kept/su /workspace/kept/g").await;
        assert_eq!(String::from_utf8_lossy(&r.stdout), "4755 /workspace/kept/su\n2777 /workspace/kept/g\n");
    })
    .await;
    h.finish().await;
}
