//! Templates through the host: the reference worker snapshots a lease's workspace
//! (`environmentCaptureTemplate`), lists (`environmentListTemplates`), seeds a lease from
//! one (`sourceTemplateRef`) and deletes it (`environmentDeleteTemplate`), all in real bwrap
//! sandboxes; a worker written with the SDK that does not advertise the verbs is refused in
//! Paperclip's words before anything is sent.

mod host_common;

use envrt_driver_plugin_sandbox::SandboxOptions;
use envrt_runtime_core::{AcquireRequest, EnvironmentRuntime, ExecuteRequest, Lease, LeaseStatus, RuntimeError};
use host_common::*;

fn from(template: &str) -> AcquireRequest {
    let mut request = AcquireRequest::new("env-1", "co-1");
    request.template = Some(template.to_owned());
    request
}

async fn sh(runtime: &EnvironmentRuntime, lease: &Lease, script: &str) -> (Option<i32>, String, String) {
    let result = runtime
        .execute(&lease.id, ExecuteRequest::new("sh", ["-c", script]))
        .await
        .unwrap();
    (
        result.exit_code,
        String::from_utf8_lossy(&result.stdout).into_owned(),
        String::from_utf8_lossy(&result.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_reference_worker_snapshots_seeds_and_deletes_templates() {
    let root = TempDir::new("templates");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let source = acquire(&runtime).await;
    let (code, _, err) = sh(
        &runtime,
        &source,
        "echo v1 > config && mkdir -p tools && echo t > tools/t && ln -s tools/t link",
    )
    .await;
    assert_eq!(code, Some(0), "{err}");

    let template = runtime.capture_template(&source.id, Some("tools")).await.unwrap();
    assert_eq!(template.kind, "snapshot");
    assert_eq!(template.label.as_deref(), Some("tools"));
    assert_eq!(template.company_id, "co-1");
    assert!(template.id.starts_with("tpl-"), "{}", template.id);
    let listed = runtime.templates("env-1", "co-1").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].id.as_str(), listed[0].label.as_deref()),
        (template.id.as_str(), Some("tools"))
    );
    assert!(
        runtime.templates("env-1", "co-2").await.unwrap().is_empty(),
        "another tenant sees it"
    );

    let (code, _, _) = sh(&runtime, &source, "echo v2 > config && touch later && rm tools/t").await;
    assert_eq!(code, Some(0));

    let lease = runtime.acquire_lease(from(&template.id)).await.unwrap();
    assert_eq!(lease.metadata["sourceTemplateRef"], template.id.as_str());
    let (code, out, err) = sh(
        &runtime,
        &lease,
        "cat config tools/t link; test -e later || echo no-later; echo v3 >> config && echo writable",
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "v1\nt\nt\nno-later\nwritable\n");
    // Another tenant cannot start from it.
    let mut foreign = from(&template.id);
    foreign.company_id = "co-2".into();
    let error = runtime.acquire_lease(foreign).await.unwrap_err();
    assert!(matches!(error, RuntimeError::TemplateNotFound { .. }), "{error}");

    assert!(!runtime.delete_template("env-1", "co-2", &template.id).await.unwrap());
    assert!(runtime.delete_template("env-1", "co-1", &template.id).await.unwrap());
    assert!(!runtime.delete_template("env-1", "co-1", &template.id).await.unwrap());
    let error = runtime.acquire_lease(from(&template.id)).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("Template \"{}\" was not found in environment \"env-1\".", template.id)
    );
    assert!(
        !root.join(".templates").exists(),
        "the emptied templates directory is removed"
    );
    // The lease started from it keeps its files.
    assert_eq!(sh(&runtime, &lease, "cat tools/t").await.1, "t\n");
    for l in [&source, &lease] {
        runtime.release_lease(&l.id, LeaseStatus::Released).await.unwrap();
    }
    driver.shutdown().await;
}

#[tokio::test]
async fn a_workspace_link_that_leads_out_is_not_captured() {
    let root = TempDir::new("templates-escape");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let source = acquire(&runtime).await;
    let (code, _, _) = sh(&runtime, &source, "ln -s /etc/hostname host-file").await;
    assert_eq!(code, Some(0));
    let error = runtime.capture_template(&source.id, None).await.unwrap_err();
    assert_eq!(error.kind(), "entry_escapes_target", "{error}");
    assert!(runtime.templates("env-1", "co-1").await.unwrap().is_empty());
    assert!(
        !root.join(".templates").exists(),
        "the emptied templates directory is removed"
    );
    runtime.release_lease(&source.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

#[tokio::test]
async fn an_sdk_worker_without_the_verbs_is_refused_in_paperclips_words() {
    let root = TempDir::new("templates-sdk");
    let driver = start(sdk_manifest(root.path()), SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let key = {
        use envrt_runtime_core::EnvironmentDriver as _;
        driver.key().to_owned()
    };
    let lease = acquire(&runtime).await;
    let capture = runtime.capture_template(&lease.id, None).await.unwrap_err();
    assert_eq!(
        capture.to_string(),
        format!("Sandbox provider \"{key}\" does not support template capture.")
    );
    assert_eq!(capture.kind(), "provider_unsupported");
    let delete = runtime.delete_template("env-1", "co-1", "tpl-x").await.unwrap_err();
    assert_eq!(
        delete.to_string(),
        format!("Sandbox provider \"{key}\" does not support template deletion.")
    );
    let list = runtime.templates("env-1", "co-1").await.unwrap_err();
    assert_eq!(
        list.to_string(),
        format!("Sandbox provider \"{key}\" does not support template listing.")
    );
    let acquire = runtime.acquire_lease(from("tpl-x")).await.unwrap_err();
    assert_eq!(
        acquire.to_string(),
        format!("Sandbox provider \"{key}\" does not support template capture.")
    );
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}
