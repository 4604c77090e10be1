//! Readiness on the local driver behind the runtime: an environment's readiness command
//! runs on every new lease before the acquire returns; a command that fails or runs past
//! its timeout fails the acquire with its exact text, and nothing of the half-made lease
//! is left (no workspace, no process), its record `failed` with `not_ready`.

mod common;

use common::{Harness, processes_with, unique_sleep};
use envrt_runtime_core::{AcquireRequest, Environment, LeaseStatus, Readiness, RuntimeError};

async fn with_readiness(h: &Harness, command: &[&str], timeout_ms: u64) {
    let mut environment = Environment::new("env-ready", "Ready", "local");
    environment.readiness = Some(Readiness {
        command: command.iter().map(|s| s.to_string()).collect(),
        timeout_ms,
    });
    h.runtime.put_environment(environment).await.unwrap();
}

/// The acquire's error, the lease id it names, and its text.
async fn refused(h: &Harness) -> (String, String) {
    match h.runtime.acquire_lease(AcquireRequest::new("env-ready", "acme")).await {
        Err(error @ RuntimeError::NotReady { .. }) => {
            let RuntimeError::NotReady { id, .. } = &error else {
                unreachable!()
            };
            (id.clone(), error.to_string())
        }
        other => panic!("expected a readiness refusal, got {other:?}"),
    }
}

async fn assert_nothing_left(h: &Harness, id: &str) {
    let record = h.runtime.lease(id).await.unwrap().expect("the record stays");
    assert_eq!(record.status, LeaseStatus::Failed);
    assert_eq!(record.failure_reason.as_deref(), Some("not_ready"));
    assert!(h.leftovers().is_empty(), "left: {:?}", h.leftovers());
}

#[tokio::test]
async fn a_lease_is_handed_out_only_after_its_readiness_command_succeeded() {
    let h = Harness::new().await;
    with_readiness(&h, &["sh", "-c", "echo warmed > ready-marker"], 30_000).await;
    let lease = h
        .runtime
        .acquire_lease(AcquireRequest::new("env-ready", "acme"))
        .await
        .unwrap();
    assert_eq!(lease.status, LeaseStatus::Active);
    let out = h.sh(&lease, "cat ready-marker").await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "warmed\n");
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_failing_readiness_command_fails_the_acquire_and_leaves_nothing() {
    let h = Harness::new().await;
    with_readiness(&h, &["sh", "-c", "exit 3"], 30_000).await;
    let (id, text) = refused(&h).await;
    assert_eq!(
        text,
        format!("Lease \"{id}\" is not ready: its readiness command exited with code 3.")
    );
    assert_nothing_left(&h, &id).await;
    h.finish();
}

#[tokio::test]
async fn a_readiness_command_past_its_timeout_is_killed_and_leaves_nothing() {
    let h = Harness::new().await;
    let nap = unique_sleep();
    with_readiness(&h, &["sleep", nap.as_str()], 300).await;
    let (id, text) = refused(&h).await;
    assert_eq!(
        text,
        format!("Lease \"{id}\" is not ready: its readiness command did not finish within 300 ms.")
    );
    assert_nothing_left(&h, &id).await;
    assert!(processes_with(&nap).is_empty(), "the readiness command was killed");
    h.finish();
}

#[tokio::test]
async fn a_bad_readiness_declaration_is_refused_when_stored() {
    let h = Harness::new().await;
    let mut environment = Environment::new("env-bad", "Bad", "local");
    environment.readiness = Some(Readiness {
        command: vec![],
        timeout_ms: 1000,
    });
    assert_eq!(
        h.runtime.put_environment(environment).await.unwrap_err().to_string(),
        "Invalid input: ready_command needs a program"
    );
    assert!(h.runtime.environment("env-bad").await.unwrap().is_none());
    h.finish();
}
