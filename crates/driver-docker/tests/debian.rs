//! The Docker driver in a real Debian userland (`envrt-debian:bookworm`, built with
//! debootstrap by scripts/docker-debian-image.sh): the shell is dash, not busybox, and
//! python3, git and patch are Debian's. What an agent runs there works through the driver.

mod common;

use envrt_runtime_core::{ExecuteRequest, LeasePolicy, SyncFile, SyncOperation};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_git_and_patch_run_in_the_debian_image_and_a_patched_file_syncs_out() {
    let Some(image) = envrt_test_support::docker::debian_image_or_skip() else {
        return;
    };
    let h = harness_or_skip!();
    common::bounded(180, async {
        let lease = h.lease(json!({ "image": image }), LeasePolicy::Ephemeral).await;
        let host = tempfile::tempdir().unwrap();
        let repo = host.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::write(repo.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
        std::fs::write(
            repo.join("fix.patch"),
            "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n",
        )
        .unwrap();
        let op = |files| {
            vec![SyncOperation {
                operation_id: "debian".into(),
                files,
                post_upload_commands: Vec::new(),
            }]
        };
        h.runtime
            .sync_in(
                &lease.id,
                &op(vec![SyncFile::directory(repo.to_str().unwrap(), "repo")]),
            )
            .await
            .unwrap();
        let run = |argv: &[&str]| {
            let mut request = ExecuteRequest::new(argv[0], argv[1..].iter().copied());
            request.cwd = Some("repo".into());
            let runtime = &h.runtime;
            let lease = lease.id.clone();
            async move { runtime.execute(&lease, request).await.unwrap() }
        };
        // -B: no byte-code cache, which the patch (same size, same second) would not
        // invalidate.
        let r = run(&["python3", "-B", "-c", "import calc; print(calc.add(2, 3))"]).await;
        assert_eq!(
            (r.exit_code, String::from_utf8_lossy(&r.stdout).trim()),
            (Some(0), "-1")
        );
        let r = run(&["patch", "-p1", "-i", "fix.patch"]).await;
        assert_eq!(r.exit_code, Some(0), "{}", String::from_utf8_lossy(&r.stderr));
        let r = run(&["python3", "-B", "-c", "import calc; print(calc.add(2, 3))"]).await;
        assert_eq!(String::from_utf8_lossy(&r.stdout).trim(), "5");
        let r = run(&["git", "init", "-q", "."]).await;
        assert_eq!(r.exit_code, Some(0), "{}", String::from_utf8_lossy(&r.stderr));
        let r = run(&["git", "status", "--porcelain"]).await;
        assert_eq!(String::from_utf8_lossy(&r.stdout), "?? calc.py\n?? fix.patch\n");
        let r = run(&["sh", "-c", "readlink -f /bin/sh"]).await;
        assert_eq!(String::from_utf8_lossy(&r.stdout).trim(), "/usr/bin/dash");
        let out = host.path().join("out");
        h.runtime
            .sync_out(&lease.id, &op(vec![SyncFile::directory("repo", out.to_str().unwrap())]))
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(out.join("calc.py")).unwrap(),
            "def add(a, b):\n    return a + b\n"
        );
        assert!(out.join(".git/HEAD").is_file());
    })
    .await;
    h.finish().await;
}
