//! Idle timeouts on Docker leases from the command line: the host idle watchdog ends an
//! idle lease's container by itself after its holder was SIGKILLed, and leaves nothing
//! (the soak's leak count); a command running in the container keeps the lease, and so
//! does a pause, until the lease is left alone; the refusals' exact texts. Against a real
//! engine (skips loudly without one; fails when `ENVRT_REQUIRE_DOCKER=1`).

mod faults;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use faults::{BIN, Scratch, environment, last_error_line};

/// Waits (bounded, 60 s) until `done` holds; whether it did.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(60);
    while !done() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

fn scratch() -> Option<Scratch> {
    let image = envrt_test_support::docker::image_or_skip()?;
    Some(Scratch::new(&environment(
        "ctr",
        "docker",
        &format!("image = \"{image}\"\n"),
    )))
}

/// The lease's container id.
fn container(lease: &serde_json::Value) -> String {
    lease["providerLeaseId"].as_str().expect("a container id").to_owned()
}

/// The lease's activity stamp on the host.
fn stamp(container: &str) -> PathBuf {
    std::env::temp_dir().join("envrt-docker-idle").join(container)
}

fn modified(container: &str) -> Option<SystemTime> {
    std::fs::metadata(stamp(container)).ok()?.modified().ok()
}

/// Whether the engine still has the container (running or stopped).
fn exists(container: &str) -> bool {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--no-trunc", "--filter", &format!("id={container}")])
        .output()
        .unwrap();
    !String::from_utf8_lossy(&out.stdout).trim().is_empty()
}

/// The host pids of the container's idle watchdogs.
fn watchdogs(container: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            (args.len() > 4 && args[3] == b"envrt-docker-idle" && args[4] == container.as_bytes()).then_some(pid)
        })
        .collect()
}

fn ended_text(id: &str) -> String {
    format!("Lease \"{id}\" ended after its idle timeout.")
}

/// The lease's record after an acquire in a holder that printed it to `lease.json`.
fn held_lease(s: &Scratch) -> serde_json::Value {
    let file = s.path().join("lease.json");
    let mut lease = None;
    assert!(
        eventually(|| {
            lease = std::fs::read(&file)
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
            lease.is_some()
        }),
        "the holder never took its lease"
    );
    lease.unwrap()
}

#[test]
fn an_idle_docker_lease_ends_by_itself_after_its_holder_is_sigkilled_and_leaves_nothing() {
    let Some(s) = scratch() else { return };
    // The holder: a shell that takes the lease (holder = the shell) and then waits.
    let script =
        format!("\"{BIN}\" lease acquire --env-id ctr --idle-timeout 2s --json > lease.json && exec sleep 3600");
    let mut holder = Command::new("sh")
        .args(["-c", &script])
        .current_dir(s.path())
        .env("ENVRT_STATE_DIR", s.state())
        .env_remove("ENVRT_CONFIG")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let lease = held_lease(&s);
    assert_eq!(lease["metadata"]["envrtIdleTimeoutMs"], 2000, "{lease}");
    let id = lease["id"].as_str().unwrap().to_owned();
    let ctr = container(&lease);
    assert!(stamp(&ctr).is_file(), "no activity stamp");
    assert_eq!(watchdogs(&ctr).len(), 1, "one idle watchdog per lease");
    holder.kill().unwrap();
    holder.wait().unwrap();
    // Nobody touches the lease: its idle watchdog ends the container, and then itself.
    assert!(
        eventually(|| !exists(&ctr)),
        "the idle lease's container was never ended"
    );
    assert!(
        eventually(|| watchdogs(&ctr).is_empty()),
        "the idle watchdog outlived the lease"
    );
    assert!(!stamp(&ctr).exists());
    // Any operation is refused; keep-alive records the lease as expired.
    let refused = s.run(&["exec", "--lease", &id, "--", "true"]);
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(last_error_line(&refused), ended_text(&id));
    let kept = s.run(&["lease", "keep-alive", &id]);
    assert_eq!(kept.status.code(), Some(2));
    assert_eq!(last_error_line(&kept), ended_text(&id));
    assert_eq!(s.lease(&id)["status"], "expired");
    s.assert_no_leaks("docker");
}

#[test]
fn a_running_command_and_a_pause_keep_an_idle_docker_lease_until_it_is_left_alone() {
    let Some(s) = scratch() else { return };
    // The holder runs a long command in the lease and is SIGKILLed; the command runs on.
    let mut holder = s.command(&["exec", "--env-id", "ctr", "--idle-timeout", "1s", "--", "sleep", "3600"]);
    let mut holder = holder.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let mut lease = None;
    assert!(
        eventually(|| {
            let out = s.run(&["lease", "list", "--json"]);
            let leases: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
            lease = leases.into_iter().find(|l| l["metadata"]["envrtIdleTimeoutMs"] == 1000);
            lease.is_some()
        }),
        "the holder never armed its lease"
    );
    let lease = lease.unwrap();
    let id = lease["id"].as_str().unwrap().to_owned();
    let ctr = container(&lease);
    let running = || {
        let out = Command::new("docker")
            .args(["top", &ctr, "-o", "pid,args"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.ends_with("sleep 3600"))
            .filter_map(|l| l.split_whitespace().next()?.parse::<i32>().ok())
            .collect::<Vec<i32>>()
    };
    assert!(eventually(|| !running().is_empty()), "the command never started");
    holder.kill().unwrap();
    holder.wait().unwrap();
    // The watchdog finds the clock run out, sees the command running and resets it.
    let armed = modified(&ctr).expect("no idle stamp");
    assert!(
        eventually(|| modified(&ctr).is_some_and(|m| m > armed)),
        "the watchdog never looked at the busy lease"
    );
    assert!(exists(&ctr), "a lease running a command was ended as idle");
    assert!(!running().is_empty());
    // Paused (the command frozen with it), its idle time does not count.
    let paused = s.run(&["lease", "pause", &id]);
    assert_eq!(paused.status.code(), Some(0), "{}", last_error_line(&paused));
    for pid in running() {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    let before = modified(&ctr).expect("no idle stamp");
    assert!(
        eventually(|| modified(&ctr).is_some_and(|m| m > before)),
        "the watchdog never looked at the paused lease"
    );
    assert!(exists(&ctr), "a paused lease was ended as idle");
    // Unpaused, with its command gone (its SIGKILL lands at the thaw), it ends.
    let unpaused = s.run(&["lease", "unpause", &id]);
    assert_eq!(unpaused.status.code(), Some(0), "{}", last_error_line(&unpaused));
    assert!(eventually(|| !exists(&ctr)), "the idle lease was never ended");
    assert!(
        eventually(|| watchdogs(&ctr).is_empty()),
        "the idle watchdog outlived the lease"
    );
    let kept = s.run(&["lease", "keep-alive", &id]);
    assert_eq!(last_error_line(&kept), ended_text(&id));
    s.assert_no_leaks("docker");
}

#[test]
fn keep_alive_keeps_an_idle_docker_lease_and_release_ends_its_watchdog() {
    let Some(s) = scratch() else { return };
    let out = s.run(&[
        "lease",
        "acquire",
        "--env-id",
        "ctr",
        "--detached",
        "--idle-timeout",
        "1s",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", last_error_line(&out));
    let lease: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = lease["id"].as_str().unwrap().to_owned();
    let ctr = container(&lease);
    // Kept alive for several idle timeouts (and past the watchdog's 2 s of slack), it stays.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(6) {
        let kept = s.run(&["lease", "keep-alive", &id]);
        assert_eq!(kept.status.code(), Some(0), "{}", last_error_line(&kept));
        assert_eq!(String::from_utf8_lossy(&kept.stdout), format!("{id} kept alive\n"));
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(exists(&ctr), "a kept-alive lease was ended");
    let released = s.run(&["lease", "release", &id]);
    assert_eq!(released.status.code(), Some(0), "{}", last_error_line(&released));
    assert!(watchdogs(&ctr).is_empty(), "release left the idle watchdog");
    assert!(!stamp(&ctr).exists(), "release left the activity stamp");
    s.assert_no_leaks("docker");
}

#[test]
fn bad_idle_timeouts_on_docker_are_refused_and_leave_nothing() {
    let Some(s) = scratch() else { return };
    let short = s.run(&[
        "lease",
        "acquire",
        "--env-id",
        "ctr",
        "--detached",
        "--idle-timeout",
        "500ms",
    ]);
    assert_eq!(short.status.code(), Some(2));
    assert_eq!(
        last_error_line(&short),
        "Invalid input: the Docker driver's idle timeout lies between 1 s and 30 days, not 500 ms"
    );
    // Pausing an idle lease is not built on Docker.
    let pause = s.run(&[
        "lease",
        "acquire",
        "--env-id",
        "ctr",
        "--detached",
        "--idle-timeout",
        "5s",
        "--on-idle",
        "pause",
    ]);
    assert_eq!(pause.status.code(), Some(2));
    assert_eq!(
        last_error_line(&pause),
        "Invalid input: the Docker driver does not pause an idle lease yet (on_idle = \"pause\"); its idle timeout ends the lease"
    );
    // A driver that cannot see the container's processes (here: run in a pid namespace of
    // its own, as with an engine on another machine) has no host watchdog to end it.
    let remote = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", BIN])
        .args([
            "lease",
            "acquire",
            "--env-id",
            "ctr",
            "--detached",
            "--idle-timeout",
            "5s",
        ])
        .current_dir(s.path())
        .env("ENVRT_STATE_DIR", s.state())
        .env_remove("ENVRT_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(remote.status.code(), Some(2), "{}", last_error_line(&remote));
    assert_eq!(
        last_error_line(&remote),
        "Invalid input: the Docker driver arms an idle timeout only on a local engine, where a host watchdog ends the idle container"
    );
    let out = s.run(&["lease", "list", "--all", "--json"]);
    let leases: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(leases.len(), 3, "{leases:?}");
    assert!(leases.iter().all(|l| l["status"] == "released"), "{leases:?}");
    s.assert_no_leaks("docker");
}
