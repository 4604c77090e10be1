//! The reference worker reads no environment config key, so an environment naming one
//! (a misspelled setting such as `readOnly`) is refused when it is stored, with the
//! worker's text, instead of being silently ignored.

mod host_common;

use envrt_driver_plugin_sandbox::SandboxOptions;
use envrt_runtime_core::{Environment, JsonMap};
use host_common::*;

#[tokio::test]
async fn an_environment_config_key_is_refused_when_the_environment_is_stored() {
    let root = TempDir::new("keys");
    let Some(manifest) = reference_manifest(root.path()) else {
        panic!("the envrt-sandbox-worker binary is part of this build");
    };
    let runtime = runtime_with(start(manifest, SandboxOptions::default()).await).await;
    let config: JsonMap = serde_json::json!({"readOnly": true}).as_object().cloned().unwrap();
    let error = runtime
        .put_environment(Environment::new("env-2", "Sandbox", "sandbox").with_config(config))
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "Invalid input: sandbox environment config: unknown field `readOnly`, there are no fields"
    );
    assert_eq!(runtime.environment("env-2").await.unwrap(), None, "nothing is stored");
    // An empty config is still fine.
    runtime
        .put_environment(Environment::new("env-3", "Sandbox", "sandbox"))
        .await
        .unwrap();
}
