//! Paperclip's interactive setup through the host: the reference worker starts a setup
//! lease, reports it, has it captured as a template and cancels it, in real bwrap
//! sandboxes; the SDK fixture, which does not advertise the verbs, is refused in
//! Paperclip's words.

mod host_common;

use envrt_driver_plugin_sandbox::SandboxOptions;
use envrt_runtime_core::{AcquireRequest, Environment, ExecuteRequest, LeaseStatus};
use host_common::*;
use serde_json::json;

#[tokio::test]
async fn a_setup_session_is_started_worked_in_captured_and_cancelled() {
    let root = TempDir::new("setup");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let environment = Environment::new("env-1", "Sandbox", "sandbox");
    let session = driver
        .start_interactive_setup(&environment, "co-1", "session-1", None)
        .await
        .unwrap();
    assert_eq!(session.status, "waiting_for_user");
    let id = session.provider_lease_id.clone().expect("a setup lease");
    assert_eq!(session.connection_summary.as_ref().unwrap().kind, "duplex");
    // The user works in the setup lease (here: one command on it).
    let done = driver
        .call(
            "environmentExecute",
            json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1", "config": {},
                   "lease": {"providerLeaseId": id}, "command": "sh", "args": ["-c", "echo set-up > marker"]}),
        )
        .await
        .unwrap();
    assert_eq!(done["exitCode"], 0, "{done}");
    let seen = driver.get_interactive_setup(&environment, "co-1", &id).await.unwrap();
    assert_eq!(
        (seen.status.as_str(), seen.provider_lease_id.as_deref()),
        ("waiting_for_user", Some(id.as_str()))
    );

    let template = driver
        .capture_setup(&environment, "co-1", &id, Some("by-setup"))
        .await
        .unwrap();
    assert_eq!(template.label.as_deref(), Some("by-setup"));
    let mut request = AcquireRequest::new("env-1", "co-1");
    request.template = Some(template.id.clone());
    let lease = runtime.acquire_lease(request).await.unwrap();
    let out = runtime
        .execute(&lease.id, ExecuteRequest::new("cat", ["marker"]))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"set-up\n");

    assert_eq!(
        driver
            .cancel_interactive_setup(&environment, "co-1", &id, Some("done"))
            .await
            .unwrap(),
        "cancelled"
    );
    assert!(!root.join(&id).exists(), "the setup lease is removed");
    let gone = driver.get_interactive_setup(&environment, "co-1", &id).await.unwrap();
    assert_eq!((gone.status.as_str(), gone.provider_lease_id), ("missing", None));
    assert_eq!(
        driver
            .cancel_interactive_setup(&environment, "co-1", &id, None)
            .await
            .unwrap(),
        "missing"
    );
    // A setup can start from a template.
    let again = driver
        .start_interactive_setup(&environment, "co-1", "session-2", Some(&template))
        .await
        .unwrap();
    let again_id = again.provider_lease_id.unwrap();
    assert_eq!(std::fs::read(root.join(&again_id).join("marker")).unwrap(), b"set-up\n");
    driver
        .cancel_interactive_setup(&environment, "co-1", &again_id, None)
        .await
        .unwrap();
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert!(runtime.delete_template("env-1", "co-1", &template.id).await.unwrap());
    driver.shutdown().await;
}

#[tokio::test]
async fn an_sdk_worker_without_setup_is_refused_in_paperclips_words() {
    let root = TempDir::new("setup-sdk");
    let driver = start(sdk_manifest(root.path()), SandboxOptions::default()).await;
    let key = {
        use envrt_runtime_core::EnvironmentDriver as _;
        driver.key().to_owned()
    };
    let environment = Environment::new("env-1", "Sandbox", key.clone());
    let refusal = format!("Sandbox provider \"{key}\" does not support interactive setup.");
    let started = driver.start_interactive_setup(&environment, "co-1", "s", None).await;
    assert_eq!(started.unwrap_err().to_string(), refusal);
    let seen = driver.get_interactive_setup(&environment, "co-1", "x").await;
    assert_eq!(seen.unwrap_err().to_string(), refusal);
    let cancelled = driver.cancel_interactive_setup(&environment, "co-1", "x", None).await;
    assert_eq!(cancelled.unwrap_err().to_string(), refusal);
    let captured = driver.capture_setup(&environment, "co-1", "x", None).await;
    assert_eq!(
        captured.unwrap_err().to_string(),
        format!("Sandbox provider \"{key}\" does not support template capture.")
    );
    driver.shutdown().await;
}
