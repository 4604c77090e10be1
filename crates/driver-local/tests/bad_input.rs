//! Hostile input against the local driver: link chains, deep and wide trees,
//! names that are not UTF-8, escapes, NUL bytes, odd variables, huge argv, env and
//! stdin. Each case is a clear typed error or the right behaviour; nothing is written
//! outside the target, nothing hangs or panics.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use common::{Harness, Scratch};
use envrt_runtime_core::tree::MAX_TREE_DEPTH;
use envrt_runtime_core::{
    DriverError, ExecuteRequest, Lease, LeaseStatus, RuntimeError, SyncFile, SyncOperation, SyncResult,
};

fn ops(files: Vec<SyncFile>) -> Vec<SyncOperation> {
    vec![SyncOperation {
        operation_id: "op".into(),
        files,
        post_upload_commands: Vec::new(),
    }]
}

async fn sync_in(h: &Harness, lease: &Lease, files: Vec<SyncFile>) -> Result<SyncResult, RuntimeError> {
    common::bounded(h.runtime.sync_in(&lease.id, &ops(files))).await
}

async fn sync_out(h: &Harness, lease: &Lease, files: Vec<SyncFile>) -> Result<SyncResult, RuntimeError> {
    common::bounded(h.runtime.sync_out(&lease.id, &ops(files))).await
}

fn names(dir: &Path) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = std::fs::read_dir(dir)
        .map(|r| r.flatten().map(|e| e.file_name().as_bytes().to_vec()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// A chain of links leading out: each link alone stays inside, `up2` leads two levels out.
fn chain(dir: &Path) {
    std::fs::create_dir_all(dir.join("a")).unwrap();
    symlink("..", dir.join("a/d0")).unwrap();
    symlink("a/d0/../..", dir.join("up2")).unwrap();
    symlink("a/b/c/d/e/f/g/../../../../../../..", dir.join("root")).unwrap();
    std::fs::write(dir.join("file"), b"x").unwrap();
}

/// `depth` nested `d` directories under `top` with a file at the bottom; returns the
/// bottom directory.
fn deep(top: &Path, depth: usize) -> PathBuf {
    let mut bottom = top.to_path_buf();
    for _ in 0..depth {
        bottom.push("d");
    }
    std::fs::create_dir_all(&bottom).unwrap();
    std::fs::write(bottom.join("f"), b"bottom").unwrap();
    bottom
}

#[tokio::test]
async fn the_link_chain_is_refused_both_ways_with_the_exact_text() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);
    let host = Scratch::new("chain");
    // Out: built by a command in the workspace.
    chain(&ws.join("src"));
    let target = host.join("out");
    let err = sync_out(&h, &lease, vec![SyncFile::directory("src", target.to_str().unwrap())])
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        RuntimeError::Driver(DriverError::EntryEscapesTarget { .. })
    ));
    assert_eq!(
        err.to_string(),
        format!(
            "Entry \"up2\" would be written outside the target \"{}\".",
            target.display()
        )
    );
    assert_eq!(names(host.path()), Vec::<Vec<u8>>::new());
    // In: the same tree on the host.
    chain(&host.join("src"));
    let err = sync_in(&h, &lease, vec![SyncFile::directory(host.s("src"), "in")])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Entry \"up2\" would be written outside the target \"in\"."
    );
    assert!(!ws.join("in").exists());
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_500_level_tree_round_trips_and_a_tree_past_the_bound_is_refused() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);
    let host = Scratch::new("deep");
    let bottom = deep(&host.join("deep"), 500);
    let r = sync_in(&h, &lease, vec![SyncFile::directory(host.s("deep"), "deep")])
        .await
        .unwrap();
    assert_eq!(r.operations[0].files_transferred, 1);
    let rel = bottom.strip_prefix(host.join("deep")).unwrap().join("f");
    assert_eq!(std::fs::read(ws.join("deep").join(&rel)).unwrap(), b"bottom");
    let back = host.join("back");
    sync_out(&h, &lease, vec![SyncFile::directory("deep", back.to_str().unwrap())])
        .await
        .unwrap();
    assert_eq!(std::fs::read(back.join(&rel)).unwrap(), b"bottom");

    deep(&host.join("too"), MAX_TREE_DEPTH + 1);
    let err = sync_in(&h, &lease, vec![SyncFile::directory(host.s("too"), "too")])
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Driver(DriverError::TreeTooDeep { .. })));
    assert_eq!(
        err.to_string(),
        format!(
            "Sync source \"{}\" is nested deeper than {MAX_TREE_DEPTH} directory levels.",
            host.s("too")
        )
    );
    assert!(!ws.join("too").exists());
    deep(&ws.join("made"), MAX_TREE_DEPTH + 1);
    let out = host.join("made-out");
    let err = sync_out(&h, &lease, vec![SyncFile::directory("made", out.to_str().unwrap())])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Sync source \"made\" is nested deeper than {MAX_TREE_DEPTH} directory levels.")
    );
    assert!(!out.exists());
    assert_eq!(names(host.path()).len(), 3, "deep, back and too only: no staging left");
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn wide_trees_and_names_that_are_not_utf8_round_trip() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let host = Scratch::new("wide");
    let src = host.join("src");
    std::fs::create_dir(&src).unwrap();
    for i in 0..5000 {
        std::fs::write(src.join(format!("f{i}")), b"").unwrap();
    }
    std::fs::write(src.join(OsStr::from_bytes(b"caf\xe9\xff")), b"latin").unwrap();
    let r = sync_in(&h, &lease, vec![SyncFile::directory(host.s("src"), "src")])
        .await
        .unwrap();
    assert_eq!(r.operations[0].files_transferred, 5001);
    let back = host.join("back");
    let r = sync_out(&h, &lease, vec![SyncFile::directory("src", back.to_str().unwrap())])
        .await
        .unwrap();
    assert_eq!(r.operations[0].files_transferred, 5001);
    assert_eq!(
        std::fs::read(back.join(OsStr::from_bytes(b"caf\xe9\xff"))).unwrap(),
        b"latin"
    );
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn escaping_and_malformed_paths_are_refused_with_exact_text() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);
    let host = Scratch::new("paths");
    std::fs::write(host.join("f"), b"x").unwrap();
    symlink("/etc", ws.join("escape")).unwrap();
    for bad in ["../x", "a/../../x", "/etc/evil", "a\0b", "", "escape/evil"] {
        let err = sync_in(&h, &lease, vec![SyncFile::file(host.s("f"), bad)])
            .await
            .unwrap_err();
        assert!(
            matches!(err, RuntimeError::Driver(DriverError::PathOutsideWorkspace { .. })),
            "{bad:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("Path \"{bad}\" is outside the lease workspace.")
        );
    }
    for bad in ["../etc/passwd", "/etc/passwd", "escape/passwd"] {
        let err = sync_out(&h, &lease, vec![SyncFile::file(bad, host.s("o").as_str())])
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("Path \"{bad}\" is outside the lease workspace.")
        );
    }
    for bad in ["relative/out", "/", "/tmp/../etc/x", "/tmp/a\0b"] {
        std::fs::write(ws.join("w"), b"w").unwrap();
        let err = sync_out(&h, &lease, vec![SyncFile::file("w", bad)]).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("Invalid input: host path {bad:?} must be absolute, without '..', and not the root")
        );
    }
    assert_eq!(names(host.path()), vec![b"f".to_vec()]);
    assert!(!Path::new("/etc/evil").exists());
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn hostile_execute_input_gets_typed_errors_or_runs_as_asked() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let refuse = |r: Result<envrt_runtime_core::ExecuteResult, RuntimeError>| r.unwrap_err().to_string();
    assert_eq!(
        refuse(
            h.runtime
                .execute(&lease.id, ExecuteRequest::new("echo", ["a\0b"]))
                .await
        ),
        "Invalid input: the command or an argument contains a NUL byte"
    );
    assert_eq!(
        refuse(
            h.runtime
                .execute(&lease.id, ExecuteRequest::new("ec\0ho", [""; 0]))
                .await
        ),
        "Invalid input: the command or an argument contains a NUL byte"
    );
    for name in ["A=B", ""] {
        let mut req = ExecuteRequest::new("true", [""; 0]);
        req.env.insert(name.into(), "v".into());
        assert_eq!(
            refuse(h.runtime.execute(&lease.id, req).await),
            format!("Invalid input: environment variable name {name:?} is not valid")
        );
    }
    let mut req = ExecuteRequest::new("true", [""; 0]);
    req.cwd = Some("../..".into());
    assert_eq!(
        refuse(h.runtime.execute(&lease.id, req).await),
        "Path \"../..\" is outside the lease workspace."
    );
    // LD_PRELOAD reaches the command (the local driver has no boundary to keep it from
    // anything else the command starts); a library that does not exist only warns.
    let mut req = ExecuteRequest::new("sh", ["-c", "echo \"$LD_PRELOAD\""]);
    req.env.insert("LD_PRELOAD".into(), "/nonexistent/evil.so".into());
    let out = h.execute(&lease, req).await;
    assert_eq!(
        (out.exit_code, out.stdout.as_slice()),
        (Some(0), &b"/nonexistent/evil.so\n"[..])
    );
    // argv and env past the kernel's limits: the spawn fails, reported like the shell.
    let huge = "x".repeat(200 * 1024);
    let out = h.execute(&lease, ExecuteRequest::new("true", [huge.as_str()])).await;
    assert_eq!(out.exit_code, Some(126));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "envrt: cannot execute true: Argument list too long (os error 7)\n"
    );
    let mut req = ExecuteRequest::new("true", [""; 0]);
    req.env.insert("BIG".into(), huge.clone().into());
    assert_eq!(h.execute(&lease, req).await.exit_code, Some(126));
    // Many legal arguments arrive intact; 64 MiB of stdin arrives whole; stdin a command
    // never reads does not hold the call.
    let mut argv: Vec<String> = vec!["-c".into(), "echo $#".into(), "sh".into()];
    argv.extend((0..5000).map(|i| format!("a{i}")));
    assert_eq!(
        h.execute(&lease, ExecuteRequest::new("sh", argv)).await.stdout,
        b"5000\n"
    );
    let mut req = ExecuteRequest::new("wc", ["-c"]);
    req.stdin = Some(vec![b'y'; 64 << 20]);
    assert_eq!(
        String::from_utf8_lossy(&h.execute(&lease, req).await.stdout).trim(),
        "67108864"
    );
    let mut req = ExecuteRequest::new("true", [""; 0]);
    req.stdin = Some(vec![0; 16 << 20]);
    assert_eq!(h.execute(&lease, req).await.exit_code, Some(0));
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn link_loops_round_trip_as_links() {
    // A loop resolves nowhere (the kernel says ELOOP), like a dangling link: it is no
    // escape, and a tree holding one syncs both ways unchanged.
    let h = Harness::new().await;
    let lease = h.lease().await;
    let host = Scratch::new("loops");
    let src = host.join("src");
    std::fs::create_dir_all(src.join("x.log")).unwrap();
    std::os::unix::fs::symlink("../b", src.join("x.log/a")).unwrap();
    std::os::unix::fs::symlink("x.log/a", src.join("b")).unwrap();
    std::os::unix::fs::symlink("self", src.join("self")).unwrap();
    sync_in(&h, &lease, vec![SyncFile::directory(host.s("src"), "loops")])
        .await
        .unwrap();
    let back = host.join("back");
    sync_out(&h, &lease, vec![SyncFile::directory("loops", back.to_str().unwrap())])
        .await
        .unwrap();
    for (link, text) in [("x.log/a", "../b"), ("b", "x.log/a"), ("self", "self")] {
        assert_eq!(
            std::fs::read_link(back.join(link)).unwrap(),
            std::path::Path::new(text),
            "{link}"
        );
    }
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}
