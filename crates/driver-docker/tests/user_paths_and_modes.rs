//! On a real engine: running as another user (the exec's `User`),
//! absolute paths anywhere in the container (the container is the boundary), and file
//! modes kept by `sync_out`.

mod common;

use std::os::unix::fs::PermissionsExt;

use envrt_runtime_core::{DriverError, ExecuteRequest, RuntimeError, SyncFile, SyncOperation};

fn ops(files: Vec<SyncFile>) -> Vec<SyncOperation> {
    vec![SyncOperation {
        operation_id: "op".into(),
        files,
        post_upload_commands: Vec::new(),
    }]
}

fn as_user(user: &str, script: &str) -> ExecuteRequest {
    let mut request = ExecuteRequest::new("sh", ["-c", script]);
    request.user = Some(user.into());
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_run_as_the_requested_user_and_an_unknown_one_is_refused() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        // Every user the test asks for is allowed (only the configured one is by default).
        let allowed = [
            "nobody",
            "1234",
            "1234:2345",
            "root",
            "envrt-no-such-user",
            "nobody:envrt-no-such-group",
        ];
        let lease = h
            .lease(
                serde_json::json!({"allowedUsers": allowed}),
                envrt_runtime_core::LeasePolicy::Ephemeral,
            )
            .await;
        for (user, expected) in [
            ("nobody", "65534\n"),
            ("1234", "1234\n"),
            ("1234:2345", "1234 2345\n"),
            ("root", "0\n"),
        ] {
            let script = if user.contains(':') {
                "echo $(id -u) $(id -g)"
            } else {
                "id -u"
            };
            let r = h.runtime.execute(&lease.id, as_user(user, script)).await.unwrap();
            assert_eq!(String::from_utf8_lossy(&r.stdout), expected, "{user}: {r:?}");
        }
        let err = h
            .runtime
            .execute(&lease.id, as_user("envrt-no-such-user", "true"))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, RuntimeError::Driver(DriverError::UserRefused { .. })),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "Cannot run as user \"envrt-no-such-user\": no such user in the container."
        );
        let err = h
            .runtime
            .execute(&lease.id, as_user("nobody:envrt-no-such-group", "true"))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Cannot run as user \"nobody:envrt-no-such-group\": no such group in the container."
        );
        h.runtime
            .release_lease(&lease.id, envrt_runtime_core::LeaseStatus::Released)
            .await
            .unwrap();
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_absolute_path_of_the_container_is_accepted_and_the_host_is_never_touched() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("f"), b"in the container").unwrap();
        let f = host.path().join("f").display().to_string();
        // A path that exists on neither side: after the copy it exists in the container only.
        let elsewhere = format!("/tmp/envrt-elsewhere-{}", uuid::Uuid::new_v4().simple());
        h.runtime
            .sync_in(&lease.id, &ops(vec![SyncFile::file(&f, format!("{elsewhere}/f"))]))
            .await
            .unwrap();
        assert!(!std::path::Path::new(&elsewhere).exists(), "written on the host");
        let mut request = ExecuteRequest::new("sh", ["-c", "pwd; cat f"]);
        request.cwd = Some(elsewhere.clone());
        let r = h.runtime.execute(&lease.id, request).await.unwrap();
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            format!("{elsewhere}\nin the container")
        );
        for cwd in ["/usr/bin", "/", "/tmp/"] {
            let mut request = ExecuteRequest::new("pwd", [""; 0]);
            request.cwd = Some(cwd.into());
            let r = h.runtime.execute(&lease.id, request).await.unwrap();
            let expected = if cwd == "/" {
                "/".to_owned()
            } else {
                cwd.trim_end_matches('/').to_owned()
            };
            assert_eq!(String::from_utf8_lossy(&r.stdout), format!("{expected}\n"));
        }
        // Out of the container's /etc: its file, not the host's.
        h.sh(&lease, "echo container-only > /etc/envrt-marker").await;
        let out = host.path().join("marker");
        h.runtime
            .sync_out(
                &lease.id,
                &ops(vec![SyncFile::file("/etc/envrt-marker", out.display().to_string())]),
            )
            .await
            .unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"container-only\n");
        // Still refused: `..`, the root as a target.
        for bad in ["../x", "/workspace/../etc/x"] {
            let err = h
                .runtime
                .sync_in(&lease.id, &ops(vec![SyncFile::file(&f, bad)]))
                .await
                .unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("Path \"{bad}\" is outside the lease workspace.")
            );
        }
        let err = h
            .runtime
            .sync_in(
                &lease.id,
                &ops(vec![SyncFile::directory(host.path().display().to_string(), "/")]),
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Invalid input: A sync target cannot be the root directory \"/\"."
        );
        let r = h.sh(&lease, "ls /bin/sh /etc/passwd >/dev/null && echo intact").await;
        assert_eq!(r.stdout, b"intact\n");
        h.runtime
            .release_lease(&lease.id, envrt_runtime_core::LeaseStatus::Released)
            .await
            .unwrap();
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_out_keeps_the_permission_bits_of_every_entry() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        h.sh(
            &lease,
            "mkdir -p t/d && echo a > t/x && echo b > t/d/y && echo c > t/s && \
             chmod 0751 t/x && chmod 0604 t/d/y && chmod 0750 t/d && chmod 0710 t && chmod 4755 t/s",
        )
        .await;
        let host = tempfile::tempdir().unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        for follow in [false, true] {
            let out = host.path().join(format!("out-{follow}"));
            let mut file = SyncFile::directory("t", out.display().to_string());
            file.follow_symlinks = Some(follow);
            h.runtime.sync_out(&lease.id, &ops(vec![file])).await.unwrap();
            let modes = [
                mode(&out),
                mode(&out.join("x")),
                mode(&out.join("d")),
                mode(&out.join("d/y")),
            ];
            assert_eq!(modes, [0o710, 0o751, 0o750, 0o604], "follow {follow}");
            // No set-uid file lands on the host from a container.
            assert_eq!(mode(&out.join("s")), 0o755, "follow {follow}");
            let single = host.path().join(format!("single-{follow}"));
            let mut file = SyncFile::file("t/x", single.display().to_string());
            file.follow_symlinks = Some(follow);
            h.runtime.sync_out(&lease.id, &ops(vec![file])).await.unwrap();
            assert_eq!(mode(&single), 0o751, "follow {follow}");
        }
        h.runtime
            .release_lease(&lease.id, envrt_runtime_core::LeaseStatus::Released)
            .await
            .unwrap();
    })
    .await;
    h.finish().await;
}
