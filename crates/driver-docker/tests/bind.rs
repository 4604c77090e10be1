//! The opt-in bind-mounted workspace against a real engine: the lease's host directory is
//! made under a 0700 base, owned by the command user, mounted at the workspace (files sync
//! in and out through the archive API and commands see them), and removed on release and
//! by the orphan reap; a base that is a link, a file or open to others is refused, leaving
//! nothing behind; a bound lease refuses to become a template, also after a resume; a
//! kept (reusable) lease keeps its directory until destroyed.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use envrt_driver_docker::WorkspaceMount;
use envrt_runtime_core::{Lease, LeaseStatus, SyncFile, SyncOperation};
use serde_json::json;

fn op(files: Vec<SyncFile>) -> SyncOperation {
    SyncOperation {
        operation_id: "op".into(),
        files,
        post_upload_commands: Vec::new(),
    }
}

async fn bound(root: &Path) -> Option<common::Harness> {
    let root = root.to_path_buf();
    common::harness_with(move |c| {
        c.workspace_mount = WorkspaceMount::Bind;
        c.bind_root = Some(root);
    })
    .await
}

fn lease_dir(root: &Path, lease: &Lease) -> PathBuf {
    root.join(lease.metadata["containerName"].as_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_workspace_syncs_runs_and_is_removed_on_release() {
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().join("binds");
    let Some(h) = bound(&root).await else { return };
    common::bounded(120, async {
        let lease = h.lease(json!({"user": "65534:65534"}), Default::default()).await;
        let dir = lease_dir(&root, &lease);
        assert_eq!(fs::metadata(&root).unwrap().permissions().mode() & 0o777, 0o700);
        let meta = fs::symlink_metadata(&dir).unwrap();
        assert!(meta.is_dir());
        assert_eq!((meta.uid(), meta.gid()), (65534, 65534));

        let src = scratch.path().join("src");
        fs::create_dir_all(src.join("sub")).unwrap();
        fs::write(src.join("sub/a.txt"), b"alpha\n").unwrap();
        fs::write(src.join("big.bin"), vec![7u8; 3 << 20]).unwrap();
        let files = vec![SyncFile::directory(src.to_str().unwrap(), "proj")];
        h.runtime.sync_in(&lease.id, &[op(files)]).await.unwrap();
        let r = h
            .sh(
                &lease,
                "cat /workspace/proj/sub/a.txt && stat -c '%u %s' /workspace /workspace/proj/big.bin && grep -c ' /workspace ' /proc/mounts",
            )
            .await;
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "alpha\n65534 4096\n65534 3145728\n1\n"
        );
        assert!(dir.join("proj").is_dir(), "the files are in the host directory");
        let back = scratch.path().join("back");
        let files = vec![SyncFile::directory("proj", back.to_str().unwrap())];
        h.runtime.sync_out(&lease.id, &[op(files)]).await.unwrap();
        assert_eq!(fs::read(back.join("sub/a.txt")).unwrap(), b"alpha\n");
        assert_eq!(fs::read(back.join("big.bin")).unwrap().len(), 3 << 20);

        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        assert!(!dir.exists(), "release removes the host directory");
        assert!(root.is_dir(), "the base stays");
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_root_keeps_a_writable_bound_workspace_no_template_and_the_reap_removes_it() {
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().join("binds");
    let Some(h) = bound(&root).await else { return };
    common::bounded(120, async {
        let lease = h.lease(json!({"readOnlyRootFs": true}), Default::default()).await;
        let dir = lease_dir(&root, &lease);
        let r = h
            .sh(&lease, "echo hi > /workspace/f && cat /workspace/f && touch /etc/x 2>/dev/null || echo ro")
            .await;
        assert_eq!(String::from_utf8_lossy(&r.stdout), "hi\nro\n");
        assert!(dir.join("f").is_file());
        let error = h.runtime.capture_template(&lease.id, None).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "Invalid input: a lease with a bind-mounted workspace keeps its files in a host directory, which a template (an image commit) would not hold"
        );
        // The container of a lease no store knows: the reap takes its directory too.
        assert_eq!(h.driver.reap_orphans(&[]).await.unwrap().len(), 1);
        assert!(!dir.exists(), "the reap removes the host directory");
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_that_is_a_link_a_file_or_open_is_refused_and_nothing_is_left() {
    let scratch = tempfile::tempdir().unwrap();
    let elsewhere = scratch.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    let link = scratch.path().join("link");
    symlink(&elsewhere, &link).unwrap();
    let file = scratch.path().join("file");
    fs::write(&file, b"").unwrap();
    let open = scratch.path().join("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o755)).unwrap();
    let me = fs::metadata("/proc/self").unwrap().uid();
    for root in [link, file, open.clone()] {
        let Some(h) = bound(&root).await else { return };
        common::bounded(60, async {
            let env = h.environment(json!({})).await;
            let error = h
                .runtime
                .acquire_lease(envrt_runtime_core::AcquireRequest::new(env, "acme"))
                .await
                .unwrap_err();
            let expected = if root == open {
                format!(
                    "The Docker workspace bind root \"{}\" must belong to the driver's user with mode 0700, it has owner {me} and mode 755.",
                    root.display()
                )
            } else {
                format!(
                    "The Docker workspace bind root \"{}\" is not a directory (a link or a file).",
                    root.display()
                )
            };
            assert_eq!(error.to_string(), expected);
            assert_eq!(common::cli_containers(&h.run), Vec::<String>::new());
        })
        .await;
        h.finish().await;
    }
    assert_eq!(
        fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing made through the link"
    );
    assert_eq!(fs::metadata(&elsewhere).unwrap().permissions().mode() & 0o777, 0o755);
    assert_eq!(
        fs::read_dir(&open).unwrap().count(),
        0,
        "a refused base is left as it was"
    );
    assert_eq!(fs::metadata(&open).unwrap().permissions().mode() & 0o777, 0o755);
    // A failed acquire (no such image) removes the directory it made.
    let root = scratch.path().join("binds");
    let Some(h) = bound(&root).await else { return };
    common::bounded(60, async {
        let env = h.environment(json!({"image": "envrt-no-such-image:none"})).await;
        let request = envrt_runtime_core::AcquireRequest::new(env, "acme");
        assert!(h.runtime.acquire_lease(request).await.is_err());
        assert_eq!(fs::read_dir(&root).unwrap().count(), 0, "no lease directory left");
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reusable_bound_lease_keeps_its_directory_until_destroyed() {
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().join("binds");
    let Some(h) = bound(&root).await else { return };
    common::bounded(120, async {
        let lease = h
            .lease(json!({}), envrt_runtime_core::LeasePolicy::ReuseByEnvironment)
            .await;
        let dir = lease_dir(&root, &lease);
        assert_eq!(h.sh(&lease, "echo kept > /workspace/mark").await.exit_code, Some(0));
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        assert!(dir.join("mark").is_file(), "a kept container keeps its directory");
        let resumed = h.runtime.resume_lease(&lease.id).await.unwrap();
        assert_eq!(h.sh(&resumed, "cat /workspace/mark").await.stdout, b"kept\n");
        let error = h.runtime.capture_template(&lease.id, None).await.unwrap_err();
        assert!(error.to_string().contains("bind-mounted workspace"), "{error}");
        h.runtime.destroy_lease(&lease.id).await.unwrap();
        assert!(!dir.exists(), "destroy removes the host directory");
    })
    .await;
    h.finish().await;
}
