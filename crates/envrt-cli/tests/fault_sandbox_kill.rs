//! The sandbox worker SIGKILLed in the middle of a sync in and a sync out: the target is
//! either untouched or complete, never half-written, and what the killed worker had
//! staged is gone once another worker looked (the next command's, or the next sync out's
//! into that directory). The kill lands deterministically: the worker's fault points
//! (`ENVRT_TEST_ABORT_AT=sync_in:N` / `sync_out:N`, one after each file copied into the
//! staged tree and one after the exchange that puts it in place) make it SIGKILL itself
//! at the `N`-th; the test raises `N` from 1 until the copy completes. The host program is
//! aborted (`sync_place:1`) where it puts a sync out's tree in place, too. Each ends with
//! the soak's leak count at zero. Skips loudly without bwrap and the worker (fails with
//! `ENVRT_REQUIRE_SANDBOX=1`).

mod faults;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

use faults::trees::{FILES, read_tree, write_tree};
use faults::{Scratch, environment, run_bounded};

/// Entries of `dir` whose name starts with `.envrt-hold-` (what the sandbox host held).
fn held_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".envrt-hold-"))
        .collect()
}

/// Entries of `dir` whose name starts with `.envrt-sync-` (a staged tree left behind).
fn staged_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".envrt-sync-"))
        .collect()
}

/// `envrt cp -q --replace FROM TO` with the worker's fault point `operation:n` armed:
/// `true` when the copy completed, `false` when the worker was killed there (the call
/// then failed with the exact text of a worker gone mid-call).
fn copy_hooked(s: &Scratch, from: &str, to: &str, operation: &str, n: u32) -> bool {
    let mut command = s.command(&["cp", "-q", "--replace", from, to]);
    command.env(envrt::core::fault::ABORT_VAR, format!("{operation}:{n}"));
    let out = run_bounded(command);
    assert_eq!(out.status.signal(), None, "the host program itself was killed");
    if out.status.success() {
        return true;
    }
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut lines = stderr.lines();
    assert_eq!(lines.next(), Some(WORKER_KILLED), "{operation}:{n}: {stderr}");
    // the worker's stderr tail follows, its hook line last
    let hook = envrt::core::fault::ABORT_LINE
        .replace("{n}", &n.to_string())
        .replace("{operation}", operation);
    assert_eq!(lines.last(), Some(hook.as_str()), "{operation}:{n}: {stderr}");
    false
}

/// What a sync whose worker was SIGKILLed mid-call fails with (its first line; the
/// worker's stderr tail follows).
const WORKER_KILLED: &str = "Worker process exited (code=null, signal=SIGKILL)";

fn sandbox_scratch() -> Option<(Scratch, String, PathBuf)> {
    envrt_test_support::sandbox::worker_beside_or_skip(faults::BIN)?;
    let s = Scratch::new(&environment("box", "sandbox", ""));
    let id = s.acquire("box");
    let resource = s.lease(&id)["providerLeaseId"].as_str().unwrap().to_owned();
    let lease_dir = s.state().join("sandbox").join(resource);
    Some((s, id, lease_dir))
}

#[test]
fn a_sync_in_whose_worker_is_killed_leaves_the_target_as_it_was_or_complete() {
    let Some((s, id, lease_dir)) = sandbox_scratch() else {
        return;
    };
    write_tree(&s.path().join("old"), b'o');
    write_tree(&s.path().join("new"), b'n');
    let target = format!("lease:{id}:tree");
    let out = s.run(&["cp", "-q", "--replace", "old", &target]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let old = read_tree(&s.path().join("old"));
    let new = read_tree(&s.path().join("new"));
    assert_eq!(read_tree(&lease_dir.join("tree")), old);
    let sandbox_root = s.state().join("sandbox");
    let mut kills = 0;
    for n in 1.. {
        assert!(n < 100, "the sync in never completed");
        if copy_hooked(&s, "new", &target, "sync_in", n) {
            break;
        }
        kills += 1;
        let now = read_tree(&lease_dir.join("tree"));
        assert!(
            now == old || now == new,
            "sync_in:{n} left the target half-written: {now:?}"
        );
        // only the last point (after the exchange) finds the new tree in place
        assert_eq!(now == new, n as usize == FILES + 1, "sync_in:{n}");
        // the next command's worker removes what the killed one staged
        let out = s.run(&["exec", "--lease", &id, "--", "true"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(staged_in(&sandbox_root), Vec::<String>::new(), "sync_in:{n}");
        assert_eq!(staged_in(&lease_dir), Vec::<String>::new(), "sync_in:{n}");
    }
    // a point after every file, and one after the exchange
    assert_eq!(kills, FILES + 1);
    let out = s.run(&["exec", "--lease", &id, "--", "true"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(staged_in(&sandbox_root), Vec::<String>::new());
    assert_eq!(read_tree(&lease_dir.join("tree")), new);
    let out = s.run(&["lease", "release", &id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    s.assert_no_leaks("sandbox");
}

#[test]
fn a_sync_out_whose_worker_is_killed_leaves_the_target_as_it_was_or_complete() {
    let Some((s, id, lease_dir)) = sandbox_scratch() else {
        return;
    };
    write_tree(&lease_dir.join("tree"), b'n');
    write_tree(&s.path().join("host/out"), b'o');
    let old = read_tree(&s.path().join("host/out"));
    let new = read_tree(&lease_dir.join("tree"));
    let source = format!("lease:{id}:tree");
    let target = s.path().join("host/out");
    let target = target.to_str().unwrap();
    let mut kills = 0;
    for n in 1.. {
        assert!(n < 100, "the sync out never completed");
        if copy_hooked(&s, &source, target, "sync_out", n) {
            break;
        }
        kills += 1;
        assert_eq!(
            read_tree(Path::new(target)),
            old,
            "sync_out:{n} left the target half-written"
        );
    }
    // the worker writes into the host's hold directory (the target does not exist there,
    // so no exchange of its own): a point after every file
    assert_eq!(kills, FILES);
    assert_eq!(read_tree(Path::new(target)), new);
    assert_eq!(staged_in(&s.path().join("host")), Vec::<String>::new());
    assert_eq!(held_in(&s.path().join("host")), Vec::<String>::new());

    // The host program killed where it puts the written tree in place: the exchange is
    // done (the target complete), and what it held goes with the next sync out there.
    write_tree(&lease_dir.join("tree"), b'm');
    let moved = read_tree(&lease_dir.join("tree"));
    let mut command = s.command(&["cp", "-q", "--replace", &source, target]);
    command.env(envrt::core::fault::ABORT_VAR, "sync_place:1");
    let out = run_bounded(command);
    assert_eq!(out.status.signal(), Some(6), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(read_tree(Path::new(target)), moved);
    assert_eq!(held_in(&s.path().join("host")).len(), 1);
    let out = s.run(&["cp", "-q", "--replace", &source, target]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(read_tree(Path::new(target)), moved);
    assert_eq!(held_in(&s.path().join("host")), Vec::<String>::new());
    let out = s.run(&["lease", "release", &id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    s.assert_no_leaks("sandbox");
}
