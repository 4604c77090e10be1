//! Tenants never mix: a runtime bound to tenant `other` on the same SQLite store as
//! tenant `acme`'s runtime refuses every lease operation on `acme`'s lease with the text
//! an unknown lease id gets, lists none of `acme`'s leases, and leaves the lease exactly
//! as it was (real local driver, real processes, a shared store file).
#![cfg(all(feature = "local", feature = "sqlite"))]

use std::sync::Arc;

use envrt::{
    AcquireRequest, Environment, EnvironmentRuntime, ExecuteRequest, LeaseFilter, LeaseStatus, RuntimeBuilder,
    RuntimeError, SqliteStore, SyncOperation,
};

async fn runtime_for(dir: &std::path::Path, tenant: &str) -> EnvironmentRuntime {
    let store = SqliteStore::open(dir.join("leases.db")).await.unwrap();
    RuntimeBuilder::new()
        .store(Arc::new(store))
        .tenant(tenant)
        .configure(envrt::local::LocalConfig {
            root: Some(dir.join("workspaces")),
            ..Default::default()
        })
        .build()
        .await
        .unwrap()
}

fn not_found<T>(id: &str, what: &str, outcome: Result<T, RuntimeError>) {
    let Err(error) = outcome else {
        panic!("{what}: another tenant's operation was not refused");
    };
    assert!(matches!(error, RuntimeError::LeaseNotFound { .. }), "{what}: {error:?}");
    assert_eq!(error.to_string(), format!("Lease \"{id}\" was not found."), "{what}");
}

#[tokio::test]
async fn another_tenant_gets_not_found_for_every_operation_on_a_lease_and_leaves_it_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let acme = runtime_for(dir.path(), "acme").await;
    acme.put_environment(Environment::new("dev", "Dev", "local"))
        .await
        .unwrap();
    let mut request = AcquireRequest::new("dev", "acme");
    request.run_id = Some("run-1".into());
    let lease = acme.acquire_lease(request).await.unwrap();
    let marked = acme
        .execute(&lease.id, ExecuteRequest::new("sh", ["-c", "echo kept > mark"]))
        .await
        .unwrap();
    assert_eq!(marked.exit_code, Some(0));
    let before = acme.lease(&lease.id).await.unwrap().unwrap();

    let other = runtime_for(dir.path(), "other").await;
    let id = lease.id.as_str();
    let sync = || {
        vec![SyncOperation {
            operation_id: "op".into(),
            files: Vec::new(),
            post_upload_commands: Vec::new(),
        }]
    };
    not_found(
        id,
        "execute",
        other.execute(id, ExecuteRequest::new("rm", ["-f", "mark"])).await,
    );
    not_found(id, "sync_in", other.sync_in(id, &sync()).await);
    not_found(id, "sync_out", other.sync_out(id, &sync()).await);
    not_found(
        id,
        "realize",
        other
            .realize_workspace(id, &envrt::core::WorkspaceRequest::default())
            .await,
    );
    not_found(id, "duplex", other.open_duplex_channel(id, &["cat".to_owned()]).await);
    not_found(id, "capabilities", other.resolve_capabilities(id).await);
    not_found(id, "capture", other.capture_template(id, None).await);
    not_found(id, "resume", other.resume_lease(id).await);
    not_found(id, "release", other.release_lease(id, LeaseStatus::Released).await);
    not_found(id, "destroy", other.destroy_lease(id).await);
    // Templates are the tenant's too: listing or deleting them for another tenant is
    // refused before the driver looks.
    let template = acme.capture_template(id, Some("base")).await.unwrap();
    for (what, refused) in [
        (
            "templates",
            other.templates("dev", "acme").await.map(|_| ()).unwrap_err(),
        ),
        (
            "delete_template",
            other
                .delete_template("dev", "acme", &template.id)
                .await
                .map(|_| ())
                .unwrap_err(),
        ),
    ] {
        assert!(
            matches!(refused, RuntimeError::TenantMismatch { .. }),
            "{what}: {refused:?}"
        );
        assert_eq!(
            refused.to_string(),
            "Tenant \"acme\" is not this runtime's tenant \"other\".",
            "{what}"
        );
    }
    assert!(other.templates("dev", "other").await.unwrap().is_empty());
    assert_eq!(acme.templates("dev", "acme").await.unwrap(), vec![template.clone()]);
    assert!(!other.supports_sync(id).await);
    assert_eq!(other.lease(id).await.unwrap(), None);
    assert!(other.leases(&LeaseFilter::default()).await.unwrap().is_empty());
    // The run and expiry sweeps see only the runtime's own tenant.
    let swept = other.release_leases("run-1", LeaseStatus::Released).await.unwrap();
    assert!(swept.released.is_empty() && swept.failures.is_empty());

    // Untouched: the same record, the workspace file still there, still usable by acme.
    assert_eq!(acme.lease(id).await.unwrap().unwrap(), before);
    let read = acme.execute(id, ExecuteRequest::new("cat", ["mark"])).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&read.stdout), "kept\n");
    assert_eq!(acme.leases(&LeaseFilter::default()).await.unwrap().len(), 1);
    // A runtime bound to no tenant (an operator's view) sees every tenant's leases.
    let store = SqliteStore::open(dir.path().join("leases.db")).await.unwrap();
    let operator = EnvironmentRuntime::with_store(Arc::new(store));
    assert_eq!(operator.tenant(), None);
    assert_eq!(
        operator.lease(id).await.unwrap().map(|l| l.company_id),
        Some("acme".to_owned())
    );
    acme.release_lease(id, LeaseStatus::Released).await.unwrap();
    assert!(acme.delete_template("dev", "acme", &template.id).await.unwrap());
}
