//! `envrt lease extend` on Docker leases, against a real engine (skips loudly without one;
//! fails when `ENVRT_REQUIRE_DOCKER=1`): a lease extended past the expiry its container
//! was made with outlives that expiry and ends by itself at the new one, with no program
//! of the holder alive; one moved earlier ends at the earlier time; the refusals' exact
//! texts (a reuse_by_environment lease, an engine whose processes this host does not see).

mod faults;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

/// Whether the engine still has the container (running or stopped).
fn exists(container: &str) -> bool {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--no-trunc", "--filter", &format!("id={container}")])
        .output()
        .unwrap();
    !String::from_utf8_lossy(&out.stdout).trim().is_empty()
}

/// The host pids of the container's expiry watchdogs.
fn watchdogs(container: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            (args.len() > 4 && args[3] == b"envrt-docker-expiry" && args[4] == container.as_bytes()).then_some(pid)
        })
        .collect()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Acquires a detached lease with `--ttl ttl`; its id, container and expiry.
fn acquire(s: &Scratch, ttl: &str, extra: &[&str]) -> (String, String, u64) {
    let mut args = vec!["lease", "acquire", "--env-id", "ctr", "--detached", "--ttl", ttl];
    args.extend_from_slice(extra);
    let out = s.run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", last_error_line(&out));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let lease = s.lease(&id);
    let container = lease["providerLeaseId"].as_str().expect("a container id").to_owned();
    (id, container, lease["expiresAt"].as_u64().expect("an expiry"))
}

/// `envrt lease extend ID --ttl ttl`; the expiry the lease records then.
fn extend(s: &Scratch, id: &str, ttl: &str) -> u64 {
    let out = s.run(&["lease", "extend", id, "--ttl", ttl]);
    assert_eq!(out.status.code(), Some(0), "{}", last_error_line(&out));
    let expiry = s.lease(id)["expiresAt"].as_u64().expect("an expiry");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{id} expires at {}\n", envrt::Timestamp(expiry).to_rfc3339())
    );
    expiry
}

/// `envrt gc` records the ended lease `id` as expired; then nothing is left.
fn recorded_expired(s: &Scratch, id: &str) {
    let out = s.run(&["gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", last_error_line(&out));
    assert_eq!(s.lease(id)["status"], "expired");
    s.assert_no_leaks("docker");
}

#[test]
fn an_extended_docker_lease_outlives_its_first_expiry_and_ends_at_the_new_one() {
    let Some(s) = scratch() else { return };
    let (id, container, first) = acquire(&s, "6s", &[]);
    let moved = extend(&s, &id, "16s");
    assert!(moved > first + 5_000, "the expiry did not move: {first} -> {moved}");
    // The container's own sleep would end it at the first expiry: well past it (waiting
    // to show it did not happen), the lease still runs commands.
    while now_ms() < first + 4_000 {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(exists(&container), "the container ended before its extended expiry");
    let out = s.run(&["exec", "--lease", &id, "--", "echo", "alive"]);
    assert_eq!(out.status.code(), Some(0), "{}", last_error_line(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "alive\n");
    // Nothing of ours runs now: the host watchdog ends it at the new expiry, not before.
    assert!(eventually(|| !exists(&container)), "the extended lease never ended");
    assert!(now_ms() >= moved, "the container ended before its extended expiry");
    assert_eq!(
        watchdogs(&container),
        Vec::<u32>::new(),
        "a watchdog outlived the container"
    );
    let out = s.run(&["exec", "--lease", &id, "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        last_error_line(&out),
        format!("Lease \"{id}\" expired at {}.", envrt::Timestamp(moved).to_rfc3339())
    );
    recorded_expired(&s, &id);
}

#[test]
fn a_docker_lease_moved_earlier_ends_at_the_earlier_expiry() {
    let Some(s) = scratch() else { return };
    let (id, container, _) = acquire(&s, "1h", &[]);
    let moved = extend(&s, &id, "3s");
    assert!(
        eventually(|| !exists(&container)),
        "the lease never ended at its earlier expiry"
    );
    assert!(now_ms() >= moved, "the container ended before its expiry");
    assert_eq!(
        watchdogs(&container),
        Vec::<u32>::new(),
        "a watchdog outlived the container"
    );
    recorded_expired(&s, &id);
}

#[test]
fn docker_extend_refusals() {
    let Some(s) = scratch() else { return };
    let (reused, _, _) = acquire(&s, "1h", &["--policy", "reuse_by_environment"]);
    let out = s.run(&["lease", "extend", &reused, "--ttl", "2h"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        last_error_line(&out),
        "Invalid input: the Docker driver does not move the expiry of a reuse_by_environment lease: a resume starts its container again, whose own sleep ends it at the expiry fixed at its creation"
    );
    assert_eq!(s.run(&["lease", "destroy", &reused]).status.code(), Some(0));
    // A driver in a pid namespace of its own (as with an engine on another machine) does
    // not see the container's processes: no host watchdog could end it at a moved time.
    let (id, container, first) = acquire(&s, "1h", &[]);
    let remote = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", BIN])
        .args(["lease", "extend", &id, "--ttl", "2h"])
        .current_dir(s.path())
        .env("ENVRT_STATE_DIR", s.state())
        .env_remove("ENVRT_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(remote.status.code(), Some(2), "{}", last_error_line(&remote));
    assert_eq!(
        last_error_line(&remote),
        "Invalid input: the Docker driver moves a lease's expiry only on a local engine, where a host watchdog ends the container at its expiry"
    );
    assert_eq!(
        s.lease(&id)["expiresAt"].as_u64(),
        Some(first),
        "a refused extend moved the expiry"
    );
    assert_eq!(watchdogs(&container).len(), 1, "the lease lost its expiry watchdog");
    assert_eq!(s.run(&["lease", "release", &id]).status.code(), Some(0));
    s.assert_no_leaks("docker");
}
