//! Duplex routes on the host, against the scriptable worker: the ceiling, open failures,
//! the pre-bind hold, half-close, forged and late frames, protocol errors and bounds.

mod host_common;

use std::sync::Arc;
use std::time::Duration;

use envrt_driver_plugin_sandbox::{DuplexLimits, RouteSlots, SandboxDriver, SandboxOptions};
use envrt_runtime_core::{DuplexChannel, DuplexExit, EnvironmentRuntime, Lease};
use host_common::*;
use serde_json::{Value, json};

async fn setup(mode: &str, options: SandboxOptions) -> (Arc<SandboxDriver>, EnvironmentRuntime, Lease) {
    let driver = start(script_manifest(mode, &[]), options).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    (driver, runtime, lease)
}

fn own_slots(limit: usize) -> SandboxOptions {
    SandboxOptions {
        route_slots: RouteSlots::new(limit),
        ..SandboxOptions::default()
    }
}

async fn open(runtime: &EnvironmentRuntime, lease: &Lease) -> Box<dyn DuplexChannel> {
    match bounded("open", runtime.open_duplex_channel(&lease.id, &["cat".to_owned()])).await {
        Ok(channel) => channel,
        Err(e) => panic!("open failed: {e}"),
    }
}

async fn stats(driver: &SandboxDriver) -> Value {
    bounded("stats", driver.call("test.stats", json!({}))).await.unwrap()
}

/// The one live (route, session) pair the worker knows.
async fn only_route(driver: &SandboxDriver) -> (String, String) {
    let stats = stats(driver).await;
    let routes = stats["routes"].as_object().unwrap();
    assert_eq!(routes.len(), 1, "{stats}");
    let (route, session) = routes.iter().next().unwrap();
    (route.clone(), session.as_str().unwrap().to_owned())
}

async fn emit(driver: &SandboxDriver, method: &str, params: Value) {
    let line = json!({"jsonrpc": "2.0", "method": method, "params": params});
    // the call may fail when the line makes the host retire the worker
    let _ = bounded("emit", driver.call("test.emit", json!({ "line": line }))).await;
}

async fn read_all(channel: &dyn DuplexChannel) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(chunk) = bounded("read", channel.read()).await.unwrap() {
        out.extend(chunk);
    }
    out
}

#[tokio::test]
async fn the_129th_route_is_refused_with_nothing_sent_and_admitted_after_a_close() {
    let options = own_slots(128);
    let slots = options.route_slots.clone();
    let (driver, runtime, lease) = setup("", options).await;
    let mut channels = Vec::new();
    for _ in 0..128 {
        channels.push(open(&runtime, &lease).await);
    }
    assert_eq!(slots.in_use(), 128);
    let Err(err) = runtime.open_duplex_channel(&lease.id, &["cat".to_owned()]).await else {
        panic!("the 129th route must be refused")
    };
    assert_eq!(err.to_string(), "DUPLEX_CHANNEL_ROUTE_BUSY");
    assert_eq!(
        stats(&driver).await["opens"],
        128,
        "nothing was sent for the refused open"
    );
    channels.pop().unwrap().close().await.unwrap();
    assert_eq!(slots.in_use(), 127);
    channels.push(open(&runtime, &lease).await);
    assert_eq!(stats(&driver).await["opens"], 129);
    for channel in &channels {
        channel.close().await.unwrap();
    }
    assert_eq!(slots.in_use(), 0);
    assert_eq!(stats(&driver).await["closes"], 129);
}

#[tokio::test]
async fn a_non_echoing_open_reply_fails_and_the_next_open_works() {
    let options = own_slots(4);
    let slots = options.route_slots.clone();
    let (driver, runtime, lease) = setup("bad-open", options).await;
    let pid = driver.worker_pid();
    let Err(err) = runtime.open_duplex_channel(&lease.id, &["cat".to_owned()]).await else {
        panic!("a non-echoing reply must fail the open")
    };
    assert_eq!(err.to_string(), "DUPLEX_CHANNEL_OPEN_FAILED");
    assert_eq!(slots.in_use(), 0, "the failed open gave its slot back");
    let channel = open(&runtime, &lease).await;
    channel.write(b"ping").await.unwrap();
    assert_eq!(bounded("read", channel.read()).await.unwrap().unwrap(), b"ping");
    channel.close().await.unwrap();
    assert_eq!(driver.worker_pid(), pid, "an open failure does not retire the worker");
}

#[tokio::test]
async fn an_open_past_the_duplex_timeout_names_the_timeout_and_the_next_open_works() {
    // 1,000 opens sent at once queue behind each other in the worker; under load the last
    // ones pass the open timeout. The caller must see that limit, not a generic failure.
    let options = SandboxOptions {
        duplex_timeout: Duration::from_millis(300),
        ..own_slots(4)
    };
    let slots = options.route_slots.clone();
    let (driver, runtime, lease) = setup("silent-open", options).await;
    let pid = driver.worker_pid();
    let Err(err) = runtime.open_duplex_channel(&lease.id, &["cat".to_owned()]).await else {
        panic!("an unanswered open must fail")
    };
    assert_eq!(err.to_string(), "RPC call \"duplexChannelOpen\" timed out after 300ms");
    assert_eq!(slots.in_use(), 0, "the timed-out open gave its slot back");
    let channel = open(&runtime, &lease).await;
    channel.write(b"ping").await.unwrap();
    assert_eq!(bounded("read", channel.read()).await.unwrap().unwrap(), b"ping");
    channel.close().await.unwrap();
    assert_eq!(driver.worker_pid(), pid, "a timed-out open does not retire the worker");
}

#[tokio::test]
async fn an_open_the_worker_refuses_carries_the_workers_reason() {
    let options = own_slots(4);
    let slots = options.route_slots.clone();
    let (_driver, runtime, lease) = setup("refuse-open", options).await;
    let Err(err) = runtime.open_duplex_channel(&lease.id, &["cat".to_owned()]).await else {
        panic!("a refused open must fail")
    };
    assert_eq!(
        err.to_string(),
        "Starting bwrap: Resource temporarily unavailable (os error 11)"
    );
    assert_eq!(slots.in_use(), 0, "the refused open gave its slot back");
    let channel = open(&runtime, &lease).await;
    channel.close().await.unwrap();
}

#[tokio::test]
async fn frames_before_the_open_reply_are_held_and_replayed_in_order_then_half_close() {
    let (_driver, runtime, lease) = setup("early-data", own_slots(4)).await;
    let channel = open(&runtime, &lease).await;
    assert_eq!(bounded("read", channel.read()).await.unwrap().unwrap(), b"early-1");
    assert_eq!(bounded("read", channel.read()).await.unwrap().unwrap(), b"early-2");
    let payload: Vec<u8> = (0..=255u8).collect();
    channel.write(&payload).await.unwrap();
    assert_eq!(bounded("read", channel.read()).await.unwrap().unwrap(), payload);
    // the worker advertises duplexChannelCloseInput: EOF ends the command with 0
    channel.close_input().await.unwrap();
    let exit = bounded("wait", channel.wait()).await.unwrap();
    assert_eq!(
        exit,
        DuplexExit {
            exit_code: Some(0),
            transport_closed: false
        }
    );
    assert_eq!(bounded("read", channel.read()).await.unwrap(), None);
    channel.close().await.unwrap();
}

#[tokio::test]
async fn a_frame_for_a_pair_never_issued_retires_the_worker() {
    let (driver, runtime, lease) = setup("", own_slots(4)).await;
    let channel = open(&runtime, &lease).await;
    let (route, _session) = only_route(&driver).await;
    let old_pid = driver.worker_pid().unwrap();
    emit(
        &driver,
        "duplexChannel.data",
        json!({"hostRouteId": route, "workerSessionId": "forged", "chunk": "aGk="}),
    )
    .await;
    assert!(
        wait_gone(old_pid, Duration::from_secs(10)).await,
        "the worker was retired"
    );
    // the route ended with exit code none
    let exit = bounded("wait", channel.wait()).await.unwrap();
    assert_eq!(
        exit,
        DuplexExit {
            exit_code: None,
            transport_closed: true
        }
    );
    // reads fail with the worker's exit (not a quiet end of output)
    let err = bounded("read", channel.read()).await.unwrap_err();
    assert_eq!(err.to_string(), "Worker process exited (code=null, signal=SIGKILL)");
    channel.close().await.unwrap();
    // a restarted worker serves; a forged route id retires it again
    restarted(&driver, old_pid).await;
    assert_eq!(bounded("health", driver.health()).await.unwrap()["status"], "ok");
    let second_pid = driver.worker_pid().unwrap();
    assert_ne!(second_pid, old_pid);
    emit(
        &driver,
        "duplexChannel.exit",
        json!({"hostRouteId": "duplex-route-999999999", "workerSessionId": "s-1", "exitCode": 0}),
    )
    .await;
    assert!(wait_gone(second_pid, Duration::from_secs(10)).await);
}

#[tokio::test]
async fn late_frames_for_a_closed_pair_are_dropped_quietly() {
    let (driver, runtime, lease) = setup("", own_slots(4)).await;
    let channel = open(&runtime, &lease).await;
    let (route, session) = only_route(&driver).await;
    channel.close().await.unwrap();
    let pid = driver.worker_pid();
    emit(
        &driver,
        "duplexChannel.data",
        json!({"hostRouteId": route, "workerSessionId": session, "chunk": "aGk="}),
    )
    .await;
    emit(
        &driver,
        "duplexChannel.exit",
        json!({"hostRouteId": route, "workerSessionId": session, "exitCode": 1}),
    )
    .await;
    assert_eq!(bounded("health", driver.health()).await.unwrap()["status"], "ok");
    assert_eq!(driver.worker_pid(), pid);
    // a late frame naming the closed route with another session is still forged
    emit(
        &driver,
        "duplexChannel.data",
        json!({"hostRouteId": route, "workerSessionId": "other", "chunk": "aGk="}),
    )
    .await;
    assert!(wait_gone(pid.unwrap(), Duration::from_secs(10)).await);
}

#[tokio::test]
async fn invalid_base64_counts_as_protocol_errors_and_ends_the_route() {
    let (driver, runtime, lease) = setup("", own_slots(4)).await;
    let channel = open(&runtime, &lease).await;
    let (route, session) = only_route(&driver).await;
    let pid = driver.worker_pid();
    for bad in ["", "not base64!", "aGl="] {
        emit(
            &driver,
            "duplexChannel.data",
            json!({"hostRouteId": route, "workerSessionId": session, "chunk": bad}),
        )
        .await;
    }
    let exit = bounded("wait", channel.wait()).await.unwrap();
    assert_eq!(
        exit,
        DuplexExit {
            exit_code: None,
            transport_closed: false
        }
    );
    assert_eq!(bounded("read", channel.read()).await.unwrap(), None);
    let err = channel.write(b"x").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Duplex route {route} was ended by the host: 3 protocol errors (invalid or empty base64)")
    );
    // the host asked the worker to close the route; the worker itself stays
    channel.close().await.unwrap();
    assert_eq!(driver.worker_pid(), pid);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while stats(&driver).await["routes"].as_object().unwrap().contains_key(&route) {
        assert!(tokio::time::Instant::now() < deadline, "the worker never got the close");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn unread_output_past_the_buffer_bound_ends_the_route() {
    let options = SandboxOptions {
        duplex_limits: DuplexLimits {
            max_buffered_bytes: 10,
            ..DuplexLimits::default()
        },
        ..own_slots(4)
    };
    let (_driver, runtime, lease) = setup("", options).await;
    let channel = open(&runtime, &lease).await;
    channel.write(b"123456").await.unwrap();
    // the echo of the second write passes 10 unread bytes
    channel.write(b"789012").await.unwrap();
    let exit = bounded("wait", channel.wait()).await.unwrap();
    assert_eq!(exit.exit_code, None);
    assert_eq!(read_all(channel.as_ref()).await, b"");
    let err = channel.write(b"x").await.unwrap_err();
    assert!(
        err.to_string()
            .ends_with("unread output passed the buffered byte bound"),
        "{err}"
    );
    channel.close().await.unwrap();
}

#[tokio::test]
async fn chunks_over_the_chunk_bound_end_the_route_and_writes_are_split() {
    let options = SandboxOptions {
        duplex_limits: DuplexLimits {
            max_chunk_bytes: 4,
            ..DuplexLimits::default()
        },
        ..own_slots(4)
    };
    let (driver, runtime, lease) = setup("", options).await;
    let channel = open(&runtime, &lease).await;
    // a 10-byte write goes out as 4 + 4 + 2 and comes back in those pieces
    channel.write(b"abcdefghij").await.unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(bounded("read", channel.read()).await.unwrap().unwrap());
    }
    assert_eq!(got, [b"abcd".to_vec(), b"efgh".to_vec(), b"ij".to_vec()]);
    assert_eq!(stats(&driver).await["writes"], 3);
    let (route, session) = only_route(&driver).await;
    emit(
        &driver,
        "duplexChannel.data",
        json!({"hostRouteId": route, "workerSessionId": session, "chunk": "aGVsbG8="}),
    )
    .await;
    assert_eq!(bounded("wait", channel.wait()).await.unwrap().exit_code, None);
    let err = channel.write(b"x").await.unwrap_err();
    assert!(
        err.to_string().ends_with("a chunk of 5 bytes passed the chunk bound"),
        "{err}"
    );
    channel.close().await.unwrap();
}

#[tokio::test]
async fn a_close_ack_that_does_not_echo_the_ids_retires_the_worker() {
    let (driver, runtime, lease) = setup("bad-close-ack", own_slots(4)).await;
    let channel = open(&runtime, &lease).await;
    let (route, _) = only_route(&driver).await;
    let pid = driver.worker_pid().unwrap();
    let err = channel.close().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Duplex close of {route} was not acknowledged with the route's ids; the worker was retired.")
    );
    assert!(wait_gone(pid, Duration::from_secs(10)).await);
    // close stays idempotent
    channel.close().await.unwrap();
}

#[tokio::test]
async fn an_exit_settles_the_wait_but_holds_the_slot_until_close() {
    let options = own_slots(1);
    let slots = options.route_slots.clone();
    let (_driver, runtime, lease) = setup("", options).await;
    let channel = open(&runtime, &lease).await;
    channel.stop().await.unwrap();
    assert_eq!(bounded("wait", channel.wait()).await.unwrap().exit_code, None);
    let Err(err) = runtime.open_duplex_channel(&lease.id, &["cat".to_owned()]).await else {
        panic!("the exited route still holds the only slot")
    };
    assert_eq!(err.to_string(), "DUPLEX_CHANNEL_ROUTE_BUSY");
    channel.close().await.unwrap();
    assert_eq!(slots.in_use(), 0);
    let channel = open(&runtime, &lease).await;
    drop(channel);
    assert_eq!(slots.in_use(), 0, "dropping a channel frees its slot");
}

#[tokio::test]
async fn output_held_before_binding_past_the_bound_ends_the_route_at_bind() {
    let options = SandboxOptions {
        duplex_limits: DuplexLimits {
            max_buffered_bytes: 10,
            ..DuplexLimits::default()
        },
        ..own_slots(4)
    };
    // the worker sends 14 bytes before its open reply
    let (_driver, runtime, lease) = setup("early-data", options).await;
    let channel = open(&runtime, &lease).await;
    assert_eq!(bounded("wait", channel.wait()).await.unwrap().exit_code, None);
    assert_eq!(bounded("read", channel.read()).await.unwrap(), None);
    let err = channel.write(b"x").await.unwrap_err();
    assert!(
        err.to_string()
            .ends_with("output held before the open reply passed the buffered bound"),
        "{err}"
    );
    channel.close().await.unwrap();
}

#[tokio::test]
async fn a_route_past_its_lifetime_ends_and_the_worker_is_told() {
    let options = SandboxOptions {
        duplex_limits: DuplexLimits {
            max_lifetime: Duration::from_millis(300),
            ..DuplexLimits::default()
        },
        ..own_slots(4)
    };
    let (driver, runtime, lease) = setup("", options).await;
    let channel = open(&runtime, &lease).await;
    let (route, _) = only_route(&driver).await;
    assert_eq!(
        bounded("wait", channel.wait()).await.unwrap(),
        DuplexExit {
            exit_code: None,
            transport_closed: false
        }
    );
    let err = channel.write(b"x").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Duplex route {route} was ended by the host: the route passed its lifetime")
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while stats(&driver).await["routes"].as_object().unwrap().contains_key(&route) {
        assert!(tokio::time::Instant::now() < deadline, "the worker never got the close");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    channel.close().await.unwrap();
}

#[tokio::test]
async fn a_late_frame_whose_tombstone_was_evicted_is_still_dropped_quietly() {
    let options = SandboxOptions {
        duplex_limits: DuplexLimits {
            max_tombstones: 1,
            ..DuplexLimits::default()
        },
        ..own_slots(4)
    };
    let (driver, runtime, lease) = setup("", options).await;
    let first = open(&runtime, &lease).await;
    let (old_route, old_session) = only_route(&driver).await;
    first.close().await.unwrap();
    // the second close evicts the first route's tombstone
    open(&runtime, &lease).await.close().await.unwrap();
    let pid = driver.worker_pid();
    emit(
        &driver,
        "duplexChannel.data",
        json!({"hostRouteId": old_route, "workerSessionId": old_session, "chunk": "aGk="}),
    )
    .await;
    assert_eq!(bounded("health", driver.health()).await.unwrap()["status"], "ok");
    assert_eq!(driver.worker_pid(), pid);
}
