//! An attached reader is idle-time activity, on the local driver: `envrt logs --follow`
//! from another program keeps a lease with a 2 s idle timeout alive for as long as it
//! reads, and once that reader is SIGKILLed the lease ends by its idle timeout.
//!
//! The process read is one the idle watchdog cannot see: the lease is made through the
//! facade with the local driver's cgroups off (`LocalConfig::cgroups = false`, which the
//! CLI has no switch for), and the process leaves the workspace (`cd /`, `HOME=/`), so
//! neither a cgroup nor the workspace ties show it. Only the reader keeps the lease, as the
//! end after the reader's death shows.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Reaper, Site, marker, survivors};
use envrt::core::process::{Offsets, OutputEvent, SpawnRequest};
use envrt::core::{AcquireRequest, Environment};

/// Waits (bounded, 60 s) until `done` holds; whether it did.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(60);
    while !done() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// A facade over the CLI's store and workspace root with the local driver's cgroups off,
/// and the tokio runtime it runs on.
fn facade(s: &Site) -> (tokio::runtime::Runtime, envrt::EnvironmentRuntime) {
    // The CLI makes the state directory and the store first, as it would for itself.
    assert_eq!(s.run(&["lease", "list"]).code, Some(0));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let runtime = rt.block_on(async {
        let store = envrt::SqliteStore::open(s.state().join("leases.db")).await.unwrap();
        let runtime = envrt::RuntimeBuilder::new()
            .store(Arc::new(store))
            .tenant("local")
            .configure(envrt::local::LocalConfig {
                root: Some(s.state().join("workspaces")),
                cgroups: false,
                ..Default::default()
            })
            .build()
            .await
            .unwrap();
        runtime
            .put_environment(Environment::new("quiet", "Quiet", "local"))
            .await
            .unwrap();
        runtime
    });
    (rt, runtime)
}

/// Acquires a lease of the cgroup-less local environment, arms a 2 s idle timeout and
/// spawns `command` on it; returns the lease id, its workspace and the process id.
async fn quiet_lease(runtime: &envrt::EnvironmentRuntime, command: &str) -> (String, PathBuf, String) {
    let lease = runtime
        .acquire_lease(AcquireRequest::new("quiet", "local"))
        .await
        .unwrap();
    runtime
        .set_idle_timeout(&lease.id, Duration::from_secs(2))
        .await
        .unwrap();
    let workspace = PathBuf::from(lease.metadata["workspace"].as_str().unwrap());
    let request = SpawnRequest {
        argv: vec!["sh".into(), "-c".into(), command.into()],
        ..Default::default()
    };
    let process = runtime.spawn(&lease.id, request).await.unwrap();
    (lease.id, workspace, process.id.to_string())
}

/// Says it started, then sleeps where no watchdog looks, printing nothing.
fn quiet(mark: &str) -> String {
    format!("echo started; cd / && HOME=/ exec sleep {mark}")
}

#[test]
fn an_attached_reader_keeps_an_idle_lease_until_it_is_sigkilled() {
    let s = Site::new();
    let mark = marker();
    let _reaper = Reaper(mark.clone());
    let (rt, runtime) = facade(&s);
    let (id, ws, process) = rt.block_on(quiet_lease(&runtime, &quiet(&mark)));
    drop(runtime);
    let mut reader = s
        .command(&["logs", "--follow", &process])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(reader.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "started", "the reader never attached");
    // Three idle timeouts and more pass with the reader attached and nothing else going
    // on: the lease is still there (waiting to show it did not end).
    std::thread::sleep(Duration::from_secs(8));
    assert!(ws.is_dir(), "a lease with an attached reader was ended as idle");
    assert!(
        !common::sleepers(&mark).is_empty(),
        "the process read is gone: the test shows nothing"
    );
    // The reader dies without a word: the lease is idle from its last touch, and ends
    // although its process still sleeps (the watchdog cannot see it).
    reader.kill().unwrap();
    reader.wait().unwrap();
    assert!(eventually(|| !ws.exists()), "the idle lease was never ended");
    let kept = s.run(&["lease", "keep-alive", &id]);
    assert_eq!(kept.code, Some(2));
    assert_eq!(kept.stderr, format!("Lease \"{id}\" ended after its idle timeout.\n"));
    assert_eq!(
        survivors(ws.to_str().unwrap()),
        Vec::<u32>::new(),
        "the idle watchdog outlived the lease"
    );
    // The sleep that left the workspace escapes the fallback's scan at the end as it
    // escaped the watchdog's look (docs/security.md, local, "fallback"): the reaper ends it.
}

#[test]
fn a_dropped_output_stream_stops_keeping_the_lease() {
    let s = Site::new();
    let mark = marker();
    let _reaper = Reaper(mark.clone());
    let (rt, runtime) = facade(&s);
    rt.block_on(async {
        let (_, ws, process) = quiet_lease(&runtime, &quiet(&mark)).await;
        let mut output = runtime.output(&process, &Offsets::zero()).await.unwrap();
        match output.next().await.unwrap() {
            Some(OutputEvent::Chunk(chunk)) => assert_eq!(chunk.bytes, b"started\n"),
            other => panic!("expected the first chunk, got {other:?}"),
        }
        // Open and read from, the stream keeps the lease past three idle timeouts.
        tokio::time::sleep(Duration::from_secs(8)).await;
        assert!(ws.is_dir(), "a lease with an open output stream was ended as idle");
        // Dropped, it keeps nothing, though the program that read it lives on.
        drop(output);
        let until = Instant::now() + Duration::from_secs(60);
        while ws.exists() {
            assert!(
                Instant::now() < until,
                "the lease was kept after its stream was dropped"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}
