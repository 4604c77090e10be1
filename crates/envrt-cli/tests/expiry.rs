//! Lease expiry from the command line: `--ttl` on `lease acquire` and `exec`, the expiry
//! in `lease list`, a per-environment default `ttl`, and `gc` recording expired leases.
//! The local driver ends an expired lease by itself, even when its holder was SIGKILLed.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{BIN, Reaper, Site, marker, survivors, wait_bounded};

/// Waits (bounded, 20 s) until `done` holds; whether it did.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(20);
    while !done() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// The lease's expiry as RFC 3339 (the JSON record has milliseconds since the epoch).
fn expires_at(lease: &serde_json::Value) -> String {
    envrt::Timestamp(lease["expiresAt"].as_u64().unwrap()).to_rfc3339()
}

fn expired_text(lease: &serde_json::Value) -> String {
    format!(
        "Lease \"{}\" expired at {}.\n",
        lease["id"].as_str().unwrap(),
        expires_at(lease)
    )
}

#[test]
fn a_lease_acquired_with_a_ttl_ends_on_time_after_its_holder_is_sigkilled() {
    let s = Site::new();
    let mark = marker();
    let _reaper = Reaper(mark.clone());
    // The holder: a shell that takes the lease (holder = the shell) and then waits.
    let script = format!("\"{BIN}\" lease acquire --ttl 2s --json > lease.json && exec sleep {mark}");
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
    assert!(lease["expiresAt"].is_u64(), "{lease}");
    let workspace = PathBuf::from(lease["metadata"]["workspace"].as_str().unwrap());
    assert!(workspace.is_dir());
    // Start a command on the lease that would run for an hour, from another process.
    let id = lease["id"].as_str().unwrap().to_owned();
    let nap = marker();
    let _nap_reaper = Reaper(nap.clone());
    let mut running = s
        .command(&["exec", "--lease", &id, "--", "sleep", &nap])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(|| !common::sleepers(&nap).is_empty()),
        "the command never started"
    );
    // `lease list` shows the expiry.
    let list = s.run(&["lease", "list"]).stdout_text();
    assert!(list.lines().next().unwrap().ends_with("EXPIRES"), "{list}");
    assert!(list.contains(&expires_at(&lease)), "{list}");

    holder.kill().unwrap();
    holder.wait().unwrap();
    // Nobody releases the lease: the driver's watchdog ends it at expiry.
    assert!(eventually(|| !workspace.exists()), "the workspace outlived the expiry");
    assert_eq!(
        survivors(&nap),
        Vec::<u32>::new(),
        "the lease's command outlived the expiry"
    );
    let status = wait_bounded(&mut running, common::LIMIT);
    assert!(!status.success());
    let refused = s.run(&["exec", "--lease", &id, "--", "true"]);
    assert_eq!(refused.code, Some(2));
    assert_eq!(refused.stderr, expired_text(&lease));
    // gc records it expired (not failed, although its holder is gone too).
    let gc = s.run(&["gc"]);
    assert_eq!(gc.code, Some(0), "{}", gc.stderr);
    assert_eq!(
        gc.stdout_text(),
        format!("released lease {id} (it expired)\ngc: 1 released, 0 failed\n")
    );
    assert_eq!(s.leases_json()[0]["status"], "expired");
}

#[test]
fn exec_with_a_ttl_is_killed_at_expiry_even_when_envrt_was_sigkilled() {
    let s = Site::new();
    let mark = marker();
    let _reaper = Reaper(mark.clone());
    let (mut holder, lease) = s.start_holder(&["--ttl", "2s"], &mark);
    assert!(lease["expiresAt"].is_u64(), "{lease}");
    let workspace = PathBuf::from(lease["metadata"]["workspace"].as_str().unwrap());
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(eventually(|| !workspace.exists()), "the workspace outlived the expiry");
    assert_eq!(survivors(&mark), Vec::<u32>::new(), "the command outlived the expiry");
    let dry = s.run(&["gc", "--dry-run"]);
    assert_eq!(
        dry.stdout_text(),
        format!("would release lease {} (it expired)\n", lease["id"].as_str().unwrap())
    );
    assert_eq!(s.run(&["gc"]).code, Some(0));
    assert_eq!(s.leases_json()[0]["status"], "expired");
}

#[test]
fn an_environment_default_ttl_applies_and_a_bad_ttl_is_refused() {
    let s = Site::new();
    std::fs::write(
        s.path().join("envrt.toml"),
        "default = \"short\"\n[[environment]]\nid = \"short\"\ndriver = \"local\"\nttl = \"1h\"\n",
    )
    .unwrap();
    let out = s.run(&["lease", "acquire", "--detached", "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lease: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        lease["expiresAt"].is_u64(),
        "the environment's ttl was not applied: {lease}"
    );
    let id = lease["id"].as_str().unwrap();
    // An early release ends the lease (and its watchdog) at once.
    assert_eq!(s.run(&["lease", "release", id]).code, Some(0));
    let ws = lease["metadata"]["workspace"].as_str().unwrap();
    assert_eq!(survivors(ws), Vec::<u32>::new(), "the watchdog outlived the release");
    // Without the file's default, no expiry.
    let plain = s.run(&["lease", "acquire", "--detached", "--json", "--env-id", "local"]);
    let plain: serde_json::Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert!(plain["expiresAt"].is_null(), "{plain}");
    assert_eq!(
        s.run(&["lease", "release", plain["id"].as_str().unwrap()]).code,
        Some(0)
    );
    let bad = s.run(&["lease", "acquire", "--ttl", "0"]);
    assert_eq!(bad.code, Some(2));
    assert_eq!(
        bad.stderr,
        "envrt: --ttl expects a positive duration such as 90, 1.5, 500ms, 1s, 2m or 1h30m, got \"0\"\n"
    );
}
