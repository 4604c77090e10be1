//! Honest narrowing: a provider configuration the worker rejects
//! (`environmentValidateConfig` answers `ok: false`) turns off sessions, incremental output
//! and duplex for that environment's leases, through the shared classifier.

mod host_common;

use envrt_driver_plugin_sandbox::SandboxOptions;
use envrt_runtime_core::{AcquireRequest, Environment, RuntimeError};
use host_common::*;
use serde_json::json;

const SUPPORTED: &str = "health,environmentValidateConfig,environmentAcquireLease,environmentReleaseLease,\
environmentExecute,duplexChannelOpen,duplexChannelWrite,duplexChannelStop,duplexChannelClose";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_the_worker_rejects_narrows_the_lease() {
    let driver = start(
        script_manifest("", &[("SUPPORTED", SUPPORTED)]),
        SandboxOptions::default(),
    )
    .await;
    let runtime = runtime_with(driver.clone()).await;
    let mut broken = Environment::new("env-broken", "Broken", "sandbox");
    broken.config = json!({"broken": true}).as_object().cloned().unwrap();
    // A configuration the worker rejects is refused when it is stored ...
    let refused = runtime.put_environment(broken.clone()).await.unwrap_err();
    assert_eq!(
        refused.to_string(),
        "Invalid input: sandbox environment config: broken is set"
    );
    // ... and one that reached the store another way (stored before the check existed,
    // or by another program) still narrows its leases honestly.
    runtime.store().put_environment(&broken).await.unwrap();

    let good = acquire(&runtime).await;
    let bad = runtime
        .acquire_lease(AcquireRequest::new("env-broken", "co-1"))
        .await
        .unwrap();
    let good_caps = bounded("good snapshot", runtime.resolve_capabilities(&good.id))
        .await
        .unwrap()
        .unwrap();
    let bad_caps = bounded("bad snapshot", runtime.resolve_capabilities(&bad.id))
        .await
        .unwrap()
        .unwrap();
    assert!(good_caps.duplex_command_stream && good_caps.independent_control_commands);
    assert!(!bad_caps.duplex_command_stream);
    assert!(!bad_caps.persistent_process_sessions);
    assert!(!bad_caps.incremental_session_output);
    // What a failed configuration does not touch stays as it was.
    assert_eq!(
        bad_caps.independent_control_commands,
        good_caps.independent_control_commands
    );

    let refused = bounded(
        "duplex on the broken lease",
        runtime.open_duplex_channel(&bad.id, &["cat".into()]),
    )
    .await
    .err()
    .unwrap();
    assert!(matches!(refused, RuntimeError::DuplexNotGranted { .. }));
    assert_eq!(
        refused.to_string(),
        "Sandbox lease does not grant the duplex command stream capability."
    );

    // Each configuration is asked about once, however often a snapshot is taken (the two
    // checks when the environments were stored are the other two calls).
    for _ in 0..3 {
        bounded("again", runtime.resolve_capabilities(&bad.id)).await.unwrap();
        bounded("again", runtime.resolve_capabilities(&good.id)).await.unwrap();
    }
    let stats = bounded("stats", driver.call("test.stats", json!({}))).await.unwrap();
    assert_eq!(stats["calls"]["environmentValidateConfig"], 4, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_cannot_validate_leaves_the_snapshot_unnarrowed() {
    // The default script worker does not advertise environmentValidateConfig.
    let driver = start(script_manifest("", &[]), SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let mut broken = Environment::new("env-broken", "Broken", "sandbox");
    broken.config = json!({"broken": true}).as_object().cloned().unwrap();
    runtime.put_environment(broken).await.unwrap();
    let lease = runtime
        .acquire_lease(AcquireRequest::new("env-broken", "co-1"))
        .await
        .unwrap();
    let caps = bounded("snapshot", runtime.resolve_capabilities(&lease.id))
        .await
        .unwrap()
        .unwrap();
    assert!(caps.duplex_command_stream);
    let stats = bounded("stats", driver.call("test.stats", json!({}))).await.unwrap();
    assert_eq!(stats["calls"].get("environmentValidateConfig"), None, "{stats}");
}
