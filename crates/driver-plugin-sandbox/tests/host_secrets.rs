//! A worker resolves a secret (`secrets.resolve`) and uses it: the value reaches the
//! worker and the server it calls, and nothing of the host — no tracing line, error text,
//! store row, `Debug` output or process list entry.

mod host_calls_common;
mod host_common;

use envrt_driver_plugin_sandbox::{SandboxOptions, WorkerCallOptions};
use envrt_runtime_core::LeaseStatus;
use host_calls_common::*;
use host_common::*;
use serde_json::json;

#[tokio::test]
async fn a_resolved_secret_leaks_nowhere_on_the_host() {
    let captured = start_capture();
    let server = Server::start(0, 0);
    let root = TempDir::new("hc-secret");
    let secret = format!("sk-{}", uuid::Uuid::new_v4().simple());
    let file = root.join("api-key");
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    let reference = format!("file:{}", file.display());
    let store = envrt_store_sqlite::SqliteStore::open(root.join("leases.db"))
        .await
        .unwrap();

    let options = SandboxOptions {
        worker_calls: WorkerCallOptions {
            state: std::sync::Arc::new(store),
            secrets: vec![reference.clone()],
            http_allow: vec![format!("127.0.0.1:{}", server.port)],
            ..WorkerCallOptions::default()
        },
        ..SandboxOptions::default()
    };
    let (driver, runtime, lease) = lease_on(manifest(None), options.clone()).await;
    let calls = json!([
        {"op": "secret.use", "ref": reference, "url": server.url("/echo")},
        {"op": "secret.leak", "ref": reference},
    ]);
    let out = bounded("calls", run(&runtime, &lease, &calls)).await;
    // the worker used it: the server saw the bearer token
    assert_eq!(out[0]["ok"]["status"], 200, "{out:?}");
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some(format!("Bearer {secret}").as_str())
    );
    // the host's error text for a reference built from the value is redacted
    assert_eq!(
        out[1]["ok"],
        "secret reference \"env:***\" is not configured for plugin 'envrt.hostcalls'"
    );

    // process list while the worker is alive
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            assert!(
                !String::from_utf8_lossy(&cmdline).contains(&secret),
                "in the command line of {:?}",
                entry.path()
            );
        }
    }
    assert!(!format!("{options:?} {driver:?} {lease:?}").contains(&secret));
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;

    // every tracing line: the worker's own log, activity, metric and telemetry were
    // recorded (so the capture saw them), with the value redacted
    let text = captured.lock().unwrap().clone();
    assert!(text.contains("worker log: token is ***"), "{text}");
    assert!(text.contains("plugin activity: activity ***"), "{text}");
    assert!(
        text.contains("metric=metric-***") && text.contains("event=event-***"),
        "{text}"
    );
    assert!(text.contains("plugin=envrt.hostcalls"), "{text}");
    assert!(!text.contains(&secret), "the secret is in a tracing line");

    // every byte of the store (database and its WAL) — the worker's own state is there
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(root.path()).unwrap().flatten() {
        if entry.file_name().to_string_lossy().starts_with("leases.db") {
            bytes.extend(std::fs::read(entry.path()).unwrap());
        }
    }
    let haystack = String::from_utf8_lossy(&bytes);
    assert!(haystack.contains("not-the-secret"), "the state row is in the file");
    assert!(!haystack.contains(&secret), "the secret is in the store");
}
