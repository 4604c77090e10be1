//! Hostile input against a real container: link chains on sync out, names
//! that are not UTF-8, deep and wide trees, escapes, NUL bytes, odd variables and huge
//! input. Each case is a clear typed error or the right behaviour; nothing is written
//! outside the target, nothing hangs.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use common::bounded;
use envrt_runtime_core::tree::MAX_TREE_DEPTH;
use envrt_runtime_core::{
    DriverError, ExecuteRequest, Lease, LeaseStatus, RuntimeError, SyncFile, SyncOperation, SyncResult,
};

fn op(files: Vec<SyncFile>) -> Vec<SyncOperation> {
    vec![SyncOperation {
        operation_id: "op".into(),
        files,
        post_upload_commands: Vec::new(),
    }]
}

async fn sync_in(h: &common::Harness, lease: &Lease, files: Vec<SyncFile>) -> Result<SyncResult, RuntimeError> {
    h.runtime.sync_in(&lease.id, &op(files)).await
}

async fn sync_out(h: &common::Harness, lease: &Lease, files: Vec<SyncFile>) -> Result<SyncResult, RuntimeError> {
    h.runtime.sync_out(&lease.id, &op(files)).await
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Names directly in `dir`, sorted.
fn names(dir: &Path) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = std::fs::read_dir(dir)
        .map(|r| r.flatten().map(|e| e.file_name().as_bytes().to_vec()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// `mkdir -p` of `depth` nested `d` directories, with a file at the bottom, made inside
/// the container.
fn deep_script(root: &str, depth: usize) -> String {
    format!(
        "set -e; p={root}; i=0; while [ $i -lt {depth} ]; do p=$p/d; i=$((i+1)); done; mkdir -p $p; echo bottom > $p/f"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_chain_built_in_the_container_is_refused_on_sync_out_and_nothing_lands() {
    let h = harness_or_skip!();
    bounded(120, async {
        let lease = h.default_lease().await;
        let r = h
            .sh(
                &lease,
                "mkdir -p src/a && ln -s .. src/a/d0 && ln -s a/d0/../.. src/up2 && \
                 ln -s a/b/c/d/e/f/g/../../../../../../.. src/root && echo x > src/file",
            )
            .await;
        assert_eq!(r.exit_code, Some(0));
        let host = tempfile::tempdir().unwrap();
        let target = host.path().join("out");
        let err = sync_out(&h, &lease, vec![SyncFile::directory("src", s(&target))])
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
        assert_eq!(
            names(host.path()),
            Vec::<Vec<u8>>::new(),
            "nothing landed, no staging left"
        );
        // Without the escaping link the same tree syncs, links as links.
        h.sh(&lease, "rm src/up2").await;
        sync_out(&h, &lease, vec![SyncFile::directory("src", s(&target))])
            .await
            .unwrap();
        assert_eq!(std::fs::read_link(target.join("a/d0")).unwrap(), Path::new(".."));
        // The same chain on the host is refused on the way in, before anything is sent.
        let src = host.path().join("chain");
        std::fs::create_dir_all(src.join("a")).unwrap();
        std::os::unix::fs::symlink("..", src.join("a/d0")).unwrap();
        std::os::unix::fs::symlink("a/d0/../..", src.join("up2")).unwrap();
        let err = sync_in(&h, &lease, vec![SyncFile::directory(s(&src), "in")])
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Entry \"up2\" would be written outside the target \"in\"."
        );
        // Excluded, the link is not sent and the rest lands.
        let mut file = SyncFile::directory(s(&src), "in");
        file.exclude = vec!["up2".into()];
        sync_in(&h, &lease, vec![file]).await.unwrap();
        let r = h.sh(&lease, "ls -A in; readlink in/a/d0").await;
        assert_eq!(String::from_utf8_lossy(&r.stdout), "a\n..\n");
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_are_not_utf8_survive_sync_in_and_out_byte_for_byte() {
    let h = harness_or_skip!();
    bounded(120, async {
        let lease = h.default_lease().await;
        let host = tempfile::tempdir().unwrap();
        let src = host.path().join("src");
        std::fs::create_dir(&src).unwrap();
        let odd = OsStr::from_bytes(b"caf\xe9-\xff\xfe");
        std::fs::write(src.join(odd), b"latin-1").unwrap();
        std::fs::create_dir(src.join(OsStr::from_bytes(b"dir\x80"))).unwrap();
        std::fs::write(src.join(OsStr::from_bytes(b"dir\x80/in\xc3")), b"deep").unwrap();
        let r = sync_in(&h, &lease, vec![SyncFile::directory(s(&src), "in")])
            .await
            .unwrap();
        assert_eq!(r.operations[0].files_transferred, 2);
        // In the container, under the exact bytes.
        let r = h
            .sh(
                &lease,
                "cat \"in/$(printf 'caf\\351-\\377\\376')\" \"in/$(printf 'dir\\200/in\\303')\"",
            )
            .await;
        assert_eq!(r.stdout, b"latin-1deep");
        // A name made in the container comes back as its bytes.
        h.sh(&lease, "printf x > \"in/$(printf 'made\\351')\"").await;
        let back = host.path().join("back");
        sync_out(&h, &lease, vec![SyncFile::directory("in", s(&back))])
            .await
            .unwrap();
        assert_eq!(
            names(&back),
            vec![b"caf\xe9-\xff\xfe".to_vec(), b"dir\x80".to_vec(), b"made\xe9".to_vec()]
        );
        assert_eq!(
            std::fs::read(back.join(OsStr::from_bytes(b"dir\x80/in\xc3"))).unwrap(),
            b"deep"
        );
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_trees_round_trip_and_past_the_bound_are_refused_both_ways() {
    let h = harness_or_skip!();
    bounded(240, async {
        let lease = h.default_lease().await;
        let host = tempfile::tempdir().unwrap();
        // 500 levels: in and back out.
        let deep = host.path().join("deep");
        let mut bottom = deep.clone();
        for _ in 0..500 {
            bottom.push("d");
        }
        std::fs::create_dir_all(&bottom).unwrap();
        std::fs::write(bottom.join("f"), b"bottom").unwrap();
        sync_in(&h, &lease, vec![SyncFile::directory(s(&deep), "deep")])
            .await
            .unwrap();
        let back = host.path().join("back");
        let r = sync_out(&h, &lease, vec![SyncFile::directory("deep", s(&back))])
            .await
            .unwrap();
        assert_eq!(r.operations[0].files_transferred, 1);
        assert_eq!(
            std::fs::read(back.join(bottom.strip_prefix(&deep).unwrap()).join("f")).unwrap(),
            b"bottom"
        );

        // Past the bound on the host: refused before anything is sent.
        let too_deep = host.path().join("too");
        let mut bottom = too_deep.clone();
        for _ in 0..=MAX_TREE_DEPTH {
            bottom.push("d");
        }
        std::fs::create_dir_all(&bottom).unwrap();
        let err = sync_in(&h, &lease, vec![SyncFile::directory(s(&too_deep), "too")])
            .await
            .unwrap_err();
        assert!(matches!(err, RuntimeError::Driver(DriverError::TreeTooDeep { .. })));
        assert_eq!(
            err.to_string(),
            format!(
                "Sync source \"{}\" is nested deeper than {MAX_TREE_DEPTH} directory levels.",
                too_deep.display()
            )
        );
        let r = h.sh(&lease, "ls -A").await;
        assert_eq!(r.stdout, b"deep\n", "nothing of the refused tree landed");

        // Past the bound in the container: refused on the way out, nothing lands.
        let r = h.sh(&lease, &deep_script("made", MAX_TREE_DEPTH + 1)).await;
        assert_eq!(r.exit_code, Some(0), "{}", String::from_utf8_lossy(&r.stderr));
        let out = host.path().join("made-out");
        let err = sync_out(&h, &lease, vec![SyncFile::directory("made", s(&out))])
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("Sync source \"made\" is nested deeper than {MAX_TREE_DEPTH} directory levels.")
        );
        assert!(!out.exists());
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wide_tree_round_trips_with_exact_counts() {
    let h = harness_or_skip!();
    bounded(240, async {
        let lease = h.default_lease().await;
        let host = tempfile::tempdir().unwrap();
        let wide = host.path().join("wide");
        std::fs::create_dir(&wide).unwrap();
        for i in 0..3000 {
            std::fs::write(wide.join(format!("f{i}")), i.to_string()).unwrap();
        }
        let r = sync_in(&h, &lease, vec![SyncFile::directory(s(&wide), "wide")])
            .await
            .unwrap();
        assert_eq!(r.operations[0].files_transferred, 3000);
        let back = host.path().join("back");
        let r = sync_out(&h, &lease, vec![SyncFile::directory("wide", s(&back))])
            .await
            .unwrap();
        assert_eq!(r.operations[0].files_transferred, 3000);
        assert_eq!(std::fs::read(back.join("f2999")).unwrap(), b"2999");
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escaping_paths_are_refused_with_exact_text_and_nothing_is_written() {
    let h = harness_or_skip!();
    bounded(120, async {
        let lease = h.default_lease().await;
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("f"), b"x").unwrap();
        let f = host.path().join("f");
        // Absolute paths elsewhere in the container are accepted (tests/user_paths_and_modes.rs).
        for bad in ["../x", "a/../../x", "/workspace/../etc/evil", "a\0b", ""] {
            let err = sync_in(&h, &lease, vec![SyncFile::file(s(&f), bad)]).await.unwrap_err();
            assert!(
                matches!(err, RuntimeError::Driver(DriverError::PathOutsideWorkspace { .. })),
                "{bad:?}"
            );
            assert_eq!(
                err.to_string(),
                format!("Path \"{bad}\" is outside the lease workspace.")
            );
        }
        for bad in ["../etc/passwd", "x/../../etc"] {
            let err = sync_out(&h, &lease, vec![SyncFile::file(bad, s(&host.path().join("o")))])
                .await
                .unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("Path \"{bad}\" is outside the lease workspace.")
            );
        }
        let err = sync_out(&h, &lease, vec![SyncFile::file("f", "")]).await.unwrap_err();
        assert_eq!(err.to_string(), "Invalid input: A sync target path is empty.");
        // A link in the workspace that leads elsewhere in the container is followed there
        // by the engine: the container's file, never the host's.
        h.sh(&lease, "ln -s /etc escape && echo envrt-container >> /etc/passwd")
            .await;
        sync_out(
            &h,
            &lease,
            vec![SyncFile::file("escape/passwd", s(&host.path().join("o")))],
        )
        .await
        .unwrap();
        let copied = std::fs::read_to_string(host.path().join("o")).unwrap();
        assert!(copied.ends_with("envrt-container\n"), "{copied}");
        assert_eq!(names(host.path()), vec![b"f".to_vec(), b"o".to_vec()]);
        let r = h.sh(&lease, "ls -A /etc | grep -c evil; ls -A").await;
        assert_eq!(String::from_utf8_lossy(&r.stdout), "0\nescape\n");
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    })
    .await;
    h.finish().await;
}

/// Links on the way are resolved by the engine inside the container, for sync in, sync out
/// and a command's cwd alike: the container is the boundary, so a link that leads out of
/// the workspace reaches the container's own file system, never the host's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_on_the_way_are_resolved_inside_the_container_for_every_path_checked() {
    let h = harness_or_skip!();
    bounded(180, async {
        let lease = h.default_lease().await;
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("f"), b"x").unwrap();
        let f = host.path().join("f");
        h.sh(
            &lease,
            "mkdir -p a/b/real && echo in > a/b/real/g && ln -s real a/b/inside && ln -s /etc a/b/out",
        )
        .await;
        // Inside: plain deep paths (missing parts included) and a link that stays inside.
        for fine in ["a/b/real/new/deeper/g2", "a/b/inside/g3"] {
            sync_in(&h, &lease, vec![SyncFile::file(s(&f), fine)]).await.unwrap();
        }
        let r = sync_out(
            &h,
            &lease,
            vec![SyncFile::file("a/b/inside/g", s(&host.path().join("o")))],
        )
        .await
        .unwrap();
        assert_eq!(r.operations[0].files_transferred, 1);
        assert_eq!(std::fs::read(host.path().join("o")).unwrap(), b"in\n");
        let mut request = ExecuteRequest::new("pwd", [""; 0]);
        request.cwd = Some("a/b/inside".into());
        let r = h.runtime.execute(&lease.id, request).await.unwrap();
        assert_eq!(r.exit_code, Some(0));
        // Out of the workspace, through a link two levels down: into the container's /etc.
        sync_in(&h, &lease, vec![SyncFile::file(s(&f), "a/b/out/envrt-evil")])
            .await
            .unwrap();
        assert!(
            !std::path::Path::new("/etc/envrt-evil").exists(),
            "the host's /etc is never touched"
        );
        let r = sync_out(
            &h,
            &lease,
            vec![SyncFile::file("a/b/out/envrt-evil", s(&host.path().join("p")))],
        )
        .await
        .unwrap();
        assert_eq!(r.operations[0].files_transferred, 1);
        assert_eq!(std::fs::read(host.path().join("p")).unwrap(), b"x");
        let mut request = ExecuteRequest::new("pwd", [""; 0]);
        request.cwd = Some("a/b/out".into());
        let r = h.runtime.execute(&lease.id, request).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&r.stdout), "/etc\n");
        let r = h.sh(&lease, "cat /etc/envrt-evil; cat a/b/real/g3").await;
        assert_eq!(String::from_utf8_lossy(&r.stdout), "xx");
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_execute_input_is_refused_or_stays_inside_the_container() {
    let h = harness_or_skip!();
    bounded(180, async {
        let lease = h.default_lease().await;
        let invalid = |r: Result<_, RuntimeError>| r.map(drop).unwrap_err().to_string();
        let mut req = ExecuteRequest::new("echo", ["a\0b"]);
        assert_eq!(
            invalid(h.runtime.execute(&lease.id, req.clone()).await),
            "Invalid input: The command or an argument contains a NUL byte."
        );
        req = ExecuteRequest::new("", [""; 0]);
        assert_eq!(
            invalid(h.runtime.execute(&lease.id, req).await),
            "Invalid input: The command is empty."
        );
        for (name, shown) in [("A=B", "A=B"), ("", ""), ("X\0Y", "X\\0Y")] {
            let mut req = ExecuteRequest::new("true", [""; 0]);
            req.env.insert(name.into(), "v".into());
            assert_eq!(
                invalid(h.runtime.execute(&lease.id, req).await),
                format!("Invalid input: Environment variable name \"{shown}\" is not valid.")
            );
        }
        let mut req = ExecuteRequest::new("true", [""; 0]);
        req.env.insert("SECRET".into(), "a\0b".into());
        let text = invalid(h.runtime.execute(&lease.id, req).await);
        assert_eq!(
            text,
            "Invalid input: The value of environment variable \"SECRET\" contains a NUL byte."
        );

        // LD_PRELOAD and LD_DEBUG_OUTPUT reach the command, inside the container only:
        // not its PID 1, not the host (no file appears on the host).
        let marker = format!("/tmp/envrt-ld-debug-{}", uuid::Uuid::new_v4().simple());
        let mut req = ExecuteRequest::new(
            "sh",
            [
                "-c",
                "echo \"$LD_PRELOAD\"; tr '\\0' '\\n' < /proc/1/environ | grep -c LD_PRELOAD",
            ],
        );
        req.env.insert("LD_PRELOAD".into(), "/nonexistent/evil.so".into());
        req.env.insert("LD_DEBUG".into(), "all".into());
        req.env.insert("LD_DEBUG_OUTPUT".into(), marker.clone().into());
        let r = h.runtime.execute(&lease.id, req).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&r.stdout), "/nonexistent/evil.so\n0\n");
        assert!(!Path::new(&marker).exists(), "no process on the host saw the variables");
        assert!(std::fs::read_dir("/tmp").unwrap().flatten().all(|e| {
            !e.file_name()
                .to_string_lossy()
                .starts_with(marker.trim_start_matches("/tmp/"))
        }));

        // 32 MiB of stdin arrives whole.
        let mut req = ExecuteRequest::new("wc", ["-c"]);
        req.stdin = Some(vec![b'x'; 32 << 20]);
        let r = h.runtime.execute(&lease.id, req).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&r.stdout).trim(), (32u64 << 20).to_string());
        // Stdin to a command that never reads it does not hold the call.
        let mut req = ExecuteRequest::new("true", [""; 0]);
        req.stdin = Some(vec![0u8; 8 << 20]);
        assert_eq!(h.runtime.execute(&lease.id, req).await.unwrap().exit_code, Some(0));
        // A very large (but legal) argv arrives intact.
        let args: Vec<String> = (0..2000).map(|i| format!("arg-{i}-{}", "y".repeat(100))).collect();
        let mut argv = vec!["-c".to_owned(), "echo $#".to_owned(), "sh".to_owned()];
        argv.extend(args);
        let r = h
            .runtime
            .execute(&lease.id, ExecuteRequest::new("sh", argv))
            .await
            .unwrap();
        assert_eq!(r.stdout, b"2000\n");
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    })
    .await;
    h.finish().await;
}
