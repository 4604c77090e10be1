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
use envrt::core::process::SpawnRequest;
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

/// Acquires a lease of a local environment with cgroups off, arms a 2 s idle timeout and
/// spawns `command` on it; returns the lease id, its workspace and the process id.
fn quiet_lease(s: &Site, command: &str) -> (String, PathBuf, String) {
    // The CLI makes the state directory and the store first, as it would for itself.
    assert_eq!(s.run(&["lease", "list"]).code, Some(0));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
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
    })
}

#[test]
fn an_attached_reader_keeps_an_idle_lease_until_it_is_sigkilled() {
    let s = Site::new();
    let mark = marker();
    let _reaper = Reaper(mark.clone());
    // Says it started, then sleeps where no watchdog looks, printing nothing.
    let (id, ws, process) = quiet_lease(&s, &format!("echo started; cd / && HOME=/ exec sleep {mark}"));
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
