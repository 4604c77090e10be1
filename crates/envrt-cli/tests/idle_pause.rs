//! `on_idle = "pause"` on the local driver: the idle watchdog pauses an idle lease
//! instead of ending it, with its holder SIGKILLed; the next operation finds it paused
//! (`Lease "{id}" is paused.`), `lease unpause` continues it and its idle clock starts
//! again; its expiry keeps running while it is paused; `envrt.toml`'s `on_idle` is the
//! default.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{BIN, Reaper, Site, marker, survivors};

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

/// The lease's activity stamp, next to its workspace.
fn stamp(lease: &serde_json::Value) -> PathBuf {
    let ws = workspace(lease);
    let name = ws.file_name().unwrap().to_str().unwrap().to_owned();
    ws.parent().unwrap().join(format!(".idle-{name}"))
}

fn idle_paused(lease: &serde_json::Value) -> bool {
    std::fs::read(stamp(lease)).is_ok_and(|text| text == b"idle-paused")
}

/// The processes tied to the workspace (working directory in it, or `HOME` it), with
/// their state letters.
fn tied(ws: &std::path::Path) -> Vec<(u32, char)> {
    let home = format!("HOME={}", ws.display());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let cwd = std::fs::read_link(e.path().join("cwd")).ok();
            let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
            let by_home = env.split(|b| *b == 0).any(|v| v == home.as_bytes());
            if !(by_home || cwd.is_some_and(|c| c.starts_with(ws))) {
                return None;
            }
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            (state != 'Z').then_some((pid, state))
        })
        .collect()
}

/// Whether process `pid` is in a frozen cgroup v2 (`frozen 1` in its `cgroup.events`,
/// under any cgroup2 mount).
fn frozen(pid: u32) -> bool {
    let Some(path) = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()
        .and_then(|text| text.lines().find_map(|l| l.strip_prefix("0::").map(str::to_owned)))
    else {
        return false;
    };
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounts
        .lines()
        .filter(|l| l.contains(" - cgroup2 "))
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mount| {
            std::fs::read_to_string(format!("{mount}{path}/cgroup.events"))
                .is_ok_and(|e| e.lines().any(|l| l == "frozen 1"))
        })
}

fn record(s: &Site, id: &str) -> serde_json::Value {
    let out = s.run(&["lease", "show", id, "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["lease"].clone()
}

#[test]
fn an_idle_lease_is_paused_with_its_holder_sigkilled_and_unpause_continues_it() {
    let s = Site::new();
    let mark = marker();
    let _reaper = Reaper(mark.clone());
    let script =
        format!("\"{BIN}\" lease acquire --idle-timeout 1s --on-idle pause --json > lease.json && exec sleep {mark}");
    let mut holder = std::process::Command::new("sh")
        .args(["-c", &script])
        .current_dir(s.path())
        .env("ENVRT_STATE_DIR", s.state())
        .env_remove("ENVRT_CONFIG")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(|| !common::sleepers(&mark).is_empty()),
        "the holder never took its lease"
    );
    let lease: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.path().join("lease.json")).unwrap()).unwrap();
    assert_eq!(lease["metadata"]["envrtOnIdle"], "pause", "{lease}");
    let id = lease["id"].as_str().unwrap().to_owned();
    let ws = workspace(&lease);
    holder.kill().unwrap();
    holder.wait().unwrap();
    // Nobody touches it: the watchdog pauses it, and it stays (its workspace too).
    assert!(eventually(|| idle_paused(&lease)), "the idle lease was never paused");
    assert!(ws.is_dir(), "the idle lease was ended instead of paused");
    // The next operation finds it paused, and it is listed so from then on.
    let refused = s.run(&["exec", "--lease", &id, "--", "true"]);
    assert_eq!(refused.code, Some(2));
    assert_eq!(refused.stderr, format!("Lease \"{id}\" is paused.\n"));
    assert!(record(&s, &id)["metadata"]["envrtPausedAt"].is_u64());
    assert_eq!(
        std::fs::read(stamp(&lease)).unwrap(),
        b"paused",
        "the pause was not acknowledged"
    );
    // Unpaused, it runs commands again, and its idle clock starts again.
    let unpaused = s.run(&["lease", "unpause", &id]);
    assert_eq!(unpaused.code, Some(0), "{}", unpaused.stderr);
    assert_eq!(unpaused.stdout_text(), format!("{id} unpaused\n"));
    assert!(record(&s, &id)["metadata"]["envrtPausedAt"].is_null());
    let ran = s.run(&["exec", "--lease", &id, "--", "echo", "again"]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert_eq!(ran.stdout_text(), "again\n");
    // A spawned process that has ended leaves the lease's supervisor running (not
    // activity): the pause stops it with the rest.
    let spawned = s.run(&["spawn", "--lease", &id, "--", "true"]);
    assert_eq!(spawned.code, Some(0), "{}", spawned.stderr);
    assert!(!tied(&ws).is_empty(), "no supervisor runs for the lease");
    assert!(eventually(|| idle_paused(&lease)), "the lease was not paused again");
    let states = tied(&ws);
    assert!(
        !states.is_empty() && states.iter().all(|(pid, state)| *state == 'T' || frozen(*pid)),
        "the idle pause left processes running: {states:?}"
    );
    // Keep-alive works on it (and records the pause); release ends it with its watchdog.
    let kept = s.run(&["lease", "keep-alive", &id]);
    assert_eq!(kept.code, Some(0), "{}", kept.stderr);
    assert!(record(&s, &id)["metadata"]["envrtPausedAt"].is_u64());
    assert_eq!(s.run(&["lease", "release", &id]).code, Some(0));
    assert!(!ws.exists());
    assert!(!stamp(&lease).exists());
    assert_eq!(survivors(ws.to_str().unwrap()), Vec::<u32>::new());
}

#[test]
fn expiry_keeps_running_while_an_idle_lease_is_paused() {
    let s = Site::new();
    let out = s.run(&[
        "lease",
        "acquire",
        "--detached",
        "--ttl",
        "5s",
        "--idle-timeout",
        "1s",
        "--on-idle",
        "pause",
        "--json",
    ]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lease: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = lease["id"].as_str().unwrap().to_owned();
    let ws = workspace(&lease);
    assert!(eventually(|| idle_paused(&lease)), "the idle lease was never paused");
    // Paused by its idle timeout, it still ends at its expiry.
    assert!(eventually(|| !ws.exists()), "a paused lease outlived its expiry");
    let at = envrt::Timestamp(lease["expiresAt"].as_u64().unwrap()).to_rfc3339();
    let refused = s.run(&["exec", "--lease", &id, "--", "true"]);
    assert_eq!(refused.code, Some(2));
    assert_eq!(refused.stderr, format!("Lease \"{id}\" expired at {at}.\n"));
    assert_eq!(survivors(ws.to_str().unwrap()), Vec::<u32>::new());
}

#[test]
fn the_environments_on_idle_is_the_default_and_bad_values_are_refused() {
    let s = Site::new();
    let toml = s.path().join("envrt.toml");
    std::fs::write(
        &toml,
        "default = \"idle\"\n[[environment]]\nid = \"idle\"\ndriver = \"local\"\nidle_timeout = \"1s\"\non_idle = \"pause\"\n",
    )
    .unwrap();
    let out = s.run(&["lease", "acquire", "--detached", "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lease: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(lease["metadata"]["envrtOnIdle"], "pause", "{lease}");
    assert!(eventually(|| idle_paused(&lease)), "the idle lease was never paused");
    // --on-idle release overrides it.
    let out = s.run(&[
        "lease",
        "acquire",
        "--detached",
        "--idle-timeout",
        "1h",
        "--on-idle",
        "release",
        "--json",
    ]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let other: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(other["metadata"]["envrtOnIdle"].is_null(), "{other}");
    for l in [&lease, &other] {
        assert_eq!(s.run(&["lease", "release", l["id"].as_str().unwrap()]).code, Some(0));
    }
    std::fs::write(
        &toml,
        "[[environment]]\nid = \"idle\"\ndriver = \"local\"\nidle_timeout = \"1s\"\non_idle = \"stop\"\n",
    )
    .unwrap();
    let out = s.run(&["lease", "list"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .ends_with(": environment \"idle\": on_idle must be \"release\" or \"pause\", got \"stop\"\n"),
        "{}",
        out.stderr
    );
}
