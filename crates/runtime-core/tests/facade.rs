//! The facade's order of checks and exact refusals, counted against a probe driver.

use std::sync::Arc;

use envrt_runtime_core::testkit::{ProbeDriver, ProbeShape};
use envrt_runtime_core::*;
use serde_json::json;

const COMPANY: &str = "acme";

async fn runtime_with(driver: Arc<ProbeDriver>) -> EnvironmentRuntime {
    let runtime = EnvironmentRuntime::new();
    let key = driver.key().to_owned();
    runtime.register_driver(driver);
    runtime
        .put_environment(Environment::new("env", "Probe env", key))
        .await
        .unwrap();
    runtime
}

async fn lease(runtime: &EnvironmentRuntime, policy: LeasePolicy) -> Lease {
    let mut request = AcquireRequest::new("env", COMPANY);
    request.policy = policy;
    request.run_id = Some("run-1".into());
    runtime.acquire_lease(request).await.unwrap()
}

fn probe(shape: ProbeShape, declaration: Option<CapabilityDeclaration>) -> Arc<ProbeDriver> {
    Arc::new(ProbeDriver::new("probe", shape, declaration))
}

fn declare_duplex() -> CapabilityDeclaration {
    CapabilityDeclaration {
        duplex_command_stream: Some(true),
        ..Default::default()
    }
}

fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn every_missing_method_has_its_exact_refusal_and_never_reaches_the_driver() {
    let driver = probe(ProbeShape::default(), Some(declare_duplex()));
    let runtime = runtime_with(driver.clone()).await;
    let lease = lease(&runtime, LeasePolicy::ReuseByEnvironment).await;
    let id = lease.id.as_str();
    let before = driver.operation_calls();

    let cases: Vec<(RuntimeError, &str)> = vec![
        (
            runtime.resume_lease(id).await.unwrap_err(),
            "Environment driver \"probe\" does not support lease resume.",
        ),
        (
            runtime.destroy_lease(id).await.unwrap_err(),
            "Environment driver \"probe\" does not support lease destroy.",
        ),
        (
            runtime
                .realize_workspace(id, &WorkspaceRequest::default())
                .await
                .unwrap_err(),
            "Environment driver \"probe\" does not support workspace realization.",
        ),
        (
            runtime
                .execute(id, ExecuteRequest::new("true", Vec::<String>::new()))
                .await
                .unwrap_err(),
            "Environment driver \"probe\" does not support command execution.",
        ),
        (
            runtime.sync_in(id, &[]).await.unwrap_err(),
            "Environment driver \"probe\" does not support native file sync.",
        ),
        (
            runtime.sync_out(id, &[]).await.unwrap_err(),
            "Environment driver \"probe\" does not support native file sync.",
        ),
        (
            runtime.open_duplex_channel(id, &argv(&["cat"])).await.err().unwrap(),
            "Environment driver \"probe\" does not support duplex channels.",
        ),
    ];
    for (error, text) in &cases {
        assert_eq!(error.to_string(), *text);
    }
    assert!(matches!(
        cases[0].0,
        RuntimeError::Unsupported {
            operation: UnsupportedOperation::Resume,
            ..
        }
    ));
    assert!(matches!(
        cases[1].0,
        RuntimeError::Unsupported {
            operation: UnsupportedOperation::Destroy,
            ..
        }
    ));
    assert!(matches!(
        cases[2].0,
        RuntimeError::Unsupported {
            operation: UnsupportedOperation::Realize,
            ..
        }
    ));
    assert!(matches!(
        cases[3].0,
        RuntimeError::Unsupported {
            operation: UnsupportedOperation::Execute,
            ..
        }
    ));
    assert!(matches!(
        cases[4].0,
        RuntimeError::Unsupported {
            operation: UnsupportedOperation::Sync,
            ..
        }
    ));
    assert!(matches!(
        cases[6].0,
        RuntimeError::Unsupported {
            operation: UnsupportedOperation::Duplex,
            ..
        }
    ));
    assert_eq!(driver.operation_calls(), before, "a refusal reached the driver");
    assert!(!runtime.supports_sync(id).await);
}

#[tokio::test]
async fn an_unknown_key_is_reported_before_a_missing_method() {
    let driver = probe(ProbeShape::default(), None);
    let runtime = runtime_with(driver.clone()).await;
    let mut lease = lease(&runtime, LeasePolicy::Ephemeral).await;
    lease.metadata.insert("driver".into(), json!("ghost"));
    runtime.store().put_lease(&lease).await.unwrap();
    let text = "Environment driver \"ghost\" is not registered in the environment runtime yet.";
    let id = lease.id.as_str();
    let errors = vec![
        runtime.resume_lease(id).await.unwrap_err(),
        runtime.destroy_lease(id).await.unwrap_err(),
        runtime
            .realize_workspace(id, &WorkspaceRequest::default())
            .await
            .unwrap_err(),
        runtime.execute(id, ExecuteRequest::default()).await.unwrap_err(),
        runtime.sync_in(id, &[]).await.unwrap_err(),
        runtime.sync_out(id, &[]).await.unwrap_err(),
        runtime.open_duplex_channel(id, &argv(&["cat"])).await.err().unwrap(),
        runtime.release_lease(id, LeaseStatus::Released).await.unwrap_err(),
    ];
    for error in errors {
        assert!(matches!(&error, RuntimeError::DriverNotRegistered { key } if key == "ghost"));
        assert_eq!(error.to_string(), text);
    }
    assert_eq!(runtime.resolve_capabilities(id).await.unwrap(), None);
    assert!(!runtime.supports_sync(id).await);
}

#[tokio::test]
async fn acquire_checks_the_key_then_the_environment_status_before_the_driver() {
    let driver = probe(ProbeShape::full(), None);
    let runtime = runtime_with(driver.clone()).await;
    let mut archived = Environment::new("old", "Old env", "probe");
    archived.status = EnvironmentStatus::Archived;
    runtime.put_environment(archived).await.unwrap();
    let err = runtime
        .acquire_lease(AcquireRequest::new("old", COMPANY))
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::EnvironmentNotActive { .. }));
    assert_eq!(err.to_string(), "Environment \"Old env\" is not active.");
    assert_eq!(driver.calls("acquire_lease"), 0);

    let mut ghost = Environment::new("ghost-env", "Ghost env", "ghost");
    ghost.status = EnvironmentStatus::Archived;
    runtime.put_environment(ghost).await.unwrap();
    let err = runtime
        .acquire_lease(AcquireRequest::new("ghost-env", COMPANY))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Environment driver \"ghost\" is not registered in the environment runtime yet."
    );
    let err = runtime
        .acquire_lease(AcquireRequest::new("missing", COMPANY))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "Environment \"missing\" was not found.");
}

#[tokio::test]
async fn a_missing_duplex_method_is_reported_before_the_capability_refusal() {
    let driver = probe(ProbeShape::default(), None);
    driver.set_fail_capabilities(true);
    let runtime = runtime_with(driver.clone()).await;
    let lease = lease(&runtime, LeasePolicy::Ephemeral).await;
    let err = runtime
        .open_duplex_channel(&lease.id, &argv(&["cat"]))
        .await
        .err()
        .unwrap();
    assert!(matches!(
        err,
        RuntimeError::Unsupported {
            operation: UnsupportedOperation::Duplex,
            ..
        }
    ));
    assert_eq!(driver.calls("resolve_capabilities"), 0);
}

#[tokio::test]
async fn a_capability_refusal_never_reaches_the_driver() {
    // Duplex exists but is opt-in and undeclared.
    let driver = probe(ProbeShape::full(), None);
    let runtime = runtime_with(driver.clone()).await;
    let lease = lease(&runtime, LeasePolicy::Ephemeral).await;
    let err = runtime
        .open_duplex_channel(&lease.id, &argv(&["cat"]))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, RuntimeError::DuplexNotGranted { cause: None }));
    assert_eq!(
        err.to_string(),
        "Sandbox lease does not grant the duplex command stream capability."
    );
    assert_eq!(driver.calls("open_duplex_channel"), 0);
    assert_eq!(driver.calls("resolve_capabilities"), 1);
}

#[tokio::test]
async fn a_failing_capability_resolution_fails_closed() {
    let driver = probe(ProbeShape::full(), Some(declare_duplex()));
    let runtime = runtime_with(driver.clone()).await;
    let lease = lease(&runtime, LeasePolicy::Ephemeral).await;
    driver.set_fail_capabilities(true);
    let err = runtime
        .open_duplex_channel(&lease.id, &argv(&["cat"]))
        .await
        .err()
        .unwrap();
    match &err {
        RuntimeError::DuplexNotGranted { cause: Some(cause) } => {
            assert_eq!(cause.to_string(), "probe capability resolution failed")
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "Sandbox lease does not grant the duplex command stream capability."
    );
    assert_eq!(driver.calls("open_duplex_channel"), 0);
    // Sync and resume fail closed too.
    assert!(matches!(
        runtime.sync_in(&lease.id, &[]).await.unwrap_err(),
        RuntimeError::Unsupported {
            operation: UnsupportedOperation::Sync,
            ..
        }
    ));
    assert_eq!(driver.calls("sync_in"), 0);
    // Granted again: the channel opens and echoes.
    driver.set_fail_capabilities(false);
    let channel = runtime.open_duplex_channel(&lease.id, &argv(&["cat"])).await.unwrap();
    channel.write(b"hi").await.unwrap();
    channel.close_input().await.unwrap();
    assert_eq!(channel.read().await.unwrap(), Some(b"hi".to_vec()));
    assert_eq!(channel.read().await.unwrap(), None);
    assert_eq!(channel.wait().await.unwrap().exit_code, Some(0));
}

#[tokio::test]
async fn narrowing_refuses_sync_and_resume_on_the_lease() {
    let driver = probe(ProbeShape::full(), None);
    let runtime = runtime_with(driver.clone()).await;
    let mut request = AcquireRequest::new("env", COMPANY);
    request.metadata.insert("backend".into(), json!("job"));
    let job = runtime.acquire_lease(request).await.unwrap();
    assert_eq!(
        runtime.sync_in(&job.id, &[]).await.unwrap_err().to_string(),
        "Environment driver \"probe\" does not support native file sync."
    );
    assert!(!runtime.supports_sync(&job.id).await);
    let ephemeral = lease(&runtime, LeasePolicy::Ephemeral).await;
    assert_eq!(
        runtime.resume_lease(&ephemeral.id).await.unwrap_err().to_string(),
        "Environment driver \"probe\" does not support lease resume."
    );
    assert_eq!(driver.calls("sync_in") + driver.calls("resume_lease"), 0);
    assert!(runtime.supports_sync(&ephemeral.id).await);
}

#[tokio::test]
async fn release_statuses_retention_idempotency_and_cleanup_failure() {
    let driver = probe(ProbeShape::full(), None);
    let runtime = runtime_with(driver.clone()).await;
    let retained = lease(&runtime, LeasePolicy::RetainOnFailure).await;
    let released = runtime.release_lease(&retained.id, LeaseStatus::Failed).await.unwrap();
    assert_eq!(released.status, LeaseStatus::Retained);
    assert_eq!(released.cleanup_status, Some(CleanupStatus::Success));

    let plain = lease(&runtime, LeasePolicy::Ephemeral).await;
    let done = runtime.release_lease(&plain.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(done.status, LeaseStatus::Released);
    let calls = driver.calls("release_lease");
    let again = runtime.release_lease(&plain.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(again.status, LeaseStatus::Released);
    assert_eq!(driver.calls("release_lease"), calls, "a repeated release is a no-op");
    let err = runtime.execute(&plain.id, ExecuteRequest::default()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Lease \"{}\" is not active (status: released).", plain.id)
    );

    let failing = lease(&runtime, LeasePolicy::Ephemeral).await;
    driver.set_fail_release(true);
    let err = runtime
        .release_lease(&failing.id, LeaseStatus::Released)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "probe release failed");
    let stored = runtime.lease(&failing.id).await.unwrap().unwrap();
    assert_eq!(stored.status, LeaseStatus::PendingCleanup);
    assert_eq!(stored.cleanup_status, Some(CleanupStatus::Failed));
    assert_eq!(stored.failure_reason.as_deref(), Some("release_cleanup_failed"));
    driver.set_fail_release(false);
    let retried = runtime.release_lease(&failing.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(retried.status, LeaseStatus::Released);

    let err = runtime
        .release_lease(&failing.id, LeaseStatus::Active)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "A lease cannot be released with status \"active\"; use released, failed or expired."
    );
    let err = runtime.release_lease("nope", LeaseStatus::Released).await.unwrap_err();
    assert_eq!(err.to_string(), "Lease \"nope\" was not found.");
}

#[tokio::test]
async fn release_leases_releases_each_lease_of_a_run_in_isolation() {
    let good = Arc::new(ProbeDriver::new("good", ProbeShape::full(), None));
    let bad = Arc::new(ProbeDriver::new("bad", ProbeShape::full(), None));
    bad.set_fail_release(true);
    let runtime = EnvironmentRuntime::new();
    runtime.register_driver(good.clone());
    runtime.register_driver(bad.clone());
    runtime
        .put_environment(Environment::new("g", "G", "good"))
        .await
        .unwrap();
    runtime
        .put_environment(Environment::new("b", "B", "bad"))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for env in ["g", "b", "g"] {
        let mut request = AcquireRequest::new(env, COMPANY);
        request.run_id = Some("run-9".into());
        ids.push(runtime.acquire_lease(request).await.unwrap().id);
    }
    let mut other = AcquireRequest::new("g", COMPANY);
    other.run_id = Some("run-other".into());
    let other = runtime.acquire_lease(other).await.unwrap();

    let report = runtime.release_leases("run-9", LeaseStatus::Released).await.unwrap();
    assert_eq!(report.released.len(), 2);
    assert_eq!(report.failures.len(), 1);
    assert_eq!(report.failures[0].lease_id, ids[1]);
    assert_eq!(report.failures[0].error.to_string(), "probe release failed");
    assert_eq!(
        runtime.lease(&other.id).await.unwrap().unwrap().status,
        LeaseStatus::Active
    );
    assert_eq!(good.calls("release_lease"), 2);
}

#[tokio::test]
async fn a_later_registration_replaces_an_earlier_one() {
    let first = probe(ProbeShape::default(), None);
    let runtime = runtime_with(first.clone()).await;
    let second = probe(ProbeShape::full(), None);
    let replaced = runtime.register_driver(second.clone());
    assert!(replaced.is_some());
    assert_eq!(runtime.driver_keys(), vec!["probe".to_string()]);
    let lease = lease(&runtime, LeasePolicy::Ephemeral).await;
    let result = runtime
        .execute(&lease.id, ExecuteRequest::new("echo", ["a"]))
        .await
        .unwrap();
    assert_eq!(result.stdout, b"echo a");
    assert_eq!(first.calls("acquire_lease"), 0);
    assert_eq!(second.calls("execute"), 1);
}

#[tokio::test]
async fn acquire_writes_the_driver_key_and_resume_reactivates() {
    let driver = probe(ProbeShape::full(), None);
    let runtime = runtime_with(driver.clone()).await;
    let lease = lease(&runtime, LeasePolicy::ReuseByEnvironment).await;
    assert_eq!(lease.metadata["driver"], json!("probe"));
    assert_eq!(lease.provider.as_deref(), Some("probe"));
    assert_eq!(lease.status, LeaseStatus::Active);
    let snapshot = runtime.resolve_capabilities(&lease.id).await.unwrap().unwrap();
    assert!(snapshot.reusable_leases);
    let released = runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(released.status, LeaseStatus::Released);
    let resumed = runtime.resume_lease(&lease.id).await.unwrap();
    assert_eq!(resumed.status, LeaseStatus::Active);
    assert_eq!(resumed.provider_lease_id, lease.provider_lease_id);
    let destroyed = runtime.destroy_lease(&lease.id).await.unwrap();
    assert_eq!(destroyed.status, LeaseStatus::Released);
    assert_eq!(
        runtime.destroy_lease(&lease.id).await.unwrap().status,
        LeaseStatus::Released
    );
}
