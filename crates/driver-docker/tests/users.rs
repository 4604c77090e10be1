//! Who a request may run as on a real engine: only the environment's configured `user`
//! unless `allowedUsers` lists more, and a malformed user is refused before any exec.

mod common;

use envrt_runtime_core::{DriverError, ExecuteRequest, LeasePolicy, RuntimeError};
use serde_json::json;

fn as_user(user: &str) -> ExecuteRequest {
    let mut request = ExecuteRequest::new("sh", ["-c", "echo $(id -u):$(id -g)"]);
    request.user = Some(user.into());
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_runs_only_as_the_configured_user_unless_allowed_users_lists_it() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.lease(json!({"user": "65534:65534"}), LeasePolicy::Ephemeral).await;
        let r = h.runtime.execute(&lease.id, as_user("65534:65534")).await.unwrap();
        assert_eq!(r.stdout, b"65534:65534\n");
        for user in ["0", "root", "0:0", "65534"] {
            let err = h.runtime.execute(&lease.id, as_user(user)).await.unwrap_err();
            assert!(
                matches!(&err, RuntimeError::Driver(DriverError::UserRefused { .. })),
                "{err:?}"
            );
            assert_eq!(
                err.to_string(),
                format!("Cannot run as user \"{user}\": the environment config \"allowedUsers\" does not list it.")
            );
        }
        let allowing = h
            .lease(
                json!({"user": "65534:65534", "allowedUsers": ["0"]}),
                LeasePolicy::Ephemeral,
            )
            .await;
        let r = h.runtime.execute(&allowing.id, as_user("0")).await.unwrap();
        assert_eq!(r.stdout, b"0:0\n");
        let err = h.runtime.execute(&allowing.id, as_user("0:0")).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "Cannot run as user \"0:0\": the environment config \"allowedUsers\" does not list it."
        );
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_user_is_refused_even_when_listed() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let malformed = ["0:0:0", ":0", "0:", "", "root\n", "a b"];
        let lease = h
            .lease(json!({"allowedUsers": malformed}), LeasePolicy::Ephemeral)
            .await;
        for user in malformed {
            let err = h.runtime.execute(&lease.id, as_user(user)).await.unwrap_err();
            assert!(
                matches!(&err, RuntimeError::Driver(DriverError::UserRefused { .. })),
                "{user:?}: {err:?}"
            );
            assert_eq!(
                err.to_string(),
                format!("Cannot run as user \"{user}\": the container takes UID, UID:GID, NAME or NAME:GROUP."),
            );
        }
    })
    .await;
    h.finish().await;
}
