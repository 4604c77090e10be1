//! The Docker engine restarted under a running call: an execute, a sync in, a sync out
//! and a duplex stream (`envrt shell` over a pipe) each fail with one exact text, the
//! lease is then reported lost (the engine removed its stopped container on start) and
//! ends cleanly, `envrt gc` finds nothing more, and the soak's leak count is zero.
//!
//! Each test runs an engine of its own ([`PrivateDockerd`]), never the shared one. The
//! call is caught at an observable point (its output seen, bytes read or written) and
//! frozen (`SIGSTOP`) while the engine is stopped and, where the test says so, started
//! again; then it is let go (`SIGCONT`). So what the call meets is decided by the test,
//! not by a race: an engine that is gone, or one that came back without the call's exec.

mod faults;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use faults::dockerd::PrivateDockerd;
use faults::{Scratch, environment, last_error_line, wait_bounded};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Bound on waiting for a call to reach the point where it is frozen.
const BOUND: Duration = Duration::from_secs(60);

/// An engine of its own and a scratch directory using it, or `None` (skipped).
fn setup() -> Option<(PrivateDockerd, Scratch)> {
    let image = envrt_test_support::docker::image_or_skip()?;
    let engine = PrivateDockerd::start(&image)?;
    let scratch = Scratch::on_engine(
        &environment("ctr", "docker", &format!("image = \"{image}\"\n")),
        &engine.host(),
    );
    Some((engine, scratch))
}

fn pid_of(child: &Child) -> Pid {
    Pid::from_raw(child.id() as i32)
}

/// The lines of `child`'s stdout, read on a thread of their own.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Waits (bounded) for the line `wanted` on `lines`.
fn await_line(lines: &mpsc::Receiver<String>, wanted: &str) {
    let deadline = Instant::now() + BOUND;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line == wanted => return,
            Ok(_) => {}
            Err(e) => panic!("no line {wanted:?} from the call: {e}"),
        }
    }
}

/// Bytes `pid` has read (`rchar` of `/proc/PID/io`).
fn bytes_read(pid: Pid) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: ")?.parse().ok())
        .unwrap_or(0)
}

/// Bytes of disk the regular files under `dir` hold (their blocks: envrt writes runs of
/// zeros as holes, and a file's length may run ahead of what was written), its CLI state
/// directory left out.
fn bytes_under(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        if meta.is_dir() && entry.file_name() != "cli" {
            total += bytes_under(&entry.path());
        } else if meta.is_file() {
            total += meta.blocks() * 512;
        }
    }
    total
}

/// `len` bytes with no run of zeros (so no hole is skipped on either side).
fn dense(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 + 1).collect()
}

/// Waits (bounded) until `moved()` is past `bytes` while `child` runs, then freezes it.
fn freeze_after(child: &mut Child, bytes: u64, moved: impl Fn() -> u64) {
    let deadline = Instant::now() + BOUND;
    while moved() <= bytes {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the call ended ({status}) before it moved {bytes} bytes");
        }
        assert!(Instant::now() < deadline, "the call did not move {bytes} bytes");
        // Neither /proc nor a growing file has an event to wait on: look again shortly.
        std::thread::sleep(Duration::from_millis(5));
    }
    kill(pid_of(child), Signal::SIGSTOP).unwrap();
}

/// How the engine goes away under the frozen call.
#[derive(Clone, Copy)]
enum Restart {
    /// SIGKILL, and the call is let go while the engine is gone (started again after).
    KilledCallSeesItGone,
    /// SIGTERM (the engine stops its containers) and started again before the call is
    /// let go.
    StoppedAndBackBeforeTheCall,
}

/// Restarts `engine` under the frozen `child` as `how` says; the engine runs afterwards.
/// Returns the call's exit code and stderr.
fn restart_under(engine: &mut PrivateDockerd, child: &mut Child, how: Restart) -> (Option<i32>, String) {
    let pid = pid_of(child);
    let stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    match how {
        Restart::KilledCallSeesItGone => {
            engine.stop(Signal::SIGKILL);
            kill(pid, Signal::SIGCONT).unwrap();
            let status = wait_bounded(child);
            engine.launch();
            (status.code(), err_reader.join().unwrap())
        }
        Restart::StoppedAndBackBeforeTheCall => {
            engine.stop(Signal::SIGTERM);
            engine.launch();
            kill(pid, Signal::SIGCONT).unwrap();
            let status = wait_bounded(child);
            (status.code(), err_reader.join().unwrap())
        }
    }
}

/// The one text of a lost lease (contract section 3).
fn lost(s: &Scratch, id: &str) -> String {
    let container = s.lease(id)["providerLeaseId"].as_str().unwrap().to_owned();
    format!(
        "Lease \"{id}\" is lost: its provider resource \"{container}\" is gone; release or destroy the lease to end it."
    )
}

/// Asserts the call ended with exit code `code` and `text` as the last line of its stderr.
#[track_caller]
fn assert_failed(call: (Option<i32>, String), code: i32, text: &str) {
    assert_eq!(call.0, Some(code), "{}", call.1);
    assert_eq!(call.1.lines().last().unwrap_or_default(), text, "{}", call.1);
}

/// After the restart: the lease is lost (its container is gone), `release` ends it,
/// `gc` has nothing left to do, and the soak counts no leak.
///
/// The engine may list the container after that as `dead` although it has removed it: a
/// ghost of Docker 20.10's restore (caught here about once in twenty runs under load:
/// `docker inspect` and `docker rm` answer "no such container", its directory, layers,
/// task and mounts are gone, and the engine's next start lists it no more). The driver's
/// recovery leaves such an entry out (`gc` does not claim to remove it) and the soak does
/// not count it; this asserts that nothing of it is left on the engine.
fn lease_ends_cleanly(engine: &PrivateDockerd, s: &Scratch, id: &str) {
    let container = s.lease(id)["providerLeaseId"].as_str().unwrap().to_owned();
    let out = s.run(&["exec", "--lease", id, "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(last_error_line(&out), lost(s, id));
    let out = s.run(&["lease", "release", id]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let lease = s.lease(id);
    assert_eq!(lease["status"], "released", "{lease}");
    assert_eq!(lease["cleanupStatus"], "success", "{lease}");
    let out = s.run(&["gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        !said.contains(&container),
        "gc claims the gone container {container}: {said}"
    );
    s.assert_no_leaks_within("docker", ENGINE_CLEANUP);
    for ghost in s.leaks("docker").engine_ghosts {
        assert_eq!(ghost, container, "a ghost that is not the lease's container");
        eprintln!("the engine lists {ghost} as dead although it removed it (a ghost)");
        engine.assert_holds_nothing_of(&ghost);
    }
}

/// How long a restarted engine may take to finish removing what died with it.
const ENGINE_CLEANUP: std::time::Duration = std::time::Duration::from_secs(30);

/// The text of a call that met the engine gone while `doing`.
fn unreachable(engine: &PrivateDockerd, doing: &str) -> String {
    format!("Docker engine at {} is not reachable ({doing}).", engine.host())
}

/// A long command whose output was seen.
fn running_execute(s: &Scratch, id: &str) -> Child {
    let mut child = s
        .command(&["exec", "--lease", id, "--", "sh", "-c", "echo started; exec sleep 600"])
        .spawn()
        .unwrap();
    let lines = lines_of(&mut child);
    await_line(&lines, "started");
    kill(pid_of(&child), Signal::SIGSTOP).unwrap();
    child
}

#[test]
fn an_execute_whose_engine_is_killed_fails_with_the_unreachable_text() {
    let Some((mut engine, s)) = setup() else { return };
    let id = s.acquire("ctr");
    let mut call = running_execute(&s, &id);
    let failed = restart_under(&mut engine, &mut call, Restart::KilledCallSeesItGone);
    assert_failed(failed, 1, &unreachable(&engine, "reading a command's status"));
    lease_ends_cleanly(&engine, &s, &id);
}

#[test]
fn an_execute_whose_engine_restarted_fails_with_an_exact_text() {
    let Some((mut engine, s)) = setup() else { return };
    let id = s.acquire("ctr");
    let mut call = running_execute(&s, &id);
    let failed = restart_under(&mut engine, &mut call, Restart::StoppedAndBackBeforeTheCall);
    // The restarted engine forgot the exec and removed the stopped container: the call
    // says the lease is lost, not the engine's "No such exec instance".
    assert_failed(failed, 2, &lost(&s, &id));
    lease_ends_cleanly(&engine, &s, &id);
}

/// A sync in of 256 MiB caught after 32 MiB were read, the engine restarted as `how` says.
fn sync_in_under_restart(how: Restart) {
    let Some((mut engine, s)) = setup() else { return };
    let id = s.acquire("ctr");
    std::fs::write(s.path().join("big.bin"), dense(256 << 20)).unwrap();
    let target = format!("lease:{id}:/workspace/big.bin");
    let mut call = s.command(&["cp", "-q", "big.bin", &target]).spawn().unwrap();
    let pid = pid_of(&call);
    freeze_after(&mut call, 32 << 20, || bytes_read(pid));
    let failed = restart_under(&mut engine, &mut call, how);
    // The upload's connection broke when the engine went: its text, whether or not the
    // engine answers again by the time the call reports.
    assert_failed(failed, 1, &unreachable(&engine, "uploading files"));
    lease_ends_cleanly(&engine, &s, &id);
}

#[test]
fn a_sync_in_whose_engine_is_killed_fails_and_leaves_nothing() {
    sync_in_under_restart(Restart::KilledCallSeesItGone);
}

#[test]
fn a_sync_in_whose_engine_restarted_fails_and_leaves_nothing() {
    sync_in_under_restart(Restart::StoppedAndBackBeforeTheCall);
}

/// A sync out of 256 MiB caught once 32 MiB are on disk, the engine restarted as `how`
/// says: it fails and writes nothing (no target, no staging left beside it).
fn sync_out_under_restart(how: Restart) {
    let Some((mut engine, s)) = setup() else { return };
    let id = s.acquire("ctr");
    let out = s.run(&[
        "exec",
        "--lease",
        &id,
        "--",
        "sh",
        "-c",
        "yes envrt-sync-out-bytes | head -c 268435456 > /workspace/big.bin",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let source = format!("lease:{id}:/workspace/big.bin");
    let mut call = s.command(&["cp", "-q", &source, "out.bin"]).spawn().unwrap();
    freeze_after(&mut call, 32 << 20, || bytes_under(s.path()));
    let failed = restart_under(&mut engine, &mut call, how);
    assert_failed(failed, 1, &unreachable(&engine, "downloading files"));
    let mut left: Vec<_> = std::fs::read_dir(s.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["cli", "envrt.toml"]);
    lease_ends_cleanly(&engine, &s, &id);
}

#[test]
fn a_sync_out_whose_engine_is_killed_fails_and_writes_no_file() {
    sync_out_under_restart(Restart::KilledCallSeesItGone);
}

#[test]
fn a_sync_out_whose_engine_restarted_fails_and_writes_no_file() {
    sync_out_under_restart(Restart::StoppedAndBackBeforeTheCall);
}

/// A duplex stream (`envrt shell` over pipes, so a channel, not a terminal) that has
/// carried a line both ways, with the engine restarted under it as `how` says.
fn duplex_under_restart(how: Restart, code: i32, text: impl FnOnce(&PrivateDockerd, &Scratch, &str) -> String) {
    let Some((mut engine, s)) = setup() else { return };
    let id = s.acquire("ctr");
    let mut call = s
        .command(&["shell", "--lease", &id, "--", "sh", "-c", "echo ready; cat"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut call);
    await_line(&lines, "ready");
    let mut stdin = call.stdin.take().unwrap();
    stdin.write_all(b"ping\n").unwrap();
    await_line(&lines, "ping");
    kill(pid_of(&call), Signal::SIGSTOP).unwrap();
    let failed = restart_under(&mut engine, &mut call, how);
    drop(stdin);
    assert_failed(failed, code, &text(&engine, &s, &id));
    lease_ends_cleanly(&engine, &s, &id);
}

#[test]
fn a_duplex_stream_whose_engine_is_killed_ends_with_the_unreachable_text() {
    duplex_under_restart(Restart::KilledCallSeesItGone, 1, |engine, _, _| {
        unreachable(engine, "reading a command's status")
    });
}

#[test]
fn a_duplex_stream_whose_engine_restarted_ends_with_the_lost_text() {
    duplex_under_restart(Restart::StoppedAndBackBeforeTheCall, 2, |_, s, id| lost(s, id));
}
