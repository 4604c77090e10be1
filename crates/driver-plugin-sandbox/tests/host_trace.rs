//! Trace context to the worker: every request carries a fresh W3C `traceparent` in its
//! `paperclipInvocation`, so a real SDK worker (tests/fixtures/sdk-host-calls) turns its
//! `ctx.tracer` spans on and sends them to the host as `span.record`, which the host
//! records as a `tracing` event.

mod host_calls_common;
mod host_common;

use std::time::{Duration, Instant};

use envrt_driver_plugin_sandbox::SandboxOptions;
use envrt_runtime_core::LeaseStatus;
use host_calls_common::*;
use host_common::*;
use serde_json::json;

/// The `traceparent=` values of the captured "plugin request" events of `method`.
fn traceparents(text: &str, method: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains("plugin request") && l.contains(&format!("method={method}")))
        .filter_map(|l| {
            l.split(" traceparent=")
                .nth(1)?
                .split_whitespace()
                .next()
                .map(str::to_owned)
        })
        .collect()
}

fn well_formed(traceparent: &str) -> bool {
    let parts: Vec<&str> = traceparent.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    parts.len() == 4
        && parts[0] == "00"
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && parts[3] == "01"
        && parts[1] != "0".repeat(32)
}

#[tokio::test]
async fn each_request_carries_a_traceparent_and_the_workers_spans_reach_the_host() {
    let captured = start_capture();
    let (driver, runtime, lease) = lease_on(manifest(None), SandboxOptions::default()).await;
    let calls = json!([{"op": "span", "name": "pack", "attributes": {"files": 3}}]);
    let out = bounded("span", run(&runtime, &lease, &calls)).await;
    assert_eq!(out, vec![json!({"ok": null})]);
    // `span.record` is fire-and-forget in the SDK and answered on a task of its own: wait
    // (bounded) for its event.
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let text = captured.lock().unwrap().clone();
        if text.contains("plugin span") {
            let line = text.lines().find(|l| l.contains("plugin span")).unwrap();
            assert!(line.contains("span=pack"), "{line}");
            assert!(line.contains("envrt.hostcalls"), "{line}");
            let sent = traceparents(&text, "environmentExecute");
            assert_eq!(sent.len(), 1, "{text}");
            assert!(well_formed(&sent[0]), "{}", sent[0]);
            let acquired = traceparents(&text, "environmentAcquireLease");
            assert!(acquired.iter().all(|t| well_formed(t) && *t != sent[0]), "{acquired:?}");
            break;
        }
        assert!(Instant::now() < until, "no span.record reached the host: {text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}
