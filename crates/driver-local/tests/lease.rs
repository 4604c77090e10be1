//! Lease life cycle of the local driver through the facade: workspaces, policies,
//! idempotency, resume, destroy, capabilities, realize and the duplex refusal.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{Harness, bounded, marker, survivors, unique_sleep};
use envrt_driver_local::{LocalConfig, LocalDriver};
use envrt_runtime_core::{
    EnvironmentDriver, ExecuteRequest, LeasePolicy, LeaseStatus, RuntimeError, UnsupportedOperation, WorkspaceRequest,
};

#[tokio::test]
async fn acquire_creates_a_private_workspace_and_release_removes_it_idempotently() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);
    assert_eq!(lease.provider.as_deref(), Some("local"));
    assert_eq!(lease.metadata["driver"], "local");
    assert_eq!(
        lease.provider_lease_id.as_deref(),
        Some(format!("lease-{}", lease.id).as_str())
    );
    assert_eq!(ws, h.root.join(format!("lease-{}", lease.id)));
    let mode = std::fs::metadata(&ws).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);

    let released = h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(released.status, LeaseStatus::Released);
    assert!(!ws.exists());
    // Again: a no-op that succeeds.
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    // The driver itself is idempotent too, even with the workspace gone.
    let ctx = envrt_runtime_core::LeaseContext {
        lease: released.clone(),
        environment: None,
    };
    h.driver
        .release_lease(&envrt_runtime_core::ReleaseInput {
            context: ctx.clone(),
            status: LeaseStatus::Released,
        })
        .await
        .unwrap();
    h.driver.as_destroy().unwrap().destroy_lease(&ctx).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn reuse_by_environment_keeps_the_workspace_and_resume_returns_it() {
    let h = Harness::new().await;
    let lease = h.lease_with(LeasePolicy::ReuseByEnvironment).await;
    let ws = h.workspace(&lease);
    std::fs::write(ws.join("kept.txt"), b"still here").unwrap();
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert!(ws.join("kept.txt").exists());

    // The facade resumes only an ended lease record; reopen it by resuming.
    let resumed = h.runtime.resume_lease(&lease.id).await.unwrap();
    assert_eq!(resumed.status, LeaseStatus::Active);
    assert_eq!(h.workspace(&resumed), ws);
    let out = h.run(&resumed, "cat", &["kept.txt"]).await;
    assert_eq!(out.stdout, b"still here");

    h.runtime.destroy_lease(&lease.id).await.unwrap();
    assert!(!ws.exists());
    h.runtime.destroy_lease(&lease.id).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn resume_of_a_vanished_workspace_reports_the_lease_gone() {
    let h = Harness::new().await;
    let lease = h.lease_with(LeasePolicy::ReuseByEnvironment).await;
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    std::fs::remove_dir_all(h.workspace(&lease)).unwrap();
    let ctx = envrt_runtime_core::LeaseContext {
        lease: h.runtime.lease(&lease.id).await.unwrap().unwrap(),
        environment: None,
    };
    assert!(
        h.driver
            .as_resume()
            .unwrap()
            .resume_lease(&ctx)
            .await
            .unwrap()
            .is_none()
    );
    let err = h.runtime.resume_lease(&lease.id).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Lease \"{}\" can no longer be resumed: its provider resource is gone.",
            lease.id
        )
    );
    h.finish();
}

#[tokio::test]
async fn retain_on_failure_keeps_only_failed_leases() {
    let h = Harness::new().await;
    let failed = h.lease_with(LeasePolicy::RetainOnFailure).await;
    let ok = h.lease_with(LeasePolicy::RetainOnFailure).await;
    let released = h.runtime.release_lease(&failed.id, LeaseStatus::Failed).await.unwrap();
    assert_eq!(released.status, LeaseStatus::Retained);
    assert!(h.workspace(&failed).is_dir());
    h.runtime.release_lease(&ok.id, LeaseStatus::Released).await.unwrap();
    assert!(!h.workspace(&ok).exists());
    h.runtime.destroy_lease(&failed.id).await.unwrap();
    assert!(!h.workspace(&failed).exists());
    h.finish();
}

#[tokio::test]
async fn capabilities_are_honest_and_duplex_is_refused_with_the_exact_text() {
    let h = Harness::new().await;
    let ephemeral = h.lease().await;
    let reuse = h.lease_with(LeasePolicy::ReuseByEnvironment).await;
    let caps = h.runtime.resolve_capabilities(&ephemeral.id).await.unwrap().unwrap();
    let json = serde_json::Value::Object(caps.to_json());
    assert_eq!(
        json,
        serde_json::json!({
            "reusableLeases": false,
            "nativeSyncIn": true,
            "nativeSyncOut": true,
            "persistentProcessSessions": true,
            "independentControlCommands": true,
            "incrementalSessionOutput": true,
            "concurrentSyncOperations": true,
            "duplexCommandStream": false,
            "runnerWebSocketIngress": false,
        })
    );
    let caps = h.runtime.resolve_capabilities(&reuse.id).await.unwrap().unwrap();
    assert!(caps.reusable_leases);
    assert!(h.runtime.supports_sync(&ephemeral.id).await);

    let err = match h.runtime.open_duplex_channel(&ephemeral.id, &["cat".to_string()]).await {
        Err(e) => e,
        Ok(_) => panic!("duplex must be refused"),
    };
    assert!(matches!(
        err,
        RuntimeError::Unsupported {
            operation: UnsupportedOperation::Duplex,
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        "Environment driver \"local\" does not support duplex channels."
    );

    // Resume is refused on an ephemeral lease (reusableLeases false there).
    let err = h.runtime.resume_lease(&ephemeral.id).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Environment driver \"local\" does not support lease resume."
    );

    h.runtime
        .release_lease(&ephemeral.id, LeaseStatus::Released)
        .await
        .unwrap();
    h.runtime.destroy_lease(&reuse.id).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn realize_returns_the_workspace_or_a_confined_directory() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);
    let realized = h
        .runtime
        .realize_workspace(&lease.id, &WorkspaceRequest::default())
        .await
        .unwrap();
    assert_eq!(realized.cwd, ws.to_string_lossy());
    let request = WorkspaceRequest {
        remote_path: Some("src/app".into()),
        ..Default::default()
    };
    let realized = h.runtime.realize_workspace(&lease.id, &request).await.unwrap();
    assert_eq!(realized.cwd, ws.join("src/app").to_string_lossy());
    assert!(ws.join("src/app").is_dir());

    std::os::unix::fs::symlink("/etc", ws.join("out")).unwrap();
    for bad in ["../x", "/etc", "out/ssl", "out"] {
        let request = WorkspaceRequest {
            remote_path: Some(bad.into()),
            ..Default::default()
        };
        let err = h.runtime.realize_workspace(&lease.id, &request).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("Path \"{bad}\" is outside the lease workspace.")
        );
    }
    assert!(!std::path::Path::new("/etc/ssl/x").exists());
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn release_kills_the_commands_a_lease_still_runs() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let nap = unique_sleep();
    let tag = marker("release");
    let runtime = &h.runtime;
    let script = format!("sleep {nap} & sleep {nap}; : {tag}");
    let execute = runtime.execute(&lease.id, ExecuteRequest::new("sh", ["-c", script.as_str()]));
    let release = async {
        // Wait (bounded) until the command runs, then release under it.
        for _ in 0..500 {
            if h.driver.running_commands(&lease.id) > 0 && !common::processes_with(&nap).is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    };
    let (result, ()) = bounded(async { tokio::join!(execute, release) }).await;
    let result = result.unwrap();
    assert_eq!(result.signal.as_deref(), Some("SIGKILL"));
    assert!(survivors(&nap).await.is_empty());
    assert!(survivors(&tag).await.is_empty());
    assert_eq!(h.driver.running_commands(&lease.id), 0);
    h.finish();
}

#[tokio::test]
async fn a_driver_root_is_created_private_and_bad_lease_ids_are_refused() {
    let base = common::Scratch::new("root");
    let root = base.join("nested/root");
    let driver = LocalDriver::new(LocalConfig {
        root: Some(root.clone()),
        ..Default::default()
    })
    .unwrap();
    assert!(root.is_dir());
    let err = driver.workspace_of("../escape").unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid input: lease id \"../escape\" cannot name a local workspace (allowed: ASCII letters, digits, '-' and '_')"
    );
    assert_eq!(driver.key(), "local");
    assert!(driver.as_duplex().is_none());
}

#[tokio::test]
async fn a_released_lease_runs_nothing_until_resumed_and_a_vanished_workspace_is_gone() {
    let h = Harness::new().await;
    let lease = h.lease_with(LeasePolicy::ReuseByEnvironment).await;
    let released = h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    // Straight to the driver (the facade refuses ended leases): a command that starts
    // after the release is killed at once, so nothing can outlive a release race.
    let context = envrt_runtime_core::LeaseContext {
        lease: released,
        environment: None,
    };
    let nap = unique_sleep();
    let execute = h.driver.as_execute().unwrap();
    let request = ExecuteRequest::new("sleep", [nap.as_str()]);
    let out = bounded(execute.execute(&context, request)).await.unwrap();
    assert_eq!(out.signal.as_deref(), Some("SIGKILL"));
    assert!(survivors(&nap).await.is_empty());

    let resumed = h.runtime.resume_lease(&lease.id).await.unwrap();
    assert_eq!(h.run(&resumed, "echo", &["back"]).await.stdout, b"back\n");

    std::fs::remove_dir_all(h.workspace(&resumed)).unwrap();
    let err = bounded(h.runtime.execute(&lease.id, ExecuteRequest::new("true", [""; 0])))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Lease \"{id}\" is lost: its provider resource \"lease-{id}\" is gone; release or destroy the lease to end it.",
            id = lease.id
        )
    );
    h.runtime.destroy_lease(&lease.id).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_root_owned_by_another_user_is_refused() {
    if nix::unistd::geteuid().as_raw() != 0 {
        // Only root can hand a directory to another user; the check is the same.
        eprintln!("skipped: needs root to chown");
        return;
    }
    let base = common::Scratch::new("owner");
    let root = base.join("foreign");
    std::fs::create_dir(&root).unwrap();
    std::os::unix::fs::chown(&root, Some(12345), Some(12345)).unwrap();
    let err = LocalDriver::new(LocalConfig {
        root: Some(root.clone()),
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Invalid input: workspace root {} is owned by another user",
            root.display()
        )
    );
}
