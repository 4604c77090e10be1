//! A hostile worker's answers to `environmentRunnerIngressEndpoint`, end to end: a real
//! worker process (tests/fixtures/script-worker.py) answers each call with what the test
//! put in a file, and the facade's `runner_ingress` must refuse every answer that could
//! send a client somewhere other than the worker's loopback listener for the path asked,
//! smuggle a header, or show a secret, each with its exact text, while the lease goes on
//! working; the one honest answer is taken, with its header values kept secret.

mod host_common;

use std::path::Path;

use envrt_driver_plugin_sandbox::{PluginManifest, SandboxOptions};
use envrt_runtime_core::{DriverError, ExecuteRequest, LeaseStatus, RuntimeError};
use host_common::*;
use serde_json::{Value, json};

const SECRET: &str = "hostile-worker-secret-7f3a";
const HEAD: &str = "Worker returned an invalid result for \"environmentRunnerIngressEndpoint\": ";

fn answer(url: &str, headers: Value) -> Value {
    json!({"kind": "authenticated_websocket", "websocketUrl": url, "secretHeaders": headers, "generation": "g:1"})
}

/// The script worker with `supported` methods, answering ingress calls from `answer_file`
/// and recording their params in `params_file`, declared with `runnerWebSocketIngress`.
fn hostile_manifest(supported: &str, answer_file: &Path, params_file: &Path) -> PluginManifest {
    let script = fixtures().join("script-worker.py");
    let value = json!({
        "id": "hostile.plugin",
        "worker": {
            "command": [python(), script.to_str().unwrap()],
            "env": {
                "SUPPORTED": supported,
                "INGRESS_ANSWER_FILE": answer_file.to_str().unwrap(),
                "INGRESS_PARAMS_FILE": params_file.to_str().unwrap(),
            },
        },
        "environmentDrivers": [{
            "driverKey": "sandbox",
            "kind": "sandbox_provider",
            "displayName": "Hostile sandbox",
            "sandboxCapabilities": {"runnerWebSocketIngress": true},
        }],
    });
    PluginManifest::from_json(&value.to_string()).unwrap()
}

fn write_answer(file: &Path, answer: &Value) {
    std::fs::write(file, answer.to_string()).unwrap();
}

#[tokio::test]
async fn every_hostile_answer_is_refused_with_its_text_and_the_lease_goes_on() {
    let dir = TempDir::new("hostile-ingress");
    let answer_file = dir.join("answer.json");
    let params_file = dir.join("params.jsonl");
    let manifest = hostile_manifest(
        "health,environmentAcquireLease,environmentReleaseLease,environmentExecute,environmentRunnerIngressEndpoint",
        &answer_file,
        &params_file,
    );
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    let good = json!([{"name": "x-envrt-ingress-token", "value": SECRET}]);
    let url = "ws://127.0.0.1:4000/runner";
    let refused_url = |u: &str| format!("websocketUrl must be ws://{{a loopback address}}:{{port}}/runner, not {u:?}");
    let mut cases: Vec<(Value, String)> = [
        // somewhere else than the worker's loopback listener for the path asked
        "ws://10.0.0.1:4000/runner",
        "ws://169.254.169.254:80/runner",
        "ws://0.0.0.0:4000/runner",
        "ws://localhost:4000/runner",
        "ws://evil.example:4000/runner",
        "ws://127.0.0.1@evil.example:4000/runner",
        "wss://127.0.0.1:4000/runner",
        "http://127.0.0.1:4000/runner",
        "ws://127.0.0.1:4000/other",
        "ws://127.0.0.1:4000/runner/../admin",
        "ws://127.0.0.1:4000/runner?token=1",
        "ws://127.0.0.1:0/runner",
        "ws://127.0.0.1/runner",
    ]
    .into_iter()
    .map(|u| (answer(u, good.clone()), refused_url(u)))
    .collect();
    let value_rule = "secretHeaders[0].value must be 1 to 1024 printable ASCII characters, no space at either end";
    cases.extend([
        (json!("ws://127.0.0.1:4000/runner"), "expected an object".to_owned()),
        (json!(null), "expected an object".to_owned()),
        (
            json!({"kind": "plain_websocket", "websocketUrl": url, "secretHeaders": good, "generation": "g:1"}),
            "kind must be \"authenticated_websocket\", not \"plain_websocket\"".to_owned(),
        ),
        (
            answer(url, json!([])),
            "secretHeaders must hold 1 to 8 headers, not 0".to_owned(),
        ),
        (
            answer(url, json!([{"name": "Host", "value": SECRET}])),
            "secretHeaders[0].name \"Host\" is a header the client sets itself".to_owned(),
        ),
        (
            answer(url, json!([{"name": "Sec-WebSocket-Key", "value": SECRET}])),
            "secretHeaders[0].name \"Sec-WebSocket-Key\" is a header the client sets itself".to_owned(),
        ),
        (
            answer(url, json!([{"name": "x-a\r\nx-evil", "value": SECRET}])),
            "secretHeaders[0].name \"x-a\\r\\nx-evil\" is not an HTTP header name".to_owned(),
        ),
        // a header smuggled through a value, and values a client would send mangled
        (
            answer(url, json!([{"name": "x-a", "value": format!("{SECRET}\r\nx-evil: 1")}])),
            value_rule.to_owned(),
        ),
        (
            answer(url, json!([{"name": "x-a", "value": format!("{SECRET} ")}])),
            value_rule.to_owned(),
        ),
        (
            answer(url, json!([{"name": "x-a", "value": SECRET.repeat(64)}])),
            value_rule.to_owned(),
        ),
        (
            answer(url, json!([{"name": "x-a", "value": {"secret": SECRET}}])),
            "secretHeaders[0].value is not a string".to_owned(),
        ),
    ]);
    let mut no_generation = answer(url, good.clone());
    no_generation.as_object_mut().unwrap().remove("generation");
    cases.push((no_generation, "generation is missing".to_owned()));
    let mut bad_generation = answer(url, good.clone());
    bad_generation["generation"] = json!("g 1\n");
    cases.push((
        bad_generation,
        "generation must be 1 to 256 visible ASCII characters".to_owned(),
    ));

    for (hostile, why) in &cases {
        write_answer(&answer_file, hostile);
        let error = bounded("runner_ingress", runtime.runner_ingress(&lease.id, 4000, "/runner"))
            .await
            .expect_err(&hostile.to_string());
        let text = error.to_string();
        assert_eq!(text, format!("{HEAD}{why}"), "{hostile}");
        assert!(!text.contains(SECRET), "{text}");
        assert!(!format!("{error:?}").contains(SECRET), "{error:?}");
        assert!(
            matches!(error, RuntimeError::Driver(DriverError::Other { .. })),
            "{error:?}"
        );
        // nothing of the lease was lost
        let ran = bounded(
            "execute",
            runtime.execute(&lease.id, ExecuteRequest::new("echo", ["ok"])),
        )
        .await
        .unwrap();
        assert_eq!(ran.stdout, b"ran echo");
    }

    // The honest answer is taken; its value travels as a secret.
    let honest = answer(url, json!([{"name": "x-envrt-ingress-token", "value": SECRET}]));
    write_answer(&answer_file, &honest);
    let endpoint = bounded("runner_ingress", runtime.runner_ingress(&lease.id, 4000, "/runner"))
        .await
        .unwrap();
    assert_eq!(endpoint.websocket_url, url);
    assert_eq!(endpoint.generation, "g:1");
    assert_eq!(endpoint.secret_headers.len(), 1);
    assert_eq!(endpoint.secret_headers[0].name, "x-envrt-ingress-token");
    assert_eq!(endpoint.secret_headers[0].value.expose(), SECRET);
    assert!(!format!("{endpoint:?}").contains(SECRET), "{endpoint:?}");

    // Every call reached the worker with the lease, the port and the path asked, and
    // nothing that names a host directory (this worker runs no supervisor).
    let calls: Vec<Value> = std::fs::read_to_string(&params_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(calls.len(), cases.len() + 1);
    for call in &calls {
        assert_eq!(call["port"], 4000, "{call}");
        assert_eq!(call["path"], "/runner", "{call}");
        assert_eq!(call["lease"]["providerLeaseId"], "lease-1", "{call}");
        assert!(call.get("envrtSocketDir").is_none_or(Value::is_null), "{call}");
    }

    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

#[tokio::test]
async fn bad_input_is_refused_before_the_worker_is_asked() {
    let dir = TempDir::new("hostile-ingress-input");
    let answer_file = dir.join("answer.json");
    let params_file = dir.join("params.jsonl");
    let manifest = hostile_manifest(
        "health,environmentAcquireLease,environmentReleaseLease,environmentRunnerIngressEndpoint",
        &answer_file,
        &params_file,
    );
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    let error = runtime.runner_ingress(&lease.id, 0, "/runner").await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "Invalid input: runner ingress port must be 1 to 65535, not 0"
    );
    for path in ["runner", "/a?b", "/a#b", "/a b", "/a\r\nHost: evil"] {
        let error = runtime.runner_ingress(&lease.id, 4000, path).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "Invalid input: runner ingress path must start with \"/\" and be at most 1024 visible ASCII characters without \"?\" or \"#\", not {path:?}"
            )
        );
    }
    assert!(!params_file.exists(), "a refused request reached the worker");
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}
