//! Idle timeouts from the command line, on the local driver: `--idle-timeout` on
//! `lease acquire` and `exec`, and `lease keep-alive`. The lease's idle watchdog ends an
//! idle lease by itself after its holder was SIGKILLed; a running command, a pause and
//! keep-alive calls each keep the lease; the refusals' exact texts.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

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

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).ok()?.modified().ok()
}

fn ended_text(id: &str) -> String {
    format!("Lease \"{id}\" ended after its idle timeout.\n")
}

#[test]
fn an_idle_lease_ends_by_itself_after_its_holder_is_sigkilled() {
    let s = Site::new();
    let mark = marker();
    let _reaper = Reaper(mark.clone());
    // The holder: a shell that takes the lease (holder = the shell) and then waits.
    let script = format!("\"{BIN}\" lease acquire --idle-timeout 2s --json > lease.json && exec sleep {mark}");
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
    assert_eq!(lease["metadata"]["envrtIdleTimeoutMs"], 2000, "{lease}");
    let id = lease["id"].as_str().unwrap().to_owned();
    let ws = workspace(&lease);
    assert!(ws.is_dir());
    assert!(stamp(&lease).is_file());
    holder.kill().unwrap();
    holder.wait().unwrap();
    // Nobody touches the lease: its idle watchdog ends it, and then itself.
    assert!(eventually(|| !ws.exists()), "the idle lease was never ended");
    assert_eq!(
        survivors(ws.to_str().unwrap()),
        Vec::<u32>::new(),
        "the idle watchdog outlived the lease"
    );
    assert!(!stamp(&lease).exists());
    // Any operation is refused; keep-alive records the lease as expired.
    let refused = s.run(&["exec", "--lease", &id, "--", "true"]);
    assert_eq!(refused.code, Some(2));
    assert_eq!(refused.stderr, ended_text(&id));
    let kept = s.run(&["lease", "keep-alive", &id]);
    assert_eq!(kept.code, Some(2));
    assert_eq!(kept.stderr, ended_text(&id));
    assert_eq!(s.leases_json()[0]["status"], "expired");
}

#[test]
fn a_running_command_keeps_an_idle_lease_until_it_ends() {
    let s = Site::new();
    let mark = marker();
    let _reaper = Reaper(mark.clone());
    let (mut holder, lease) = s.start_holder(&["--idle-timeout", "1s"], &mark);
    let ws = workspace(&lease);
    let stamp = stamp(&lease);
    let armed = modified(&stamp).expect("no idle stamp");
    holder.kill().unwrap();
    holder.wait().unwrap();
    // The watchdog finds the clock run out, sees the command running and resets it.
    assert!(
        eventually(|| modified(&stamp).is_some_and(|m| m > armed)),
        "the watchdog never looked at the busy lease"
    );
    assert!(ws.is_dir(), "a lease running a command was ended as idle");
    assert!(!common::sleepers(&mark).is_empty());
    // Once the command is gone, the lease is idle and ends.
    for pid in common::sleepers(&mark) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(eventually(|| !ws.exists()), "the idle lease was never ended");
    assert_eq!(survivors(ws.to_str().unwrap()), Vec::<u32>::new());
}

#[test]
fn keep_alive_and_a_pause_keep_an_idle_lease() {
    let s = Site::new();
    let out = s.run(&["lease", "acquire", "--detached", "--idle-timeout", "1s", "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lease: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = lease["id"].as_str().unwrap().to_owned();
    let ws = workspace(&lease);
    // Kept alive for several idle timeouts, it stays.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        let kept = s.run(&["lease", "keep-alive", &id]);
        assert_eq!(kept.code, Some(0), "{}", kept.stderr);
        assert_eq!(kept.stdout_text(), format!("{id} kept alive\n"));
        assert!(ws.is_dir(), "a kept-alive lease was ended");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Paused, its idle time does not count: the watchdog resets the clock instead.
    assert_eq!(s.run(&["lease", "pause", &id]).code, Some(0));
    let paused = modified(&stamp(&lease)).expect("no idle stamp");
    assert!(
        eventually(|| modified(&stamp(&lease)).is_some_and(|m| m > paused)),
        "the watchdog never looked at the paused lease"
    );
    assert!(ws.is_dir(), "a paused lease was ended as idle");
    // Unpaused and left alone, it ends.
    assert_eq!(s.run(&["lease", "unpause", &id]).code, Some(0));
    assert!(eventually(|| !ws.exists()), "the idle lease was never ended");
    assert_eq!(survivors(ws.to_str().unwrap()), Vec::<u32>::new());
}

#[test]
fn bad_idle_timeouts_and_keep_alive_without_one_are_refused() {
    let s = Site::new();
    let bad = s.run(&["lease", "acquire", "--detached", "--idle-timeout", "soon"]);
    assert_eq!(bad.code, Some(2));
    assert_eq!(
        bad.stderr,
        "envrt: --idle-timeout expects a positive duration such as 90, 1.5, 500ms, 1s, 2m or 1h30m, got \"soon\"\n"
    );
    let bad = s.run(&["exec", "--idle-timeout", "0", "--", "true"]);
    assert_eq!(bad.code, Some(2));
    assert_eq!(
        bad.stderr,
        "envrt: --idle-timeout expects a positive duration such as 90, 1.5, 500ms, 1s, 2m or 1h30m, got \"0\"\n"
    );
    assert!(s.leases_json().is_empty(), "a refused duration made a lease");
    // Outside the local driver's bounds: the lease acquired for it is released again.
    let short = s.run(&["lease", "acquire", "--detached", "--idle-timeout", "500ms"]);
    assert_eq!(short.code, Some(2));
    assert_eq!(
        short.stderr,
        "Invalid input: the local driver's idle timeout lies between 1 s and 30 days, not 500 ms\n"
    );
    let leases = s.leases_json();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0]["status"], "released");
    assert!(!workspace(&leases[0]).exists());
    // Keep-alive of a lease without an idle timeout.
    let plain = s.run(&["lease", "acquire", "--detached"]);
    let id = plain.stdout_text().trim().to_owned();
    let kept = s.run(&["lease", "keep-alive", &id]);
    assert_eq!(kept.code, Some(2));
    assert_eq!(
        kept.stderr,
        format!("Invalid input: lease \"{id}\" has no idle timeout\n")
    );
    assert_eq!(s.run(&["lease", "release", &id]).code, Some(0));
    let ws = s.run(&["lease", "keep-alive", "nope"]);
    assert_eq!(ws.code, Some(2));
    assert_eq!(ws.stderr, "Lease \"nope\" was not found.\n");
}

#[test]
fn an_environment_default_idle_timeout_applies_and_bad_ones_are_refused() {
    let s = Site::new();
    let toml = s.path().join("envrt.toml");
    std::fs::write(
        &toml,
        "default = \"idle\"\n[[environment]]\nid = \"idle\"\ndriver = \"local\"\nidle_timeout = \"1s\"\non_idle = \"release\"\n",
    )
    .unwrap();
    let out = s.run(&["lease", "acquire", "--detached", "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lease: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(lease["metadata"]["envrtIdleTimeoutMs"], 1000, "{lease}");
    let ws = workspace(&lease);
    assert!(eventually(|| !ws.exists()), "the idle lease was never ended");
    // --idle-timeout wins over the environment's.
    let out = s.run(&["lease", "acquire", "--detached", "--json", "--idle-timeout", "1h"]);
    let lease: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(lease["metadata"]["envrtIdleTimeoutMs"], 3_600_000, "{lease}");
    assert_eq!(
        s.run(&["lease", "release", lease["id"].as_str().unwrap()]).code,
        Some(0)
    );
    for (lines, text) in [
        (
            "idle_timeout = \"soon\"\n",
            "idle_timeout expects a positive duration such as 90, 1.5, 500ms, 1s, 2m or 1h30m, got \"soon\"",
        ),
        (
            "idle_timeout = \"1m\"\non_idle = \"stop\"\n",
            "on_idle must be \"release\" or \"pause\", got \"stop\"",
        ),
        ("on_idle = \"pause\"\n", "on_idle needs an idle_timeout"),
        ("on_idle = \"release\"\n", "on_idle needs an idle_timeout"),
    ] {
        std::fs::write(
            &toml,
            format!("[[environment]]\nid = \"x\"\ndriver = \"local\"\n{lines}"),
        )
        .unwrap();
        let bad = s.run(&["lease", "list"]);
        assert_eq!(bad.code, Some(2), "{lines}");
        assert_eq!(
            bad.stderr,
            format!("envrt: config \"envrt.toml\": environment \"x\": {text}\n")
        );
    }
}
