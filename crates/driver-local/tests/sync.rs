//! Native sync (contract section 6) through the facade: round trips, modes, excludes,
//! links, post-upload commands, every escape refused with its exact text and nothing
//! written, and no half-written target after a failure.

mod common;

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use common::{Harness, Scratch, bounded, tree};
use envrt_runtime_core::sync::PostUploadCommand;
use envrt_runtime_core::{Lease, LeaseStatus, RuntimeError, SyncFile, SyncOperation, SyncResult};

fn op(id: &str, files: Vec<SyncFile>) -> SyncOperation {
    SyncOperation {
        operation_id: id.into(),
        files,
        post_upload_commands: Vec::new(),
    }
}

fn mode_of(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

fn set_mode(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

async fn sync_in(h: &Harness, lease: &Lease, ops: &[SyncOperation]) -> Result<SyncResult, RuntimeError> {
    bounded(h.runtime.sync_in(&lease.id, ops)).await
}

async fn sync_out(h: &Harness, lease: &Lease, ops: &[SyncOperation]) -> Result<SyncResult, RuntimeError> {
    bounded(h.runtime.sync_out(&lease.id, ops)).await
}

/// A tree with nested directories, spaces and non-ASCII names, modes, an empty file and
/// links inside the tree.
fn sample_tree(dir: &Path) {
    fs::create_dir_all(dir.join("src/deep er/ünï")).unwrap();
    fs::write(dir.join("README"), b"hello\n").unwrap();
    fs::write(dir.join("empty"), b"").unwrap();
    fs::write(dir.join("src/main.rs"), vec![7u8; 200_000]).unwrap();
    fs::write(dir.join("src/deep er/ünï/日本.txt"), "naïve".as_bytes()).unwrap();
    fs::write(dir.join("run.sh"), b"#!/bin/sh\necho ran\n").unwrap();
    set_mode(&dir.join("run.sh"), 0o755);
    set_mode(&dir.join("README"), 0o640);
    set_mode(&dir.join("src/deep er"), 0o750);
    // Special bits survive a sync that keeps them (`keep`); by default they are cleared.
    set_mode(&dir.join("src/deep er/ünï"), 0o1777);
    set_mode(&dir.join("empty"), 0o4755);
    symlink("src/main.rs", dir.join("link-to-main")).unwrap();
    symlink("../README", dir.join("src/up")).unwrap();
    symlink("missing-but-inside", dir.join("dangling")).unwrap();
}

/// `file` with its special bits kept (the sample tree has set-uid and sticky entries).
fn keep(mut file: SyncFile) -> SyncFile {
    file.keep_special_bits = Some(true);
    file
}

fn assert_same_tree(a: &Path, b: &Path) {
    assert_eq!(tree(a), tree(b));
    for rel in tree(a) {
        let (pa, pb) = (a.join(&rel), b.join(&rel));
        let (ma, mb) = (fs::symlink_metadata(&pa).unwrap(), fs::symlink_metadata(&pb).unwrap());
        assert_eq!(ma.file_type(), mb.file_type(), "{rel}");
        if ma.file_type().is_symlink() {
            assert_eq!(fs::read_link(&pa).unwrap(), fs::read_link(&pb).unwrap(), "{rel}");
        } else {
            assert_eq!(mode_of(&pa), mode_of(&pb), "{rel}");
            if ma.is_file() {
                assert!(fs::read(&pa).unwrap() == fs::read(&pb).unwrap(), "{rel}");
            }
        }
    }
}

#[tokio::test]
async fn a_tree_survives_sync_in_then_out_byte_for_byte_with_modes_and_links() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let host = Scratch::new("roundtrip");
    sample_tree(&host.join("src-tree"));
    let result = sync_in(
        &h,
        &lease,
        &[op("in", vec![keep(SyncFile::directory(host.s("src-tree"), "app"))])],
    )
    .await
    .unwrap();
    assert_eq!(result.operations[0].operation_id, "in");
    assert_eq!(result.operations[0].files_transferred, 5);
    assert_eq!(
        result.operations[0].bytes_transferred,
        6 + 200_000 + "naïve".len() as u64 + 19
    );
    let ws = h.workspace(&lease);
    assert_same_tree(&host.join("src-tree"), &ws.join("app"));
    // The staged copy kept no temporary names.
    assert_eq!(tree(&ws).iter().filter(|n| n.contains(".envrt-")).count(), 0);
    assert_eq!(h.sh(&lease, "./app/run.sh").await.stdout, b"ran\n");

    let out = sync_out(
        &h,
        &lease,
        &[op("out", vec![keep(SyncFile::directory("app", host.s("back")))])],
    )
    .await
    .unwrap();
    assert_eq!(out.operations[0].files_transferred, 5);
    assert_same_tree(&host.join("src-tree"), &host.join("back"));
    assert_eq!(mode_of(&host.join("back")), mode_of(&host.join("src-tree")));
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn files_get_their_final_mode_and_directories_are_replaced_whole() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let host = Scratch::new("modes");
    fs::write(host.join("secret.key"), b"k3y").unwrap();
    set_mode(&host.join("secret.key"), 0o644);
    let mut file = SyncFile::file(host.s("secret.key"), "conf/secret.key");
    file.mode = Some(0o600);
    let mut dir = SyncFile::directory(host.s("d"), "data");
    dir.mode = Some(0o711);
    fs::create_dir(host.join("d")).unwrap();
    fs::write(host.join("d/new"), b"new").unwrap();
    let ws = h.workspace(&lease);
    fs::create_dir(ws.join("data")).unwrap();
    fs::write(ws.join("data/old"), b"old").unwrap();
    let result = sync_in(&h, &lease, &[op("m", vec![file, dir])]).await.unwrap();
    assert_eq!(
        (
            result.operations[0].files_transferred,
            result.operations[0].bytes_transferred
        ),
        (2, 6)
    );
    assert_eq!(mode_of(&ws.join("conf/secret.key")), 0o600);
    assert_eq!(fs::read(ws.join("conf/secret.key")).unwrap(), b"k3y");
    assert_eq!(mode_of(&ws.join("data")), 0o711);
    assert_eq!(tree(&ws.join("data")), vec!["new".to_string()]);

    // Host side: the final mode too.
    let mut back = SyncFile::file("conf/secret.key", host.s("out/key"));
    back.mode = Some(0o400);
    sync_out(&h, &lease, &[op("o", vec![back])]).await.unwrap();
    assert_eq!(mode_of(&host.join("out/key")), 0o400);
    assert_eq!(fs::read(host.join("out/key")).unwrap(), b"k3y");
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn exclude_globs_leave_paths_out() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let host = Scratch::new("exclude");
    let s = host.join("s");
    fs::create_dir_all(s.join("node_modules/x")).unwrap();
    fs::create_dir_all(s.join("build/out")).unwrap();
    fs::create_dir_all(s.join("lib/build/out")).unwrap();
    for f in [
        "a.log",
        "keep.txt",
        "node_modules/x/y",
        "build/out/z",
        "lib/build/out/kept",
        "lib/b.log",
    ] {
        fs::write(s.join(f), b"x").unwrap();
    }
    let mut file = SyncFile::directory(host.s("s"), "t");
    file.exclude = vec!["*.log".into(), "node_modules".into(), "build/out/**".into()];
    let result = sync_in(&h, &lease, &[op("e", vec![file])]).await.unwrap();
    assert_eq!(result.operations[0].files_transferred, 2);
    assert_eq!(
        tree(&h.workspace(&lease).join("t")),
        [
            "build",
            "build/out",
            "keep.txt",
            "lib",
            "lib/build",
            "lib/build/out",
            "lib/build/out/kept"
        ]
    );
    let mut bad = SyncFile::directory(host.s("s"), "t2");
    bad.exclude = vec!["a[".into()];
    let err = sync_in(&h, &lease, &[op("e", vec![bad])]).await.unwrap_err();
    assert_eq!(err.to_string(), "Exclude pattern \"a[\" is not a valid glob.");
    assert!(!h.workspace(&lease).join("t2").exists());
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn follow_symlinks_copies_what_links_point_to() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let host = Scratch::new("follow");
    fs::create_dir(host.join("s")).unwrap();
    fs::write(host.join("outside.txt"), b"outside").unwrap();
    symlink(host.join("outside.txt"), host.join("s/link")).unwrap();
    symlink(".", host.join("s/self")).unwrap();
    let mut file = SyncFile::directory(host.s("s"), "t");
    file.follow_symlinks = Some(true);
    file.exclude = vec!["self".into()];
    let result = sync_in(&h, &lease, &[op("f", vec![file.clone()])]).await.unwrap();
    assert_eq!(result.operations[0].bytes_transferred, 7);
    let copied = h.workspace(&lease).join("t/link");
    assert!(fs::symlink_metadata(&copied).unwrap().is_file());
    // A link loop is refused, not followed forever, and nothing lands.
    file.exclude.clear();
    file.target_path = "t-loop".into();
    let err = sync_in(&h, &lease, &[op("f", vec![file])]).await.unwrap_err();
    assert!(err.to_string().contains("loops back to a parent directory"), "{err}");
    assert!(!h.workspace(&lease).join("t-loop").exists());
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn every_environment_side_escape_is_refused_and_nothing_is_written() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);
    let host = Scratch::new("escape");
    fs::write(host.join("f"), b"payload").unwrap();
    let victim = Scratch::new("victim");
    symlink(victim.path(), ws.join("out")).unwrap();
    fs::create_dir(ws.join("inside")).unwrap();
    symlink("../out", ws.join("inside/hop")).unwrap();
    let before = tree(&ws);

    let victim_abs = victim.s("x");
    for target in [
        "..",
        "../x",
        "a/../../x",
        "/etc/envrt-x",
        victim_abs.as_str(),
        "out/x",
        "out",
        "inside/hop/x",
    ] {
        let err = sync_in(&h, &lease, &[op("esc", vec![SyncFile::file(host.s("f"), target)])])
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("Path \"{target}\" is outside the lease workspace."),
            "{target}"
        );
    }
    for source in ["..", "../x", "/etc/passwd", "out/anything", "out", "inside/hop"] {
        let err = sync_out(
            &h,
            &lease,
            &[op("esc", vec![SyncFile::directory(source, host.s("got"))])],
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("Path \"{source}\" is outside the lease workspace."),
            "{source}"
        );
    }
    assert_eq!(tree(&ws), before);
    assert!(tree(victim.path()).is_empty());
    assert!(!host.join("got").exists());
    assert!(!Path::new("/etc/envrt-x").exists());
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn links_in_the_source_that_escape_when_copied_as_links_are_refused() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);
    let host = Scratch::new("zipslip");
    let cases: [(&str, &str); 4] = [
        ("evil", "../../etc"),
        ("abs", "/etc/passwd"),
        ("sub/deeper", "../../x"),
        ("sub/trick", "../dot/../../x"),
    ];
    for (i, (entry, text)) in cases.iter().enumerate() {
        let src = host.join(&format!("s{i}"));
        fs::create_dir_all(src.join("sub")).unwrap();
        fs::write(src.join("plain"), b"x").unwrap();
        symlink(".", src.join("dot")).unwrap();
        symlink(text, src.join(entry)).unwrap();
        let target = format!("t{i}");
        let err = sync_in(
            &h,
            &lease,
            &[op("z", vec![SyncFile::directory(src.to_string_lossy(), &target)])],
        )
        .await
        .unwrap_err();
        assert!(matches!(
            err,
            RuntimeError::Driver(envrt_runtime_core::DriverError::EntryEscapesTarget { .. })
        ));
        assert_eq!(
            err.to_string(),
            format!("Entry \"{entry}\" would be written outside the target \"{target}\".")
        );
    }
    assert!(tree(&ws).is_empty(), "nothing may be written: {:?}", tree(&ws));

    // Out of the workspace with followSymlinks: a link leading out of the workspace.
    fs::create_dir(ws.join("d")).unwrap();
    symlink("/etc/hostname", ws.join("d/leak")).unwrap();
    let mut file = SyncFile::directory("d", host.s("leaked"));
    file.follow_symlinks = Some(true);
    let err = sync_out(&h, &lease, &[op("z", vec![file])]).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Path \"{}\" is outside the lease workspace.",
            ws.join("d/leak").display()
        )
    );
    assert!(!host.join("leaked").exists());
    assert!(tree(host.path()).iter().all(|n| !n.contains(".envrt-")));
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn post_upload_commands_run_in_order_and_stop_at_the_first_failure() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);
    let host = Scratch::new("post");
    fs::create_dir(host.join("s")).unwrap();
    fs::write(host.join("s/in.txt"), b"data").unwrap();
    let command = |c: &str, cwd: Option<String>| PostUploadCommand {
        command: c.into(),
        cwd,
        timeout_ms: None,
    };
    let mut operation = op("p", vec![SyncFile::directory(host.s("s"), "app")]);
    operation.post_upload_commands = vec![
        command("pwd > where; cat in.txt >> log", None),
        command("echo sub >> ../log", Some(format!("{}/app/sub", ws.display()))),
        command("exit 3", None),
        command("echo never >> log", None),
    ];
    fs::create_dir(host.join("s/sub")).unwrap();
    let err = sync_in(&h, &lease, &[operation]).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Post-upload command \"exit 3\" failed with exit code 3."
    );
    assert_eq!(
        fs::read_to_string(ws.join("app/where")).unwrap(),
        format!("{}/app\n", ws.display())
    );
    assert_eq!(fs::read_to_string(ws.join("app/log")).unwrap(), "datasub\n");

    let mut slow = op("t", vec![SyncFile::file(host.s("s/in.txt"), "slow/in.txt")]);
    slow.post_upload_commands = vec![PostUploadCommand {
        command: "sleep 30".into(),
        cwd: None,
        timeout_ms: Some(100),
    }];
    let err = sync_in(&h, &lease, &[slow]).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Post-upload command \"sleep 30\" failed with a timeout."
    );
    let mut killed = op("k", vec![SyncFile::file(host.s("s/in.txt"), "k/in.txt")]);
    killed.post_upload_commands = vec![command("kill -USR1 $$", None)];
    let err = sync_in(&h, &lease, &[killed]).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Post-upload command \"kill -USR1 $$\" failed with signal SIGUSR1."
    );
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_post_upload_cwd_outside_the_targets_is_refused_before_anything_is_copied() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);
    let host = Scratch::new("postcwd");
    fs::write(host.join("f"), b"x").unwrap();
    let app = format!("{}/app", ws.display());
    let bad_cwds = [
        "/tmp".to_string(),
        "app".to_string(),
        format!("{app}/../.."),
        ws.display().to_string(),
        format!("{app}x"),
    ];
    for cwd in bad_cwds {
        let mut operation = op("c", vec![SyncFile::directory(host.path().to_string_lossy(), "app")]);
        operation.post_upload_commands = vec![PostUploadCommand {
            command: "touch ran".into(),
            cwd: Some(cwd.clone()),
            timeout_ms: None,
        }];
        let err = sync_in(&h, &lease, &[operation]).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("Post-upload command cwd \"{cwd}\" must be an absolute path under one of the operation's targets.")
        );
        assert!(tree(&ws).is_empty(), "nothing may be copied for cwd {cwd}");
    }
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_failed_operation_leaves_no_target_and_no_temporary_files() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);
    let host = Scratch::new("half");
    fs::create_dir(host.join("big")).unwrap();
    for i in 0..50 {
        fs::write(host.join(&format!("big/f{i:02}")), vec![i as u8; 10_000]).unwrap();
    }
    // Fails midway: a dangling link that must be followed.
    symlink("nowhere", host.join("big/zz-dangling")).unwrap();
    fs::write(host.join("one"), b"1").unwrap();
    fs::create_dir(ws.join("existing")).unwrap();
    fs::write(ws.join("existing/old"), b"old").unwrap();
    let before = tree(&ws);

    let mut big = SyncFile::directory(host.s("big"), "existing");
    big.follow_symlinks = Some(true);
    let operation = op("h", vec![SyncFile::file(host.s("one"), "deep/new/one"), big]);
    let err = sync_in(&h, &lease, &[operation]).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Sync source \"{}\" does not exist.",
            host.join("big/zz-dangling").display()
        )
    );
    assert_eq!(tree(&ws), before, "the workspace must be exactly as before");

    // Same on the host side.
    let out_target = host.join("out-target");
    let operation = op(
        "h2",
        vec![
            SyncFile::file("existing/old", out_target.join("a").to_string_lossy()),
            SyncFile::file("missing", out_target.join("b").to_string_lossy()),
        ],
    );
    let err = sync_out(&h, &lease, &[operation]).await.unwrap_err();
    assert_eq!(err.to_string(), "Sync source \"missing\" does not exist.");
    assert!(!out_target.exists());

    let err = sync_in(&h, &lease, &[op("k", vec![SyncFile::directory(host.s("one"), "x")])])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Sync source \"{}\" is not a directory.", host.s("one"))
    );
    assert_eq!(tree(&ws), before);
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn overlapping_targets_and_the_workspace_itself_are_refused() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let host = Scratch::new("overlap");
    fs::write(host.join("f"), b"x").unwrap();
    let err = sync_in(
        &h,
        &lease,
        &[op(
            "o",
            vec![
                SyncFile::directory(host.path().to_string_lossy(), "a"),
                SyncFile::file(host.s("f"), "a/f"),
            ],
        )],
    )
    .await
    .unwrap_err();
    assert_eq!(err.to_string(), "Invalid input: sync targets \"a\" and \"a/f\" overlap");
    let err = sync_in(
        &h,
        &lease,
        &[op("o", vec![SyncFile::directory(host.path().to_string_lossy(), ".")])],
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid input: sync target \".\" is the lease workspace itself; name a path inside it"
    );
    let err = sync_in(&h, &lease, &[op("o", vec![SyncFile::file("relative/host", "a")])])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid input: host path \"relative/host\" must be absolute, without '..', and not the root"
    );
    assert!(tree(&h.workspace(&lease)).is_empty());
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn sync_in_and_out_run_concurrently_on_one_lease() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let host = Scratch::new("concurrent");
    sample_tree(&host.join("s"));
    sync_in(
        &h,
        &lease,
        &[op("seed", vec![keep(SyncFile::directory(host.s("s"), "seed"))])],
    )
    .await
    .unwrap();
    let (hr, lr) = (&h, &lease);
    let ins = (0..4).map(|i| {
        let ops = vec![op("in", vec![keep(SyncFile::directory(host.s("s"), format!("in{i}")))])];
        async move { sync_in(hr, lr, &ops).await }
    });
    let outs = (0..4).map(|i| {
        let ops = vec![op(
            "out",
            vec![keep(SyncFile::directory("seed", host.s(&format!("out{i}"))))],
        )];
        async move { sync_out(hr, lr, &ops).await }
    });
    let (ins, outs) = tokio::join!(futures::future::join_all(ins), futures::future::join_all(outs));
    for r in ins.into_iter().chain(outs) {
        assert_eq!(r.unwrap().operations[0].files_transferred, 5);
    }
    for i in 0..4 {
        assert_same_tree(&host.join("s"), &h.workspace(&lease).join(format!("in{i}")));
        assert_same_tree(&host.join("s"), &host.join(&format!("out{i}")));
    }
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_target_inside_its_own_source_does_not_copy_itself() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);
    fs::create_dir(ws.join("data")).unwrap();
    fs::write(ws.join("data/a"), b"a").unwrap();
    // Host source = the workspace itself, target inside it.
    let file = SyncFile::directory(ws.to_string_lossy(), "data/snapshot");
    let result = sync_in(&h, &lease, &[op("self", vec![file])]).await.unwrap();
    assert_eq!(result.operations[0].files_transferred, 1);
    assert_eq!(
        tree(&ws),
        [
            "data",
            "data/a",
            "data/snapshot",
            "data/snapshot/data",
            "data/snapshot/data/a"
        ]
    );
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}
