//! Hostile or broken data plane frames, from the scriptable worker (which takes the offer
//! and writes whatever bytes a test gives it to the socket): the host holds a worker to
//! the same rules as on the JSON path, with the same texts.

mod host_common;

use std::sync::Arc;
use std::time::Duration;

use envrt_driver_plugin_sandbox::{DuplexLimits, RouteSlots, SandboxDriver, SandboxOptions};
use envrt_plugin_protocol::dataplane::{self as wire, EXTENSION, Kind};
use envrt_runtime_core::{DriverError, DuplexChannel, DuplexExit, EnvironmentRuntime, Lease};
use host_common::*;
use serde_json::json;

async fn setup(options: SandboxOptions) -> (Arc<SandboxDriver>, EnvironmentRuntime, Lease) {
    let options = SandboxOptions {
        route_slots: RouteSlots::new(4),
        ..options
    };
    let driver = start(script_manifest("plane", &[]), options).await;
    assert!(driver.supported_methods().contains(EXTENSION));
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    (driver, runtime, lease)
}

async fn open(runtime: &EnvironmentRuntime, lease: &Lease) -> Box<dyn DuplexChannel> {
    bounded("open", runtime.open_duplex_channel(&lease.id, &["cat".to_owned()]))
        .await
        .unwrap()
}

/// The route number of the one route the worker has open.
async fn only_route(driver: &SandboxDriver) -> u64 {
    let stats = bounded("stats", driver.call("test.stats", json!({}))).await.unwrap();
    let routes = stats["routes"].as_object().unwrap();
    assert_eq!(routes.len(), 1, "{stats}");
    wire::route_number(routes.keys().next().unwrap()).unwrap()
}

/// Makes the worker write `bytes` to the data plane socket.
async fn emit(driver: &SandboxDriver, bytes: &[u8]) {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    // the call may fail when the bytes make the host retire the worker
    let _ = bounded("emit", driver.call("test.planeEmit", json!({ "hex": hex }))).await;
}

async fn retired(driver: &SandboxDriver, bytes: &[u8]) {
    let pid = driver.worker_pid().unwrap();
    emit(driver, bytes).await;
    assert!(wait_gone(pid, Duration::from_secs(10)).await, "the worker was retired");
    // a call may still meet the retired worker until its exit is processed; then a new
    // one serves
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while driver.health().await.is_err() || driver.worker_pid() == Some(pid) {
        assert!(tokio::time::Instant::now() < deadline, "no worker was restarted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_frame_for_a_route_never_issued_retires_the_worker_and_ends_its_routes() {
    let (driver, runtime, lease) = setup(SandboxOptions::default()).await;
    let channel = open(&runtime, &lease).await;
    retired(&driver, &wire::encode(999_999_999, Kind::Data, b"forged")).await;
    assert_eq!(
        bounded("wait", channel.wait()).await.unwrap(),
        DuplexExit {
            exit_code: None,
            transport_closed: true
        }
    );
    channel.close().await.unwrap();
    // the restarted worker takes the data plane again
    assert_eq!(bounded("health", driver.health()).await.unwrap()["status"], "ok");
    assert!(driver.supported_methods().contains(EXTENSION));
}

#[tokio::test]
async fn a_malformed_frame_retires_the_worker() {
    let (driver, _runtime, _lease) = setup(SandboxOptions::default()).await;
    let mut unknown = wire::encode(1, Kind::Data, b"x");
    unknown[8] = 42;
    retired(&driver, &unknown).await;
    let mut oversized = wire::encode(1, Kind::Data, b"");
    oversized[9..].copy_from_slice(&(wire::MAX_PAYLOAD as u32 + 1).to_be_bytes());
    retired(&driver, &oversized).await;
}

#[tokio::test]
async fn output_past_the_credit_ends_the_route_at_the_buffered_bound() {
    let options = SandboxOptions {
        duplex_limits: DuplexLimits {
            max_buffered_bytes: 10,
            ..DuplexLimits::default()
        },
        ..SandboxOptions::default()
    };
    let (driver, runtime, lease) = setup(options).await;
    let channel = open(&runtime, &lease).await;
    let route = only_route(&driver).await;
    let pid = driver.worker_pid();
    // the window is 10 bytes: 16 unread bytes overran the credit
    emit(&driver, &wire::encode(route, Kind::Data, b"0123456789abcdef")).await;
    assert_eq!(bounded("wait", channel.wait()).await.unwrap().exit_code, None);
    assert_eq!(bounded("read", channel.read()).await.unwrap(), None);
    let err = channel.write(b"x").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Duplex route {} was ended by the host: unread output passed the buffered byte bound",
            wire::route_id(route)
        )
    );
    channel.close().await.unwrap();
    assert_eq!(driver.worker_pid(), pid, "an overrun ends the route, not the worker");
}

#[tokio::test]
async fn empty_data_frames_are_protocol_errors_and_exit_frames_settle_the_wait() {
    let (driver, runtime, lease) = setup(SandboxOptions::default()).await;
    let channel = open(&runtime, &lease).await;
    let route = only_route(&driver).await;
    for _ in 0..3 {
        emit(&driver, &wire::encode(route, Kind::Data, b"")).await;
    }
    assert_eq!(bounded("wait", channel.wait()).await.unwrap().exit_code, None);
    let err = channel.write(b"x").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Duplex route {} was ended by the host: 3 protocol errors (invalid or empty base64)",
            wire::route_id(route)
        )
    );
    channel.close().await.unwrap();

    // data then an exit frame: the bytes, then the code
    let channel = open(&runtime, &lease).await;
    let route = only_route(&driver).await;
    let mut bytes = wire::encode(route, Kind::Data, b"out");
    bytes.extend(wire::exit(route, Some(7), false));
    emit(&driver, &bytes).await;
    assert_eq!(
        bounded("wait", channel.wait()).await.unwrap(),
        DuplexExit {
            exit_code: Some(7),
            transport_closed: false
        }
    );
    assert_eq!(bounded("read", channel.read()).await.unwrap().unwrap(), b"out");
    assert_eq!(bounded("read", channel.read()).await.unwrap(), None);
    channel.close().await.unwrap();
}

#[tokio::test]
async fn a_close_frame_fails_later_writes_with_its_text_and_late_frames_are_dropped() {
    let (driver, runtime, lease) = setup(SandboxOptions::default()).await;
    let channel = open(&runtime, &lease).await;
    let route = only_route(&driver).await;
    channel.write(b"under the initial credit").await.unwrap();
    emit(&driver, &wire::encode(route, Kind::Close, b"Duplex channel is closed.")).await;
    let err = bounded("write", channel.write(b"more")).await.unwrap_err();
    assert!(matches!(err, DriverError::ChannelClosed), "{err:?}");
    assert_eq!(err.to_string(), "Duplex channel is closed.");
    channel.close().await.unwrap();
    // frames for the closed route (and credit for it) are dropped quietly
    let pid = driver.worker_pid();
    let mut late = wire::encode(route, Kind::Data, b"late");
    late.extend(wire::credit(route, 10));
    late.extend(wire::exit(route, Some(0), false));
    emit(&driver, &late).await;
    assert_eq!(bounded("health", driver.health()).await.unwrap()["status"], "ok");
    assert_eq!(driver.worker_pid(), pid);
}
