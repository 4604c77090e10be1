//! Issue 17's findings on a real engine: running as another user (the exec's `User`),
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
        let lease = h.default_lease().await;
        for (user, expected) in [
            ("nobody", "65534\n"),
            ("1234", "1234\n"),
            ("1234:2345", "1234 2345\n"),
            ("root", "0\n"),
        ] {
            let script = if user.contains(':') { "echo $(id -u) $(id -g)" } else { "id -u" };
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
