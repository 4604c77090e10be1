//! Leases as containers, against a real engine.

mod common;

use envrt_runtime_core::{
    CapabilityKey, DriverError, LeasePolicy, LeaseStatus, RuntimeError, SpawnRequest, WorkspaceRequest,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_makes_a_labelled_container_with_init_and_no_network() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        assert_eq!(lease.provider.as_deref(), Some("docker"));
        assert_eq!(lease.metadata["driver"], "docker");
        assert_eq!(lease.metadata["workspaceDir"], "/workspace");
        assert_eq!(lease.workspace(), Some("/workspace"), "the documented key");
        let id = lease.provider_lease_id.clone().unwrap();
        assert_eq!(
            h.driver.managed_containers().await.unwrap(),
            vec![(id.clone(), lease.id.clone())]
        );
        let labels = std::process::Command::new("docker")
            .args(["inspect", "-f", "{{json .Config.Labels}}", &id])
            .output()
            .unwrap();
        let labels: serde_json::Value = serde_json::from_slice(&labels.stdout).unwrap();
        assert_eq!(labels["envrt.lease-id"], lease.id.as_str());
        assert_eq!(
            labels["envrt.environment-id"],
            lease.environment_id.clone().unwrap().as_str()
        );
        assert_eq!(labels["envrt.company-id"], "acme");
        assert_eq!(labels["envrt.managed"], "true");
        let r = h
            .sh(&lease, "ps -o pid,args | grep -w '^ *1'; ls /sys/class/net; pwd")
            .await;
        let out = String::from_utf8_lossy(&r.stdout);
        assert!(out.contains("docker-init"), "{out}");
        assert!(out.contains("\nlo\n/workspace\n"), "{out}");
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        assert!(h.driver.managed_containers().await.unwrap().is_empty());
        // Idempotent, also when the container is already gone.
        h.runtime.destroy_lease(&lease.id).await.unwrap();
        h.runtime.destroy_lease(&lease.id).await.unwrap();
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_env_and_limits_are_applied() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h
            .lease(
                json!({"user": "65534:65534", "workingDir": "/home/work", "env": {"GREETING": "hi there"},
                       "memoryBytes": 67108864, "pidsLimit": 64}),
                LeasePolicy::Ephemeral,
            )
            .await;
        let r = h
            .sh(&lease, "id -u; pwd; echo \"$GREETING\"; touch f && echo writable; cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/memory/memory.limit_in_bytes")
            .await;
        assert_eq!(String::from_utf8_lossy(&r.stdout), "65534\n/home/work\nhi there\nwritable\n64\n67108864\n");
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_environment_configs_are_refused_and_leave_nothing() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let env = h.environment(json!({})).await;
        // No image at all.
        let mut config = serde_json::Map::new();
        config.insert("network".into(), "none".into());
        let id = format!("{env}-noimage");
        h.runtime
            .put_environment(envrt_runtime_core::Environment::new(&id, "No image", "docker").with_config(config))
            .await
            .unwrap();
        let err = h.runtime.acquire_lease(envrt_runtime_core::AcquireRequest::new(&id, "acme")).await.unwrap_err();
        assert!(matches!(err, RuntimeError::Driver(DriverError::InvalidInput { .. })));
        assert_eq!(
            err.to_string(),
            "Invalid input: Docker environment config needs \"image\": the name of an image present on the engine."
        );
        // An image the engine does not have.
        let env = h.environment(json!({"image": "envrt-no-such-image:never"})).await;
        let err = h.runtime.acquire_lease(envrt_runtime_core::AcquireRequest::new(&env, "acme")).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "Invalid input: Docker image \"envrt-no-such-image:never\" is not present on the engine at {} (the driver never pulls images).",
                h.driver.address()
            )
        );
        assert!(h.driver.managed_containers().await.unwrap().is_empty());
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reuse_by_environment_keeps_the_container_and_resume_restarts_it() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.lease(json!({}), LeasePolicy::ReuseByEnvironment).await;
        let caps = h.runtime.resolve_capabilities(&lease.id).await.unwrap().unwrap();
        assert!(caps.reusable_leases);
        h.sh(&lease, "echo kept > /workspace/mark").await;
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        let containers = h.driver.managed_containers().await.unwrap();
        assert_eq!(containers.len(), 1, "kept on release");
        let resumed = h.runtime.resume_lease(&lease.id).await.unwrap();
        assert_eq!(resumed.provider_lease_id, lease.provider_lease_id, "the same container");
        assert_eq!(resumed.status, LeaseStatus::Active);
        let r = h.sh(&resumed, "cat /workspace/mark").await;
        assert_eq!(r.stdout, b"kept\n");
        // Resume on a running container is fine too.
        h.runtime.resume_lease(&lease.id).await.unwrap();
        // A vanished container is reported as gone.
        h.driver.reap_orphans(&[]).await.unwrap();
        let err = h.runtime.resume_lease(&lease.id).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "Lease \"{}\" can no longer be resumed: its provider resource is gone.",
                lease.id
            )
        );
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retain_on_failure_keeps_a_failed_lease_and_destroy_removes_it() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.lease(json!({}), LeasePolicy::RetainOnFailure).await;
        let released = h.runtime.release_lease(&lease.id, LeaseStatus::Failed).await.unwrap();
        assert_eq!(released.status, LeaseStatus::Retained);
        assert_eq!(h.driver.managed_containers().await.unwrap().len(), 1);
        h.runtime.destroy_lease(&lease.id).await.unwrap();
        assert!(h.driver.managed_containers().await.unwrap().is_empty());
        // Released (not failed) under retain_on_failure: removed.
        let lease = h.lease(json!({}), LeasePolicy::RetainOnFailure).await;
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        assert!(h.driver.managed_containers().await.unwrap().is_empty());
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reap_orphans_removes_only_containers_no_active_lease_owns() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let keep = h.default_lease().await;
        let orphan = h.default_lease().await;
        let removed = h.driver.reap_orphans(std::slice::from_ref(&keep.id)).await.unwrap();
        assert_eq!(removed, vec![orphan.provider_lease_id.clone().unwrap()]);
        let left = h.driver.managed_containers().await.unwrap();
        assert_eq!(left, vec![(keep.provider_lease_id.clone().unwrap(), keep.id.clone())]);
        // Releasing the orphan's lease afterwards still succeeds.
        h.runtime
            .release_lease(&orphan.id, LeaseStatus::Released)
            .await
            .unwrap();
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_follow_the_declaration_and_the_config() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let caps = h.runtime.resolve_capabilities(&lease.id).await.unwrap().unwrap();
        for key in CapabilityKey::ALL {
            // No process group (`as_processes`) yet, so no `persistentProcessSessions`.
            let expected = !matches!(
                key,
                CapabilityKey::RunnerWebSocketIngress
                    | CapabilityKey::ReusableLeases
                    | CapabilityKey::PersistentProcessSessions
            );
            assert_eq!(caps.get(key), expected, "{key:?}");
        }
        let err = h
            .runtime
            .spawn(&lease.id, SpawnRequest::new(["true"]))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Environment driver \"docker\" does not support persistent process sessions."
        );
        let no_duplex = h.lease(json!({"duplex": false}), LeasePolicy::Ephemeral).await;
        let caps = h.runtime.resolve_capabilities(&no_duplex.id).await.unwrap().unwrap();
        assert!(!caps.duplex_command_stream);
        assert!(caps.native_sync_in && caps.incremental_session_output);
        let err = h
            .runtime
            .open_duplex_channel(&no_duplex.id, &["cat".to_string()])
            .await
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            "Sandbox lease does not grant the duplex command stream capability."
        );
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realize_workspace_is_confined_and_creates_the_directory() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let request = WorkspaceRequest {
            remote_path: Some("proj/sub".into()),
            ..Default::default()
        };
        let realized = h.runtime.realize_workspace(&lease.id, &request).await.unwrap();
        assert_eq!(realized.cwd, "/workspace/proj/sub");
        let r = h.sh(&lease, "test -d /workspace/proj/sub && echo yes").await;
        assert_eq!(r.stdout, b"yes\n");
        let request = WorkspaceRequest {
            remote_path: Some("../etc".into()),
            ..Default::default()
        };
        let err = h.runtime.realize_workspace(&lease.id, &request).await.unwrap_err();
        assert_eq!(err.to_string(), "Path \"../etc\" is outside the lease workspace.");
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorded_owner_is_the_users_ids_and_the_engine_makes_the_workspace() {
    let h = harness_or_skip!();
    common::bounded(180, async {
        // (user spec, the ids `id` reports, whether the workspace is handed to them)
        for (user, ids, handed) in [
            (None, "0:0", false),
            (Some("nobody"), "65534:65534", true),
            (Some("65534"), "65534:65534", true),
            (Some("4242"), "4242:0", true),
            (Some("nobody:root"), "65534:0", true),
            (Some("4242:nogroup"), "4242:65534", true),
        ] {
            let mut config = json!({"workingDir": "/deep/new/ws"});
            if let Some(user) = user {
                config["user"] = user.into();
            }
            // Twice: the second lease of the same image and user takes the owner from the
            // driver's cache.
            for _ in 0..2 {
                let lease = h.lease(config.clone(), LeasePolicy::Ephemeral).await;
                let recorded = format!("{}:{}", lease.metadata["uid"], lease.metadata["gid"]);
                assert_eq!(recorded, ids, "{user:?}");
                let r = h
                    .sh(&lease, "echo \"$(id -u):$(id -g)\"; pwd; stat -c '%u:%g %a' .")
                    .await;
                let owner = if handed { ids } else { "0:0" };
                assert_eq!(
                    String::from_utf8_lossy(&r.stdout),
                    format!("{ids}\n/deep/new/ws\n{owner} 755\n"),
                    "{user:?}"
                );
                h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
            }
        }
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_bound_runtime_refuses_another_tenants_acquire_before_any_container_is_made() {
    use std::sync::Arc;

    use envrt_runtime_core::{AcquireRequest, Environment, EnvironmentRuntime, LeaseFilter, MemoryStore, PoolSpec};

    let h = harness_or_skip!();
    common::bounded(120, async {
        let store = Arc::new(MemoryStore::new());
        let bound = Arc::new(EnvironmentRuntime::with_store(store.clone()).for_tenant("acme"));
        bound.register_driver(h.driver.clone());
        let mut config = serde_json::Map::new();
        config.insert("image".into(), common::image().into());
        bound
            .put_environment(Environment::new("ctr", "Docker", "docker").with_config(config))
            .await
            .unwrap();
        let refused = bound
            .acquire_lease(AcquireRequest::new("ctr", "other"))
            .await
            .unwrap_err();
        assert!(matches!(refused, RuntimeError::TenantMismatch { .. }), "{refused:?}");
        assert_eq!(refused.kind(), "tenant_mismatch");
        assert_eq!(
            refused.to_string(),
            "Tenant \"other\" is not this runtime's tenant \"acme\"."
        );
        // Nor can a warm pool make such leases in the background.
        let pool = bound.start_pool(PoolSpec::new("ctr", "other", 1)).unwrap_err();
        assert_eq!(
            pool.to_string(),
            "Tenant \"other\" is not this runtime's tenant \"acme\"."
        );
        // No lease row (an operator's runtime on the same store sees every tenant), no
        // container, per the driver and per the engine.
        let operator = EnvironmentRuntime::with_store(store.clone());
        assert!(operator.leases(&LeaseFilter::default()).await.unwrap().is_empty());
        assert_eq!(h.driver.managed_containers().await.unwrap(), Vec::new());
        assert_eq!(common::cli_containers(&h.run), Vec::<String>::new());
        // The runtime's own tenant still acquires.
        let own = bound.acquire_lease(AcquireRequest::new("ctr", "acme")).await.unwrap();
        assert_eq!(common::cli_containers(&h.run).len(), 1);
        bound.destroy_lease(&own.id).await.unwrap();
    })
    .await;
    h.finish().await;
}
