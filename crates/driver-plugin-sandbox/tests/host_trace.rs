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
        // (the capture is shared with this binary's other test: its span is another name)
        if let Some(line) = text
            .lines()
            .find(|l| l.contains("plugin span") && l.contains("span=pack"))
        {
            assert!(line.contains("envrt.hostcalls"), "{line}");
            let sent = traceparents(&text, "environmentExecute");
            assert_eq!(sent.len(), 1, "{text}");
            assert!(well_formed(&sent[0]), "{}", sent[0]);
            let acquired = traceparents(&text, "environmentAcquireLease");
            assert!(acquired.iter().all(|t| well_formed(t) && *t != sent[0]), "{acquired:?}");
            // The span is parented under the execute it was recorded in, from the host's
            // own record of that invocation, with a span id of its own.
            let parts: Vec<&str> = sent[0].split('-').collect();
            assert!(line.contains(&format!("trace_id={}", parts[1])), "{line}");
            assert!(line.contains(&format!("parent_span_id={}", parts[2])), "{line}");
            let own = line
                .split(" span_id=")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap();
            assert!(own.len() == 16 && own != parts[2], "{line}");
            break;
        }
        assert!(Instant::now() < until, "no span.record reached the host: {text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

/// The value of ` {name}=` in a captured line.
fn field<'a>(line: &'a str, name: &str) -> &'a str {
    let after = line
        .split(&format!(" {name}="))
        .nth(1)
        .unwrap_or_else(|| panic!("no {name} in {line}"));
    after.split(' ').next().unwrap_or_default()
}

#[tokio::test]
async fn a_span_naming_an_invocation_the_host_has_not_in_flight_gets_no_parent() {
    let captured = start_capture();
    let driver = start(script_manifest("", &[]), SandboxOptions::default()).await;
    // The worker stamps an invocation id of its own making on a span.record request.
    let forged = json!({
        "jsonrpc": "2.0",
        "id": "w-forged",
        "method": "span.record",
        "params": {"name": "forged-span", "startTimeMs": 1, "endTimeMs": 2},
        "paperclipInvocationId": "00000000-0000-4000-8000-000000000000",
    });
    let _ = bounded("emit", driver.call("test.emit", json!({ "line": forged }))).await;
    let until = Instant::now() + Duration::from_secs(30);
    let line = loop {
        let text = captured.lock().unwrap().clone();
        if let Some(line) = text.lines().find(|l| l.contains("span=forged-span")) {
            break line.to_owned();
        }
        assert!(Instant::now() < until, "the forged span was not recorded: {text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        (
            field(&line, "trace_id"),
            field(&line, "parent_span_id"),
            field(&line, "span_id")
        ),
        ("", "", ""),
        "{line}"
    );
    driver.shutdown().await;
}
