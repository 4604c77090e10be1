//! `envrt lease extend ID --ttl DURATION` on the local driver: the expiry watchdog is
//! re-armed for the new time (the old one is gone, a shorter one ends the lease by itself
//! with no holder), `max_ttl` bounds both the extend and a new lease's expiry, and every
//! refusal has its exact text.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::Site;

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

fn workspace(lease: &serde_json::Value) -> PathBuf {
    PathBuf::from(lease["metadata"]["workspace"].as_str().unwrap())
}

/// The seconds each live expiry watchdog of `workspace` sleeps (its `$1`).
fn expiry_watchdogs(workspace: &std::path::Path) -> Vec<f64> {
    let ws = workspace.to_str().unwrap().as_bytes();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            (args.len() > 6 && args[3] == b"envrt-local-expiry" && args[6] == ws)
                .then(|| std::str::from_utf8(args[4]).ok()?.parse::<f64>().ok())
                .flatten()
        })
        .collect()
}

fn acquire(s: &Site, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["lease", "acquire", "--detached", "--json"];
    all.extend_from_slice(args);
    let out = s.run(&all);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A millisecond timestamp of a lease record as the CLI prints it.
fn rfc3339(value: &serde_json::Value) -> String {
    envrt::Timestamp(value.as_u64().expect("a timestamp")).to_rfc3339()
}

fn show(s: &Site, id: &str) -> serde_json::Value {
    let out = s.run(&["lease", "show", id, "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["lease"].clone()
}

#[test]
fn extend_rearms_the_expiry_and_a_shorter_one_ends_the_lease_by_itself() {
    let s = Site::new();
    let lease = acquire(&s, &["--ttl", "30s"]);
    let id = lease["id"].as_str().unwrap().to_owned();
    let ws = workspace(&lease);
    let before = expiry_watchdogs(&ws);
    assert_eq!(before.len(), 1, "{before:?}");
    assert!(before[0] <= 30.0, "{before:?}");
    // Later: one watchdog, for the new time.
    let out = s.run(&["lease", "extend", &id, "--ttl", "1h"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let shown = show(&s, &id);
    assert_eq!(
        out.stdout_text(),
        format!("{id} expires at {}\n", rfc3339(&shown["expiresAt"]))
    );
    assert!(
        shown["expiresAt"].as_u64() > lease["expiresAt"].as_u64(),
        "{shown} {lease}"
    );
    let after = expiry_watchdogs(&ws);
    assert_eq!(after.len(), 1, "the old watchdog is left: {after:?}");
    assert!(after[0] > 3500.0, "{after:?}");
    // Earlier: the lease ends at the new time with nobody holding it.
    let out = s.run(&["lease", "extend", &id, "--ttl", "1s"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(eventually(|| !ws.exists()), "the lease outlived its moved expiry");
    assert!(eventually(|| expiry_watchdogs(&ws).is_empty()));
    // Past it, extend is refused with the expiry's text.
    let shown = show(&s, &id);
    let out = s.run(&["lease", "extend", &id, "--ttl", "1h"]);
    assert_eq!(out.code, Some(2));
    assert_eq!(
        out.stderr,
        format!("Lease \"{id}\" expired at {}.\n", rfc3339(&shown["expiresAt"]))
    );
}

#[test]
fn extend_refusals_have_their_exact_texts() {
    let s = Site::new();
    let bad = s.run(&["lease", "extend", "x", "--ttl", "soon"]);
    assert_eq!(bad.code, Some(2));
    assert_eq!(
        bad.stderr,
        "envrt: --ttl expects a positive duration such as 90, 1.5, 500ms, 1s, 2m or 1h30m, got \"soon\"\n"
    );
    let missing = s.run(&["lease", "extend", "nope", "--ttl", "1m"]);
    assert_eq!(missing.code, Some(2));
    assert_eq!(missing.stderr, "Lease \"nope\" was not found.\n");
    // A lease without an expiry has nothing to move.
    let plain = acquire(&s, &[]);
    let id = plain["id"].as_str().unwrap().to_owned();
    let out = s.run(&["lease", "extend", &id, "--ttl", "1m"]);
    assert_eq!(out.code, Some(2));
    assert_eq!(
        out.stderr,
        format!("Invalid input: lease \"{id}\" has no expiry to move\n")
    );
    // An ended lease.
    let timed = acquire(&s, &["--ttl", "1h"]);
    let timed_id = timed["id"].as_str().unwrap().to_owned();
    assert_eq!(s.run(&["lease", "release", &timed_id]).code, Some(0));
    let out = s.run(&["lease", "extend", &timed_id, "--ttl", "1m"]);
    assert_eq!(out.code, Some(2));
    assert_eq!(
        out.stderr,
        format!("Lease \"{timed_id}\" is not active (status: released).\n")
    );
    assert_eq!(s.run(&["lease", "release", &id]).code, Some(0));
}

#[test]
fn max_ttl_bounds_extend_and_a_new_lease() {
    let s = Site::new();
    std::fs::write(
        s.path().join("envrt.toml"),
        "default = \"capped\"\n[[environment]]\nid = \"capped\"\ndriver = \"local\"\nmax_ttl = \"1h\"\n",
    )
    .unwrap();
    // No expiry asked for: the lease gets max_ttl.
    let lease = acquire(&s, &[]);
    let id = lease["id"].as_str().unwrap().to_owned();
    let acquired_ms = lease["acquiredAt"].as_u64().unwrap();
    assert!(
        lease["expiresAt"]
            .as_u64()
            .is_some_and(|at| at > acquired_ms && at <= acquired_ms + 3_600_000),
        "{lease}"
    );
    assert_eq!(expiry_watchdogs(&workspace(&lease)).len(), 1);
    // Within it, extend moves the expiry; past it, refused.
    let out = s.run(&["lease", "extend", &id, "--ttl", "30m"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = s.run(&["lease", "extend", &id, "--ttl", "2h"]);
    assert_eq!(out.code, Some(2));
    let acquired = rfc3339(&lease["acquiredAt"]);
    assert!(
        out.stderr.starts_with("Invalid input: the new expiry ")
            && out.stderr.ends_with(&format!(
                " is past environment \"capped\"'s max_ttl of 3600 s from the lease's acquire at {acquired}\n"
            )),
        "{}",
        out.stderr
    );
    // A new lease asking for more is refused, and nothing is left of it.
    let out = s.run(&["lease", "acquire", "--detached", "--ttl", "2h"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.starts_with("Invalid input: the requested expiry ")
            && out
                .stderr
                .ends_with(" is past environment \"capped\"'s max_ttl of 3600 s\n"),
        "{}",
        out.stderr
    );
    let out = s.run(&["lease", "list", "--all", "--json"]);
    let leases: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(leases.len(), 1, "{leases:?}");
    assert_eq!(s.run(&["lease", "release", &id]).code, Some(0));
    // Bad values in envrt.toml.
    std::fs::write(
        s.path().join("envrt.toml"),
        "[[environment]]\nid = \"capped\"\ndriver = \"local\"\nttl = \"2h\"\nmax_ttl = \"1h\"\n",
    )
    .unwrap();
    let out = s.run(&["lease", "list"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .ends_with(": environment \"capped\": ttl \"2h\" is longer than max_ttl \"1h\"\n"),
        "{}",
        out.stderr
    );
}
