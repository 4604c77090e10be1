//! Expiry when the wall clock jumps. The host program takes a lease while its wall clock
//! (libfaketime, preloaded into `envrt` only) is an hour ahead of or behind the system's,
//! which is what a clock stepped after the acquire looks like to everything else: the
//! expiry's enforcement (the local and Docker watchdogs) counts the time left from its own
//! start on a monotonic clock, so the lease's commands and workspace end at their expiry,
//! not an hour early or late. The store's `expiresAt` stays wall time, which the facade's
//! refusals compare with the calling program's clock (contract section 8).

mod faults;

use std::path::Path;
use std::time::{Duration, Instant};

use faults::{Scratch, environment, last_error_line};

/// Debian's `faketime` package (scripts/setup.sh installs it).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Bound on an expiry being enforced (a few seconds' TTL, a watchdog that looks once a
/// second): far under the hour a wall-clock watchdog would be off by.
const BOUND: Duration = Duration::from_secs(45);

/// Whether libfaketime is here; without it the test fails under `CI`, else skips loudly.
fn faketime_or_skip() -> bool {
    if Path::new(LIBFAKETIME).exists() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but {LIBFAKETIME} is missing (scripts/setup.sh installs faketime)"
    );
    envrt_test_support::skip_loudly(format_args!("SKIPPED: no {LIBFAKETIME} (apt-get install faketime)"));
    false
}

/// `envrt ARGS` with its wall clock moved by `offset` (libfaketime's relative form, such
/// as `+1h`); its monotonic clock is left alone.
fn run_shifted(s: &Scratch, offset: &str, args: &[&str]) -> std::process::Output {
    let mut command = s.command(args);
    command
        .env("LD_PRELOAD", LIBFAKETIME)
        .env("FAKETIME", offset)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("FAKETIME_DONT_RESET", "1");
    faults::run_bounded(command)
}

/// `lease acquire --ttl TTL` with the wall clock moved by `offset`: the lease id.
fn acquire_shifted(s: &Scratch, offset: &str, env: &str, ttl: &str) -> String {
    let out = run_shifted(
        s,
        offset,
        &["lease", "acquire", "--env-id", env, "--ttl", ttl, "--detached"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Waits (bounded) until `done` holds; panics with `what` past the bound.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {BOUND:?}");
        // Nothing to wait on but the watchdog's effect: look again shortly.
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn lost(s: &Scratch, id: &str) -> String {
    let resource = s.lease(id)["providerLeaseId"].as_str().unwrap().to_owned();
    format!(
        "Lease \"{id}\" is lost: its provider resource \"{resource}\" is gone; release or destroy the lease to end it."
    )
}

/// The lease ends cleanly and the soak counts nothing for `key`.
fn release_and_count(s: &Scratch, id: &str, key: &str) {
    let out = s.run(&["lease", "release", id]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = s.run(&["gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    s.assert_no_leaks(key);
}

#[test]
fn a_local_lease_taken_with_the_clock_an_hour_ahead_still_ends_at_its_expiry() {
    if !faketime_or_skip() {
        return;
    }
    let s = Scratch::new(&environment("loc", "local", ""));
    // Long enough that the look below comes before the expiry on a loaded machine.
    let id = acquire_shifted(&s, "+1h", "loc", "8s");
    let workspace = s
        .state()
        .join("workspaces")
        .join(s.lease(&id)["providerLeaseId"].as_str().unwrap());
    assert!(workspace.exists());
    // By this program's (true) clock the lease has an hour left; its watchdog ends it now.
    eventually("the watchdog removed the workspace", || !workspace.exists());
    let out = s.run(&["exec", "--lease", &id, "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(last_error_line(&out), lost(&s, &id));
    release_and_count(&s, &id, "local");
}

#[test]
fn a_local_lease_taken_with_the_clock_an_hour_behind_is_not_ended_early() {
    if !faketime_or_skip() {
        return;
    }
    let s = Scratch::new(&environment("loc", "local", ""));
    let id = acquire_shifted(&s, "-1h", "loc", "10m");
    let lease = s.lease(&id);
    let expires = envrt::Timestamp(lease["expiresAt"].as_u64().unwrap()).to_rfc3339();
    // The watchdog counts its ten minutes from the acquire: calls by the clock the lease
    // was taken with still run in it.
    let out = run_shifted(&s, "-1h", &["exec", "--lease", &id, "--", "echo", "alive"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "alive\n");
    // A program whose clock is past the stored (wall) expiry refuses the lease, and
    // nothing of the lease ended for it.
    let out = s.run(&["exec", "--lease", &id, "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(last_error_line(&out), format!("Lease \"{id}\" expired at {expires}."));
    let workspace = s
        .state()
        .join("workspaces")
        .join(lease["providerLeaseId"].as_str().unwrap());
    assert!(workspace.exists(), "the refusal ended the lease");
    let out = run_shifted(&s, "-1h", &["exec", "--lease", &id, "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    release_and_count(&s, &id, "local");
}

/// Stops every process the command sees but itself (the in-container `sleep` that would
/// end the container at the expiry too): only the host watchdog is left to end it.
const STOP_ALL: &str =
    "for p in /proc/[0-9]*; do q=${p#/proc/}; [ \"$q\" = $$ ] || kill -STOP \"$q\"; done 2>/dev/null; echo done";

fn docker_scratch() -> Option<Scratch> {
    let image = envrt_test_support::docker::image_or_skip()?;
    faketime_or_skip().then(|| Scratch::new(&environment("ctr", "docker", &format!("image = \"{image}\"\n"))))
}

fn container_exists(id: &str) -> bool {
    std::process::Command::new("docker")
        .args(["inspect", "--format", "{{.State.Running}}", id])
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.starts_with(b"true"))
}

#[test]
fn a_docker_lease_taken_with_the_clock_an_hour_ahead_still_ends_at_its_expiry() {
    let Some(s) = docker_scratch() else { return };
    // Long enough that the stop below runs before the expiry on a loaded machine (under
    // `stress --load` an acquire and the first exec took over 6 s): an exec that meets an
    // ended container proves nothing about the watchdog.
    let id = acquire_shifted(&s, "+1h", "ctr", "20s");
    let container = s.lease(&id)["providerLeaseId"].as_str().unwrap().to_owned();
    let out = s.run(&["exec", "--lease", &id, "--", "sh", "-c", STOP_ALL]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    eventually("the watchdog ended the container", || !container_exists(&container));
    let out = s.run(&["exec", "--lease", &id, "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(last_error_line(&out), lost(&s, &id));
    release_and_count(&s, &id, "docker");
}
