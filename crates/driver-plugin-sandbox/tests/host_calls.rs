//! The worker's own calls to its host, answered by envrt for a real SDK worker
//! (tests/fixtures/sdk-host-calls): every supported method, capability refusals, the same
//! calls under the SDK's own `createTestHarness` (differential), persistence across a host
//! restart, bounds on floods, and secrets that leak nowhere.

mod host_calls_common;
mod host_common;

use envrt_driver_plugin_sandbox::{SandboxOptions, WorkerCallLimits, WorkerCallOptions};
use envrt_runtime_core::{LeaseStatus, PluginStateStore as _, StateKey};
use host_calls_common::*;
use host_common::*;
use serde_json::{Value, json};

fn options(server: &Server, secrets: &[String]) -> SandboxOptions {
    let mut options = SandboxOptions::default();
    options.config.insert("region".into(), "eu-1".into());
    options.worker_calls = WorkerCallOptions {
        secrets: secrets.to_vec(),
        http_allow: vec![format!("127.0.0.1:{}", server.port)],
        ..WorkerCallOptions::default()
    };
    options
}

fn ok(outcome: &Value) -> &Value {
    outcome.get("ok").unwrap_or_else(|| panic!("not ok: {outcome}"))
}

fn error(outcome: &Value) -> &str {
    outcome["error"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error: {outcome}"))
}

#[tokio::test]
async fn every_supported_method_answers_as_the_sdk_types_it() {
    let server = Server::start(0, 0);
    let secret_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret_file.path(), "file-secret-value\n").unwrap();
    let file_ref = format!("file:{}", secret_file.path().display());
    let opts = options(&server, &[file_ref.clone(), "env:PATH".into()]);
    let (driver, runtime, lease) = lease_on(manifest(None), opts).await;
    let instance = json!({"scopeKind": "instance", "stateKey": "k"});
    let project = json!({"scopeKind": "project", "scopeId": "p-1", "namespace": "ns", "stateKey": "k"});
    let calls = json!([
        {"op": "config.get"},
        {"op": "config.get", "companyId": "co-1"},
        {"op": "state.get", "input": instance},
        {"op": "state.set", "input": instance, "value": {"n": 1, "list": [1, "two"]}},
        {"op": "state.set", "input": project, "value": "other scope"},
        {"op": "state.get", "input": instance},
        {"op": "state.get", "input": project},
        {"op": "state.delete", "input": instance},
        {"op": "state.get", "input": instance},
        {"op": "secrets.resolve", "ref": file_ref},
        {"op": "secrets.resolve", "ref": "env:PATH"},
        {"op": "secrets.resolve", "ref": "env:HOME"},
        {"op": "http.fetch", "url": server.url("/echo?x=1"), "init": {"method": "POST", "body": "ping", "headers": {"content-type": "text/plain"}}},
        {"op": "http.fetch", "url": "http://localhost:1/"},
        {"op": "http.fetch", "url": "https://example.com/"},
        {"op": "activity.log", "entry": {"companyId": "co-1", "message": "leased", "entityType": "lease", "entityId": "l-1"}},
        {"op": "metrics.write", "name": "leases", "value": 1, "tags": {"region": "eu-1"}},
        {"op": "telemetry.track", "eventName": "lease.acquired", "dimensions": {"warm": true}},
        {"op": "log", "level": "warn", "message": "careful", "meta": {"a": 1}},
        {"op": "span", "name": "pack"},
        {"op": "db.query"},
        {"op": "issues.list"},
    ]);
    let out = bounded("calls", run(&runtime, &lease, &calls)).await;
    assert_eq!(ok(&out[0]), &json!({"region": "eu-1"}));
    assert_eq!(ok(&out[1]), &json!({"region": "eu-1"}));
    assert_eq!(ok(&out[2]), &Value::Null);
    assert_eq!(ok(&out[3]), &Value::Null);
    assert_eq!(ok(&out[5]), &json!({"n": 1, "list": [1, "two"]}));
    assert_eq!(ok(&out[6]), &json!("other scope"));
    assert_eq!(ok(&out[7]), &Value::Null);
    assert_eq!(ok(&out[8]), &Value::Null, "deleted");
    assert_eq!(ok(&out[9]), &json!("file-secret-value"), "one trailing newline dropped");
    assert_eq!(ok(&out[10]), &json!(std::env::var("PATH").unwrap()));
    assert_eq!(
        error(&out[11]),
        "secret reference \"env:HOME\" is not configured for plugin 'envrt.hostcalls'"
    );
    assert_eq!(
        ok(&out[12]),
        &json!({"status": 200, "statusText": "OK", "echo": "POST /echo?x=1", "body": "ping"})
    );
    assert_eq!(
        error(&out[13]),
        "\"http.fetch\" to localhost:1 refused: the host is not on the allowlist of plugin 'envrt.hostcalls'"
    );
    assert_eq!(
        error(&out[14]),
        "\"http.fetch\" to example.com:443 refused: the host is not on the allowlist of plugin 'envrt.hostcalls'"
    );
    for (i, outcome) in out.iter().enumerate().take(20).skip(15) {
        assert_eq!(ok(outcome), &Value::Null, "{i}");
    }
    assert_eq!(error(&out[20]), "Host does not handle method \"db.query\"");
    assert_eq!(error(&out[21]), "Host does not handle method \"issues.list\"");
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "only the allowed fetch reached the network: {seen:?}");
    assert_eq!((seen[0].method.as_str(), seen[0].body.as_str()), ("POST", "ping"));
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

/// One call per capability class, with the capability's refusal.
fn capability_calls(server: &Server) -> (Value, Vec<&'static str>) {
    let input = json!({"scopeKind": "instance", "stateKey": "k"});
    let calls = json!([
        {"op": "state.get", "input": input},
        {"op": "state.set", "input": input, "value": 1},
        {"op": "state.delete", "input": input},
        {"op": "secrets.resolve", "ref": "env:PATH"},
        {"op": "http.fetch", "url": server.url("/echo")},
        {"op": "activity.log", "entry": {"companyId": "co-1", "message": "m"}},
        {"op": "metrics.write", "name": "m", "value": 1},
        {"op": "telemetry.track", "eventName": "e"},
        {"op": "config.get"},
        {"op": "log", "level": "info", "message": "always allowed"},
    ]);
    let caps = vec![
        "plugin.state.read",
        "plugin.state.write",
        "plugin.state.write",
        "secrets.read-ref",
        "http.outbound",
        "activity.log.write",
        "metrics.write",
        "telemetry.track",
    ];
    (calls, caps)
}

#[tokio::test]
async fn each_method_class_needs_its_capability() {
    let server = Server::start(0, 0);
    let opts = options(&server, &["env:PATH".into()]);
    let (driver, runtime, lease) = lease_on(manifest(Some(&["environment.drivers.register"])), opts).await;
    let (calls, caps) = capability_calls(&server);
    let out = bounded("calls", run(&runtime, &lease, &calls)).await;
    for (i, cap) in caps.iter().enumerate() {
        assert_eq!(
            error(&out[i]),
            format!("Plugin 'envrt.hostcalls' is missing required capability '{cap}'"),
            "call {i}"
        );
    }
    assert_eq!(ok(&out[8]), &json!({"region": "eu-1"}));
    assert_eq!(ok(&out[9]), &Value::Null);
    assert!(
        server.seen.lock().unwrap().is_empty(),
        "a refused fetch never reaches the network"
    );
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

/// The harness says "... in test harness" where a host says nothing more.
fn normalized(mut outcomes: Vec<Value>) -> Vec<Value> {
    for outcome in &mut outcomes {
        if let Some(Value::String(message)) = outcome.get_mut("error") {
            *message = message.trim_end_matches(" in test harness").to_owned();
        }
    }
    outcomes
}

#[tokio::test]
async fn the_same_calls_answer_the_same_under_the_sdk_harness() {
    let server = Server::start(0, 0);
    let config = json!({"region": "eu-1"});
    let a = json!({"scopeKind": "instance", "stateKey": "a"});
    let b = json!({"scopeKind": "company", "scopeId": "co-1", "namespace": "leases", "stateKey": "a"});
    let calls = json!([
        {"op": "config.get"},
        {"op": "state.get", "input": a},
        {"op": "state.set", "input": a, "value": {"x": [1, 2, {"y": null}]}},
        {"op": "state.set", "input": b, "value": "b"},
        {"op": "state.get", "input": a},
        {"op": "state.get", "input": b},
        {"op": "state.set", "input": a, "value": 7},
        {"op": "state.get", "input": a},
        {"op": "state.delete", "input": a},
        {"op": "state.get", "input": a},
        {"op": "state.get", "input": b},
        {"op": "http.fetch", "url": server.url("/echo/path"), "init": {"method": "PUT", "body": "payload"}},
        {"op": "activity.log", "entry": {"companyId": "co-1", "message": "m"}},
        {"op": "metrics.write", "name": "m", "value": 2.5},
        {"op": "telemetry.track", "eventName": "e", "dimensions": {"k": "v"}},
        {"op": "log", "level": "info", "message": "hello"},
    ]);
    let (driver, runtime, lease) = lease_on(manifest(None), options(&server, &[])).await;
    let envrt = bounded("calls", run(&runtime, &lease, &calls)).await;
    let harness = run_in_harness(&config, &calls, None);
    assert_eq!(normalized(envrt.clone()), normalized(harness));
    assert_eq!(ok(&envrt[7]), &json!(7), "the comparison saw real answers");

    // and with no capability but the driver's: the same refusals
    let bare: &[&str] = &["environment.drivers.register"];
    let (refused_driver, refused_runtime, refused_lease) = lease_on(manifest(Some(bare)), options(&server, &[])).await;
    let (calls, _) = capability_calls(&server);
    let envrt = bounded("calls", run(&refused_runtime, &refused_lease, &calls)).await;
    let harness = run_in_harness(&config, &calls, Some(bare));
    assert_eq!(normalized(envrt.clone()), normalized(harness));
    assert!(error(&envrt[0]).contains("missing required capability"));
    for (runtime, lease) in [(&runtime, &lease), (&refused_runtime, &refused_lease)] {
        runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    }
    driver.shutdown().await;
    refused_driver.shutdown().await;
}

#[tokio::test]
async fn state_survives_a_host_restart_in_the_sqlite_store() {
    let server = Server::start(0, 0);
    let root = TempDir::new("hc-state");
    let db = root.join("leases.db");
    let input = json!({"scopeKind": "environment", "scopeId": "env-1", "stateKey": "leases"});
    for (round, calls) in [
        json!([{"op": "state.set", "input": input, "value": {"hcl-1": "running"}}]),
        json!([{"op": "state.get", "input": input}]),
    ]
    .into_iter()
    .enumerate()
    {
        // a new host process each round: a fresh store on the same file, a fresh worker
        let store = envrt_store_sqlite::SqliteStore::open(&db).await.unwrap();
        let mut opts = options(&server, &[]);
        opts.worker_calls.state = std::sync::Arc::new(store.clone());
        let (driver, runtime, lease) = lease_on(manifest(None), opts).await;
        let out = bounded("calls", run(&runtime, &lease, &calls)).await;
        if round == 0 {
            assert_eq!(ok(&out[0]), &Value::Null);
        } else {
            assert_eq!(ok(&out[0]), &json!({"hcl-1": "running"}));
        }
        let key = StateKey {
            plugin: "envrt.hostcalls".into(),
            scope_kind: "environment".into(),
            scope_id: "env-1".into(),
            namespace: "default".into(),
            state_key: "leases".into(),
        };
        assert_eq!(
            store.get_state(&key).await.unwrap().as_deref(),
            Some("{\"hcl-1\":\"running\"}")
        );
        runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        driver.shutdown().await;
    }
}

#[tokio::test]
async fn floods_are_bounded_and_the_host_stays_responsive() {
    let server = Server::start(4, 2048);
    let mut opts = options(&server, &[]);
    opts.worker_calls.limits = WorkerCallLimits {
        max_state_value_bytes: 100,
        max_state_keys: 8,
        max_in_flight: 4,
        max_http_response_bytes: 1024,
        ..WorkerCallLimits::default()
    };
    let (driver, runtime, lease) = lease_on(manifest(None), opts).await;
    let runtime = std::sync::Arc::new(runtime);
    let calls = json!([
        {"op": "state.set", "input": {"scopeKind": "instance", "stateKey": "big"}, "value": "x".repeat(200)},
        {"op": "flood.state", "count": 20, "size": 10},
        {"op": "http.fetch", "url": server.url("/big")},
        {"op": "config.get"},
    ]);
    let out = bounded("calls", run(&runtime, &lease, &calls)).await;
    assert_eq!(
        error(&out[0]),
        "\"state.set\": the value is 202 bytes as JSON, over the limit of 100 bytes"
    );
    assert_eq!(
        ok(&out[1]),
        &json!({"ok": 8, "\"state.set\": plugin 'envrt.hostcalls' already holds 8 state keys, the limit": 12})
    );
    assert_eq!(
        error(&out[2]),
        "\"http.fetch\": the response body is over the limit of 1024 bytes"
    );
    assert_eq!(ok(&out[3]), &json!({"region": "eu-1"}), "a normal call still answers");

    // ten fetches the server holds: four in flight, six refused at once; meanwhile the
    // host still talks to the worker
    let held = json!([{"op": "flood.http", "count": 10, "url": server.url("/hold")}, {"op": "config.get"}]);
    let flood = {
        let runtime = runtime.clone();
        let lease = lease.clone();
        tokio::spawn(async move { run(&runtime, &lease, &held).await })
    };
    let held_rx = server.held;
    tokio::task::spawn_blocking(move || held_rx.recv().unwrap())
        .await
        .unwrap();
    assert_eq!(bounded("health", driver.health()).await.unwrap()["status"], "ok");
    server.release.send(()).unwrap();
    let out = bounded("flood", flood).await.unwrap();
    assert_eq!(
        ok(&out[0]),
        &json!({"ok": 4, "\"http.fetch\" refused: 4 worker-to-host calls are already in flight (the limit)": 6})
    );
    assert_eq!(ok(&out[1]), &json!({"region": "eu-1"}));
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}
