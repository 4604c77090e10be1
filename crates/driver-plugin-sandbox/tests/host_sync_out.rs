//! On the sandbox: a tree the sandboxed command builds with a link
//! chain (`a/d0 -> ..`, `up2 -> a/d0/../..`) passes the worker's per-link check, so the
//! host resolves every link the worker wrote (the shared resolver of runtime-core) before
//! anything reaches the target. Against the crate's reference worker.

mod host_common;

use std::path::Path;

use envrt_driver_plugin_sandbox::SandboxOptions;
use envrt_runtime_core::{DriverError, ExecuteRequest, LeaseStatus, RuntimeError, SyncFile, SyncOperation};
use host_common::*;

fn out(source: &str, target: &Path) -> Vec<SyncOperation> {
    vec![SyncOperation {
        operation_id: "out".into(),
        files: vec![SyncFile::directory(source, target.to_str().unwrap())],
        post_upload_commands: Vec::new(),
    }]
}

#[tokio::test]
async fn a_link_chain_built_in_the_sandbox_never_lands_on_the_host() {
    let root = TempDir::new("chain");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    let script = "mkdir -p src/a && ln -s .. src/a/d0 && ln -s a/d0/../.. src/up2 && \
                  ln -s a/b/c/d/e/f/g/../../../../../../.. src/root && echo x > src/file";
    let made = bounded(
        "execute",
        runtime.execute(&lease.id, ExecuteRequest::new("sh", ["-c", script])),
    )
    .await
    .unwrap();
    assert_eq!(made.exit_code, Some(0), "{}", String::from_utf8_lossy(&made.stderr));
    let host = TempDir::new("chain-host");
    let target = host.join("out");
    let err = bounded("sync out", runtime.sync_out(&lease.id, &out("src", &target)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, RuntimeError::Driver(DriverError::EntryEscapesTarget { .. })),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "Entry \"up2\" would be written outside the target \"{}\".",
            target.display()
        )
    );
    let left: Vec<_> = std::fs::read_dir(host.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "nothing may land, no hold left: {left:?}");

    // Without the escaping link the tree lands, links as links.
    bounded(
        "execute",
        runtime.execute(&lease.id, ExecuteRequest::new("rm", ["src/up2"])),
    )
    .await
    .unwrap();
    let r = bounded("sync out", runtime.sync_out(&lease.id, &out("src", &target)))
        .await
        .unwrap();
    assert_eq!(r.operations[0].files_transferred, 1);
    assert_eq!(std::fs::read_link(target.join("a/d0")).unwrap(), Path::new(".."));
    assert_eq!(std::fs::read(target.join("file")).unwrap(), b"x\n");
    let left: Vec<_> = std::fs::read_dir(host.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("out")]);
    // A worker's own refusal names the caller's target, not the hold directory.
    bounded(
        "execute",
        runtime.execute(&lease.id, ExecuteRequest::new("ln", ["-s", "/etc", "src/abs"])),
    )
    .await
    .unwrap();
    let err = bounded("sync out", runtime.sync_out(&lease.id, &out("src", &target)))
        .await
        .unwrap_err();
    assert!(!err.to_string().contains(".envrt-hold-"), "{err}");
    assert!(err.to_string().contains(&target.display().to_string()), "{err}");
    assert_eq!(
        std::fs::read(target.join("file")).unwrap(),
        b"x\n",
        "the old target is intact"
    );
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

#[tokio::test]
async fn special_bits_holes_and_the_byte_bound_hold_on_what_the_worker_writes() {
    use std::os::unix::fs::MetadataExt;
    let root = TempDir::new("bits");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    let script = "mkdir -p d/shared && cp /bin/true d/su && chmod 4755 d/su && chmod 2777 d/shared && \
                  truncate -s 1G big && mkdir two && head -c 2097152 /dev/urandom > two/f";
    let made = bounded(
        "execute",
        runtime.execute(&lease.id, ExecuteRequest::new("sh", ["-c", script])),
    )
    .await
    .unwrap();
    assert_eq!(made.exit_code, Some(0), "{}", String::from_utf8_lossy(&made.stderr));
    let host = TempDir::new("bits-host");
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o7777;
    let target = host.join("out");
    bounded("sync out", runtime.sync_out(&lease.id, &out("d", &target)))
        .await
        .unwrap();
    assert_eq!((mode(&target.join("shared")), mode(&target.join("su"))), (0o777, 0o755));

    let big = host.join("big");
    let mut ops = out("big", &big);
    ops[0].files[0].kind = envrt_runtime_core::SyncKind::File;
    bounded("sync out", runtime.sync_out(&lease.id, &ops)).await.unwrap();
    let meta = std::fs::metadata(&big).unwrap();
    assert_eq!(meta.len(), 1 << 30);
    assert!(meta.blocks() * 512 < 1 << 20, "allocated {} bytes", meta.blocks() * 512);

    let bounded_out = host.join("two");
    std::fs::create_dir(&bounded_out).unwrap();
    std::fs::write(bounded_out.join("old"), b"old").unwrap();
    let mut ops = out("two", &bounded_out);
    ops[0].files[0].max_bytes = Some(1 << 20);
    let err = bounded("sync out", runtime.sync_out(&lease.id, &ops))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Sync out of \"two\" exceeds the limit of 1048576 bytes."
    );
    assert_eq!(std::fs::read_dir(&bounded_out).unwrap().count(), 1);
    assert_eq!(std::fs::read(bounded_out.join("old")).unwrap(), b"old");
    let mut names: Vec<_> = std::fs::read_dir(host.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["big", "out", "two"], "no hold directory left behind");
    bounded("release", runtime.release_lease(&lease.id, LeaseStatus::Released))
        .await
        .unwrap();
}
