//! File sync against a real engine (contract section 6).

mod common;

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use envrt_runtime_core::sync::PostUploadCommand;
use envrt_runtime_core::{DriverError, Lease, RuntimeError, SyncFile, SyncOperation, SyncResult};

fn op(id: &str, files: Vec<SyncFile>) -> SyncOperation {
    SyncOperation {
        operation_id: id.into(),
        files,
        post_upload_commands: Vec::new(),
    }
}

fn write(path: &Path, data: &[u8], mode: u32) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, data).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// A small tree: nested dirs, an empty file and dir, binary content, modes and an inner link.
fn sample_tree(root: &Path) {
    write(&root.join("a.txt"), b"alpha\n", 0o644);
    write(&root.join("bin/run.sh"), b"#!/bin/sh\necho run\n", 0o755);
    write(&root.join("deep/er/bytes.bin"), &(0..=255u8).collect::<Vec<_>>(), 0o600);
    write(&root.join("empty"), b"", 0o644);
    write(&root.join("debug.log"), b"noise", 0o644);
    write(&root.join("node_modules/x/index.js"), b"x", 0o644);
    fs::create_dir_all(root.join("void")).unwrap();
    symlink("a.txt", root.join("link-to-a")).unwrap();
}

/// (relative path, kind and content or link, mode) of every entry below `root`.
fn snapshot(root: &Path) -> Vec<(String, String, u32)> {
    let mut out = Vec::new();
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String, u32)>) {
        let mut names: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        for name in names {
            let path = dir.join(&name);
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let meta = fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o777;
            if meta.file_type().is_symlink() {
                out.push((rel, format!("link:{}", fs::read_link(&path).unwrap().display()), 0));
            } else if meta.is_dir() {
                out.push((rel, "dir".into(), mode));
                walk(root, &path, out);
            } else {
                out.push((rel, format!("{:?}", fs::read(&path).unwrap()), mode));
            }
        }
    }
    walk(root, root, &mut out);
    out
}

fn counts(result: &SyncResult) -> Vec<(u64, u64)> {
    result
        .operations
        .iter()
        .map(|o| (o.files_transferred, o.bytes_transferred))
        .collect()
}

async fn ls(h: &common::Harness, lease: &Lease, path: &str) -> String {
    String::from_utf8_lossy(&h.sh(lease, &format!("ls -A {path} 2>&1")).await.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_round_trips_with_modes_links_and_excludes() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.lease(serde_json::json!({"user": "65534:65534"}), Default::default()).await;
        let host = tempfile::tempdir().unwrap();
        let src = host.path().join("src");
        sample_tree(&src);
        let mut file = SyncFile::directory(src.to_str().unwrap(), "proj");
        file.exclude = vec!["*.log".into(), "node_modules".into()];
        let result = h.runtime.sync_in(&lease.id, &[op("in", vec![file])]).await.unwrap();
        assert_eq!(result.operations[0].operation_id, "in");
        assert_eq!(counts(&result), vec![(4, 6 + 19 + 256)]);
        let r = h
            .sh(&lease, "cd /workspace/proj && ls -A && stat -c '%a %u %n' bin/run.sh deep/er/bytes.bin && readlink link-to-a && ./bin/run.sh")
            .await;
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "a.txt\nbin\ndeep\nempty\nlink-to-a\nvoid\n755 65534 bin/run.sh\n600 65534 deep/er/bytes.bin\na.txt\nrun\n"
        );
        assert_eq!(ls(&h, &lease, "/workspace").await, "proj\n", "no staging left behind");
        let back = host.path().join("back/proj");
        let result = h
            .runtime
            .sync_out(&lease.id, &[op("out", vec![SyncFile::directory("proj", back.to_str().unwrap())])])
            .await
            .unwrap();
        assert_eq!(counts(&result), vec![(4, 6 + 19 + 256)]);
        let mut expected = snapshot(&src);
        expected.retain(|(p, _, _)| !p.ends_with(".log") && !p.starts_with("node_modules"));
        assert_eq!(snapshot(&back), expected);
        assert_eq!(fs::read_dir(host.path().join("back")).unwrap().count(), 1, "no staging left behind");
        // Excludes apply on the way out too.
        let mut file = SyncFile::directory("proj", back.to_str().unwrap());
        file.exclude = vec!["deep".into(), "bin/*.sh".into()];
        h.runtime.sync_out(&lease.id, &[op("out", vec![file])]).await.unwrap();
        let names: Vec<String> = snapshot(&back).into_iter().map(|(p, _, _)| p).collect();
        assert_eq!(names, ["a.txt", "bin", "empty", "link-to-a", "void"]);
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_modes_follow_symlinks_and_replacement() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let host = tempfile::tempdir().unwrap();
        write(&host.path().join("f.txt"), b"one", 0o644);
        symlink("f.txt", host.path().join("f-link")).unwrap();
        let mut file = SyncFile::file(host.path().join("f.txt").to_str().unwrap(), "dir/g.txt");
        file.mode = Some(0o600);
        let mut followed = SyncFile::file(host.path().join("f-link").to_str().unwrap(), "dir/followed");
        followed.follow_symlinks = Some(true);
        let result = h
            .runtime
            .sync_in(&lease.id, &[op("a", vec![file, followed])])
            .await
            .unwrap();
        assert_eq!(counts(&result), vec![(2, 6)]);
        let r = h
            .sh(
                &lease,
                "cd /workspace/dir && stat -c '%a %F' g.txt followed && cat g.txt",
            )
            .await;
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "600 regular file\n644 regular file\none"
        );
        // A link without followSymlinks is not a file.
        let err = h
            .runtime
            .sync_in(
                &lease.id,
                &[op(
                    "b",
                    vec![SyncFile::file(host.path().join("f-link").to_str().unwrap(), "x")],
                )],
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "Sync source \"{}\" is not a file.",
                host.path().join("f-link").display()
            )
        );
        // A directory target is replaced as a whole.
        h.sh(&lease, "mkdir -p /workspace/rep && echo stale > /workspace/rep/stale")
            .await;
        let src = host.path().join("rep");
        write(&src.join("fresh"), b"new", 0o644);
        h.runtime
            .sync_in(
                &lease.id,
                &[op("c", vec![SyncFile::directory(src.to_str().unwrap(), "rep")])],
            )
            .await
            .unwrap();
        assert_eq!(ls(&h, &lease, "/workspace/rep").await, "fresh\n");
        // Out: a file with a mode, a followed link, and a host target that already exists.
        h.sh(
            &lease,
            "cd /workspace && echo data > o.txt && ln -s o.txt o-link && mkdir -p od && ln -s ../o.txt od/l",
        )
        .await;
        let target = host.path().join("out/o.txt");
        write(&target, b"old", 0o644);
        let mut file = SyncFile::file("o.txt", target.to_str().unwrap());
        file.mode = Some(0o640);
        let mut via_link = SyncFile::file("o-link", host.path().join("out/via").to_str().unwrap());
        via_link.follow_symlinks = Some(true);
        let mut dir = SyncFile::directory("od", host.path().join("out/od").to_str().unwrap());
        dir.follow_symlinks = Some(true);
        let result = h
            .runtime
            .sync_out(&lease.id, &[op("d", vec![file, via_link, dir])])
            .await
            .unwrap();
        assert_eq!(counts(&result), vec![(3, 15)]);
        assert_eq!(fs::read(&target).unwrap(), b"data\n");
        assert_eq!(fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o640);
        assert_eq!(fs::read(host.path().join("out/via")).unwrap(), b"data\n");
        assert!(fs::symlink_metadata(host.path().join("out/od/l")).unwrap().is_file());
        let err = h
            .runtime
            .sync_out(
                &lease.id,
                &[op(
                    "e",
                    vec![SyncFile::file("o-link", host.path().join("x").to_str().unwrap())],
                )],
            )
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "Sync source \"o-link\" is not a file.");
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escapes_are_refused_and_leave_nothing_behind() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let host = tempfile::tempdir().unwrap();
        let src = host.path().join("src");
        write(&src.join("ok"), b"fine", 0o644);
        symlink("../../etc/passwd", src.join("bad")).unwrap();
        let err = h
            .runtime
            .sync_in(
                &lease.id,
                &[op("a", vec![SyncFile::directory(src.to_str().unwrap(), "t")])],
            )
            .await
            .unwrap_err();
        assert!(matches!(
            err,
            RuntimeError::Driver(DriverError::EntryEscapesTarget { .. })
        ));
        assert_eq!(
            err.to_string(),
            "Entry \"bad -> ../../etc/passwd\" would be written outside the target \"t\"."
        );
        assert_eq!(ls(&h, &lease, "/workspace").await, "", "no target and no staging");
        // `/etc/t` is a place in the container like any other now (tests/user_paths_and_modes.rs).
        for target in ["../t", "a/../../t"] {
            let err = h
                .runtime
                .sync_in(
                    &lease.id,
                    &[op("b", vec![SyncFile::file(src.join("ok").to_str().unwrap(), target)])],
                )
                .await
                .unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("Path \"{target}\" is outside the lease workspace.")
            );
        }
        // Out of the container: a link leading out of the target is refused on the host.
        h.sh(
            &lease,
            "mkdir -p /workspace/o && echo x > /workspace/o/f && ln -s /etc/passwd /workspace/o/evil",
        )
        .await;
        let target = host.path().join("landing/o");
        let err = h
            .runtime
            .sync_out(
                &lease.id,
                &[op("c", vec![SyncFile::directory("o", target.to_str().unwrap())])],
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "Entry \"evil -> /etc/passwd\" would be written outside the target \"{}\".",
                target.display()
            )
        );
        assert_eq!(
            fs::read_dir(host.path().join("landing")).unwrap().count(),
            0,
            "no target and no staging"
        );
        let err = h
            .runtime
            .sync_out(
                &lease.id,
                &[op("d", vec![SyncFile::directory("../..", target.to_str().unwrap())])],
            )
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "Path \"../..\" is outside the lease workspace.");
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_and_mismatched_sources_are_refused() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let host = tempfile::tempdir().unwrap();
        let missing = host.path().join("nope");
        let err = h
            .runtime
            .sync_in(
                &lease.id,
                &[op("a", vec![SyncFile::file(missing.to_str().unwrap(), "x")])],
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("Sync source \"{}\" does not exist.", missing.display())
        );
        let err = h
            .runtime
            .sync_in(
                &lease.id,
                &[op("a", vec![SyncFile::file(host.path().to_str().unwrap(), "x")])],
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("Sync source \"{}\" is not a file.", host.path().display())
        );
        let mut bad_glob = SyncFile::directory(host.path().to_str().unwrap(), "x");
        bad_glob.exclude = vec!["a[".into()];
        let err = h
            .runtime
            .sync_in(&lease.id, &[op("a", vec![bad_glob])])
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "Exclude pattern \"a[\" is not a valid glob.");
        let out = host.path().join("o");
        let err = h
            .runtime
            .sync_out(
                &lease.id,
                &[op("b", vec![SyncFile::directory("nothing", out.to_str().unwrap())])],
            )
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "Sync source \"nothing\" does not exist.");
        h.sh(&lease, "echo x > /workspace/plain").await;
        let err = h
            .runtime
            .sync_out(
                &lease.id,
                &[op("b", vec![SyncFile::directory("plain", out.to_str().unwrap())])],
            )
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "Sync source \"plain\" is not a directory.");
        assert!(!out.exists());
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_upload_commands_run_in_order_and_stop_at_the_first_failure() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let host = tempfile::tempdir().unwrap();
        write(&host.path().join("app/main.sh"), b"echo main", 0o755);
        let command = |c: &str, cwd: Option<&str>| PostUploadCommand {
            command: c.into(),
            cwd: cwd.map(Into::into),
            timeout_ms: Some(10_000),
        };
        let mut operation = op(
            "p",
            vec![SyncFile::directory(host.path().join("app").to_str().unwrap(), "app")],
        );
        operation.post_upload_commands = vec![
            command(
                "pwd > /workspace/log; ./main.sh >> /workspace/log",
                Some("/workspace/app"),
            ),
            command("exit 4", None),
            command("echo never >> /workspace/log", None),
        ];
        let err = h
            .runtime
            .sync_in(&lease.id, std::slice::from_ref(&operation))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Post-upload command \"exit 4\" failed with exit code 4."
        );
        assert_eq!(
            h.sh(&lease, "cat /workspace/log").await.stdout,
            b"/workspace/app\nmain\n"
        );
        // A timeout is a failure too.
        operation.post_upload_commands = vec![PostUploadCommand {
            command: "sleep 30".into(),
            cwd: None,
            timeout_ms: Some(300),
        }];
        let err = h
            .runtime
            .sync_in(&lease.id, std::slice::from_ref(&operation))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Post-upload command \"sleep 30\" failed with a timeout."
        );
        // A cwd outside the targets is refused before anything is sent.
        h.sh(&lease, "rm -rf /workspace/app /workspace/log").await;
        for cwd in ["/workspace", "app", "/workspace/app/../etc", "/workspace/application"] {
            operation.post_upload_commands = vec![command("true", Some(cwd))];
            let err = h
                .runtime
                .sync_in(&lease.id, std::slice::from_ref(&operation))
                .await
                .unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "Post-upload command cwd \"{cwd}\" must be an absolute path under one of the operation's targets."
                )
            );
            assert_eq!(ls(&h, &lease, "/workspace").await, "");
        }
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_files_stream_and_sync_in_and_out_run_concurrently() {
    let h = harness_or_skip!();
    common::bounded(300, async {
        let lease = h.default_lease().await;
        let host = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..48u32 << 20)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        write(&host.path().join("big/blob"), &big, 0o644);
        h.runtime
            .sync_in(
                &lease.id,
                &[op(
                    "a",
                    vec![SyncFile::directory(host.path().join("big").to_str().unwrap(), "big")],
                )],
            )
            .await
            .unwrap();
        write(&host.path().join("small/s"), b"s", 0o644);
        let small_in = [op(
            "b",
            vec![SyncFile::directory(
                host.path().join("small").to_str().unwrap(),
                "small",
            )],
        )];
        let big_out = [op(
            "c",
            vec![SyncFile::directory("big", host.path().join("back").to_str().unwrap())],
        )];
        let (a, b) = tokio::join!(
            h.runtime.sync_in(&lease.id, &small_in),
            h.runtime.sync_out(&lease.id, &big_out)
        );
        assert_eq!(counts(&a.unwrap()), vec![(1, 1)]);
        assert_eq!(counts(&b.unwrap()), vec![(1, big.len() as u64)]);
        assert!(
            fs::read(host.path().join("back/blob")).unwrap() == big,
            "content changed"
        );
        // The workspace root itself: its content is replaced, and it takes the mode.
        let mut root = SyncFile::directory(host.path().join("small").to_str().unwrap(), ".");
        root.mode = Some(0o750);
        h.runtime.sync_in(&lease.id, &[op("d", vec![root])]).await.unwrap();
        assert_eq!(ls(&h, &lease, "/workspace").await, "s\n");
        assert_eq!(h.sh(&lease, "stat -c %a /workspace").await.stdout, b"750\n");
        // A directory target takes the mode too.
        let mut dir = SyncFile::directory(host.path().join("small").to_str().unwrap(), "d");
        dir.mode = Some(0o701);
        h.runtime.sync_in(&lease.id, &[op("e", vec![dir])]).await.unwrap();
        assert_eq!(h.sh(&lease, "stat -c %a /workspace/d").await.stdout, b"701\n");
    })
    .await;
    h.finish().await;
}
