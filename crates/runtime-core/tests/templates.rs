//! Templates at the facade: capture, list, delete and acquire-from go through the gate
//! table in the contract's order, drivers without the group are refused with the exact
//! texts, and an unknown or deleted template refuses an acquire before the driver is asked.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use envrt_runtime_core::capability::CapabilityKey;
use envrt_runtime_core::driver::classify_driver;
use envrt_runtime_core::testkit::{ProbeDriver, ProbeShape};
use envrt_runtime_core::*;

/// An in-memory driver with the templates group: a "template" is just its id, and a lease
/// started from one says so in its metadata.
#[derive(Default)]
struct TemplateDriver {
    templates: Mutex<Vec<TemplateRef>>,
    acquires: Mutex<Vec<Option<String>>>,
}

#[async_trait]
impl EnvironmentDriver for TemplateDriver {
    fn key(&self) -> &str {
        "tpl"
    }
    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        let seeded = input.template.as_ref().map(|t| t.id.clone());
        self.acquires.lock().unwrap().push(seeded.clone());
        let mut grant = LeaseGrant::default();
        if let Some(id) = seeded {
            grant.metadata.insert("seededFrom".into(), id.into());
        }
        Ok(grant)
    }
    async fn release_lease(&self, _input: &ReleaseInput) -> Result<(), DriverError> {
        Ok(())
    }
    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        let support = [CapabilityKey::NativeSyncIn].into_iter().collect();
        Ok(classify_driver(self, support, None, input, true))
    }
    fn as_templates(&self) -> Option<&dyn Templates> {
        Some(self)
    }
}

#[async_trait]
impl Templates for TemplateDriver {
    async fn capture_template(&self, context: &LeaseContext, label: Option<&str>) -> Result<TemplateRef, DriverError> {
        let template = TemplateRef {
            id: template::new_template_id(),
            kind: "snapshot".into(),
            environment_id: context.lease.environment_id.clone().unwrap_or_default(),
            company_id: context.lease.company_id.clone(),
            label: label.map(str::to_owned),
            source_lease_id: Some(context.lease.id.clone()),
            created_at: Some(Timestamp::now()),
            metadata: JsonMap::new(),
        };
        self.templates.lock().unwrap().push(template.clone());
        Ok(template)
    }
    async fn list_templates(
        &self,
        environment: &Environment,
        company_id: &str,
    ) -> Result<Vec<TemplateRef>, DriverError> {
        let all = self.templates.lock().unwrap();
        Ok(all
            .iter()
            .filter(|t| t.environment_id == environment.id && t.company_id == company_id)
            .cloned()
            .collect())
    }
    async fn delete_template(&self, _environment: &Environment, template: &TemplateRef) -> Result<bool, DriverError> {
        let mut all = self.templates.lock().unwrap();
        let before = all.len();
        all.retain(|t| t.id != template.id);
        Ok(all.len() < before)
    }
}

async fn runtime() -> (EnvironmentRuntime, Arc<TemplateDriver>, Arc<ProbeDriver>) {
    let runtime = EnvironmentRuntime::new();
    let driver = Arc::new(TemplateDriver::default());
    let plain = Arc::new(ProbeDriver::new("plain", ProbeShape::full(), None));
    runtime.register_driver(driver.clone());
    runtime.register_driver(plain.clone());
    for (id, key) in [("env", "tpl"), ("other", "tpl"), ("plain-env", "plain")] {
        runtime.put_environment(Environment::new(id, id, key)).await.unwrap();
    }
    (runtime, driver, plain)
}

fn from(environment: &str, template: &str) -> AcquireRequest {
    let mut request = AcquireRequest::new(environment, "acme");
    request.template = Some(template.to_owned());
    request
}

#[tokio::test]
async fn a_captured_template_is_listed_and_seeds_a_new_lease() {
    let (runtime, driver, _) = runtime().await;
    let source = runtime.acquire_lease(AcquireRequest::new("env", "acme")).await.unwrap();
    let template = runtime.capture_template(&source.id, Some("base")).await.unwrap();
    assert_eq!(template.label.as_deref(), Some("base"));
    assert_eq!(template.source_lease_id.as_deref(), Some(source.id.as_str()));
    assert_eq!(runtime.templates("env", "acme").await.unwrap(), vec![template.clone()]);
    // Templates belong to their environment and tenant.
    assert!(runtime.templates("other", "acme").await.unwrap().is_empty());
    assert!(runtime.templates("env", "globex").await.unwrap().is_empty());
    let mut foreign = from("env", &template.id);
    foreign.company_id = "globex".into();
    assert_eq!(
        runtime.acquire_lease(foreign).await.unwrap_err().to_string(),
        format!("Template \"{}\" was not found in environment \"env\".", template.id)
    );
    assert!(!runtime.delete_template("env", "globex", &template.id).await.unwrap());

    let lease = runtime.acquire_lease(from("env", &template.id)).await.unwrap();
    assert_eq!(lease.metadata["seededFrom"], template.id.as_str());
    assert_eq!(lease.metadata[SOURCE_TEMPLATE_KEY], template.id.as_str());
    assert_eq!(*driver.acquires.lock().unwrap(), vec![None, Some(template.id.clone())]);
}

#[tokio::test]
async fn a_deleted_or_unknown_template_refuses_the_acquire_before_the_driver() {
    let (runtime, driver, _) = runtime().await;
    let source = runtime.acquire_lease(AcquireRequest::new("env", "acme")).await.unwrap();
    let template = runtime.capture_template(&source.id, None).await.unwrap();
    assert!(runtime.delete_template("env", "acme", &template.id).await.unwrap());
    // Deleting again is not an error: nothing is left to delete.
    assert!(!runtime.delete_template("env", "acme", &template.id).await.unwrap());
    assert!(runtime.templates("env", "acme").await.unwrap().is_empty());

    let error = runtime.acquire_lease(from("env", &template.id)).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("Template \"{}\" was not found in environment \"env\".", template.id)
    );
    assert!(matches!(error, RuntimeError::TemplateNotFound { .. }));
    assert_eq!(error.kind(), "template_not_found");
    // A template of another environment is not found either, nor is a malformed id.
    let kept = runtime.capture_template(&source.id, None).await.unwrap();
    for (environment, id) in [("other", kept.id.as_str()), ("env", "../etc")] {
        let error = runtime.acquire_lease(from(environment, id)).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("Template \"{id}\" was not found in environment \"{environment}\".")
        );
    }
    assert_eq!(
        driver.acquires.lock().unwrap().len(),
        1,
        "only the source lease was acquired"
    );
    assert!(runtime.leases(&LeaseFilter::default()).await.unwrap().len() == 1);
}

#[tokio::test]
async fn drivers_without_templates_are_refused_with_the_exact_texts() {
    let (runtime, _, plain) = runtime().await;
    let lease = runtime
        .acquire_lease(AcquireRequest::new("plain-env", "acme"))
        .await
        .unwrap();
    let calls = plain.operation_calls();
    let capture = runtime.capture_template(&lease.id, None).await.unwrap_err();
    assert_eq!(
        capture.to_string(),
        "Environment driver \"plain\" does not support template capture."
    );
    assert_eq!(capture.kind(), "template_capture_unsupported");
    let list = runtime.templates("plain-env", "acme").await.unwrap_err();
    assert_eq!(
        list.to_string(),
        "Environment driver \"plain\" does not support templates."
    );
    let delete = runtime.delete_template("plain-env", "acme", "tpl-x").await.unwrap_err();
    assert_eq!(
        delete.to_string(),
        "Environment driver \"plain\" does not support template deletion."
    );
    let acquire = runtime.acquire_lease(from("plain-env", "tpl-x")).await.unwrap_err();
    assert_eq!(
        acquire.to_string(),
        "Environment driver \"plain\" does not support templates."
    );
    assert!(matches!(
        acquire,
        RuntimeError::Unsupported {
            operation: UnsupportedOperation::Templates,
            ..
        }
    ));
    assert_eq!(plain.operation_calls(), calls, "no refusal reached the driver");
}

#[tokio::test]
async fn the_checks_run_in_the_contract_order() {
    let (runtime, driver, _) = runtime().await;
    // An inactive environment is refused before its template is looked up.
    let mut archived = Environment::new("archived", "Old", "tpl");
    archived.status = EnvironmentStatus::Archived;
    runtime.put_environment(archived).await.unwrap();
    let error = runtime.acquire_lease(from("archived", "tpl-none")).await.unwrap_err();
    assert_eq!(error.to_string(), "Environment \"Old\" is not active.");
    // An unregistered driver comes first for every operation.
    runtime
        .put_environment(Environment::new("ghost-env", "Ghost", "ghost"))
        .await
        .unwrap();
    let unregistered = "Environment driver \"ghost\" is not registered in the environment runtime yet.";
    assert_eq!(
        runtime.templates("ghost-env", "acme").await.unwrap_err().to_string(),
        unregistered
    );
    assert_eq!(
        runtime
            .delete_template("ghost-env", "acme", "t")
            .await
            .unwrap_err()
            .to_string(),
        unregistered
    );
    assert_eq!(
        runtime.templates("nowhere", "acme").await.unwrap_err().to_string(),
        "Environment \"nowhere\" was not found."
    );
    // Capture needs an active lease.
    let lease = runtime.acquire_lease(AcquireRequest::new("env", "acme")).await.unwrap();
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    let error = runtime.capture_template(&lease.id, None).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("Lease \"{}\" is not active (status: released).", lease.id)
    );
    assert!(driver.templates.lock().unwrap().is_empty());
    // A malformed id is refused by delete before the driver is asked.
    let error = runtime.delete_template("env", "acme", "a/b").await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "Invalid input: template id \"a/b\" is not valid (allowed: ASCII letters, digits, '-', '_' and '.')"
    );
}

async fn wait_ready(ready: impl Fn() -> Option<PoolStatus>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while ready().is_none_or(|s| s.ready < 1) {
        assert!(std::time::Instant::now() < deadline, "the pool never filled");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn pools_serve_only_their_own_template_and_never_a_deleted_one() {
    let (runtime, driver, _) = runtime().await;
    let runtime = Arc::new(runtime);
    let source = runtime.acquire_lease(AcquireRequest::new("env", "acme")).await.unwrap();
    let template = runtime.capture_template(&source.id, None).await.unwrap();
    // A clean pool does not serve an acquire from a template.
    runtime.start_pool(PoolSpec::new("env", "acme", 1)).unwrap();
    wait_ready(|| runtime.pool_status("env", "acme", LeasePolicy::Ephemeral)).await;
    let lease = runtime.acquire_lease(from("env", &template.id)).await.unwrap();
    assert_eq!(lease.metadata["seededFrom"], template.id.as_str());
    assert!(!lease.metadata.contains_key(POOLED_KEY));
    // A pool of the template does, with leases that started from it.
    let mut spec = PoolSpec::new("env", "acme", 1);
    spec.template = Some(template.id.clone());
    runtime.start_pool(spec).unwrap();
    let status = || runtime.template_pool_status("env", "acme", LeasePolicy::Ephemeral, &template.id);
    wait_ready(status).await;
    let acquires = driver.acquires.lock().unwrap().len();
    let pooled = runtime.acquire_lease(from("env", &template.id)).await.unwrap();
    assert_eq!(pooled.metadata["seededFrom"], template.id.as_str());
    assert_eq!(pooled.metadata[SOURCE_TEMPLATE_KEY], template.id.as_str());
    assert_eq!(
        driver.acquires.lock().unwrap().len(),
        acquires,
        "handed over, not acquired"
    );
    // Once the template is deleted, its ready leases are not handed out.
    wait_ready(status).await;
    assert!(runtime.delete_template("env", "acme", &template.id).await.unwrap());
    let error = runtime.acquire_lease(from("env", &template.id)).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("Template \"{}\" was not found in environment \"env\".", template.id)
    );
    runtime.stop_pools().await;
    let active = LeaseFilter {
        statuses: vec![LeaseStatus::Active],
        ..Default::default()
    };
    let left: Vec<Lease> = runtime.leases(&active).await.unwrap();
    let pooled_left: Vec<&Lease> = left.iter().filter(|l| l.metadata.contains_key(POOLED_KEY)).collect();
    assert!(pooled_left.is_empty(), "pooled leases left: {pooled_left:?}");
}
