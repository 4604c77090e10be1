//! A stop drains: a request in flight when the stop comes still completes and the
//! service then reports it drained, new connections are no longer accepted, and a
//! request that outlives the drain bound is cut, the service reporting it did not drain.

mod common;

use std::time::Duration;

use common::Harness;
use envrt_serve::Limits;
use http_body_util::BodyExt as _;
use serde_json::json;

/// Reads body frames until one holds `needle`; returns everything read.
async fn read_until(body: &mut hyper::body::Incoming, needle: &str) -> String {
    let mut seen = String::new();
    while !seen.contains(needle) {
        let frame = body.frame().await.expect("the body ended").unwrap();
        if let Some(data) = frame.data_ref() {
            seen.push_str(&String::from_utf8_lossy(data));
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_at_the_stop_completes_and_new_ones_are_refused() {
    let mut h = Harness::start().await;
    let (_, token) = h.token("acme", &[]).await;
    let lease = h.acquire(&token, "local").await;
    let fifo = h.dir.path().join("go");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let script = format!("echo started; read x < {}; echo done", fifo.display());
    let body = json!({ "command": "sh", "args": ["-c", script] }).to_string();
    let response = h
        .open("POST", &format!("/v1/leases/{lease}/execute/stream"), &token, body)
        .await;
    let mut body = response.into_body();
    // "started" in the stream: the request is in flight.
    read_until(&mut body, "\"stream\":\"stdout\"").await;
    h.signal_stop();
    // The listener is closed once the stop is seen: a new connection fails (bounded).
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while tokio::net::UnixStream::connect(&h.socket).await.is_ok() {
        assert!(
            std::time::Instant::now() < until,
            "the service still accepts connections"
        );
        tokio::task::yield_now().await;
    }
    std::fs::write(&fifo, "go\n").unwrap();
    let rest = read_until(&mut body, "\"result\"").await;
    assert!(rest.contains("\"exitCode\":0"), "{rest}");
    assert!(h.stopped().await, "the in-flight request did not drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_the_drain_bound_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start_full(dir, Limits::default(), Duration::from_millis(200)).await;
    let (_, token) = h.token("acme", &[]).await;
    let lease = h.acquire(&token, "local").await;
    let fifo = h.dir.path().join("never");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let script = format!("echo started; read x < {}", fifo.display());
    let body = json!({ "command": "sh", "args": ["-c", script] }).to_string();
    let response = h
        .open("POST", &format!("/v1/leases/{lease}/execute/stream"), &token, body)
        .await;
    let mut body = response.into_body();
    read_until(&mut body, "\"stream\":\"stdout\"").await;
    h.signal_stop();
    assert!(!h.stopped().await, "a request that never ends was reported drained");
    // Let the command end, if it still reads (never blocking when nothing does).
    use std::os::unix::fs::OpenOptionsExt as _;
    if let Ok(mut writer) = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(&fifo)
    {
        let _ = std::io::Write::write_all(&mut writer, b"x\n");
    }
}
