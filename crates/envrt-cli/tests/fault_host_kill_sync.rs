//! The host program killed in the middle of a sync, on the drivers whose sync runs in it:
//! local (both ways), the sync out of Docker and ssh (a tar read into a staging
//! directory beside the target on this host), and Docker's sync in (a tar the engine
//! extracts into a staged sibling of the target in the container). The target is either untouched or complete,
//! never half-written, and what the killed program staged or had replaced beside the
//! target is gone after the next sync there. The kill lands deterministically: the fault
//! points `sync_in:N` / `sync_out:N` (one after each file copied or extracted) and
//! `sync_place:N` (one after each target is put in place) abort the program at the `N`-th
//! (`ENVRT_TEST_ABORT_AT`, as a SIGKILL: no destructor runs); the test raises `N` from 1
//! until the copy completes. Each ends with the soak's leak count at zero.

mod faults;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

use faults::trees::{FILES, read_tree, write_tree};
use faults::{Scratch, environment, run_bounded, ssh_environment};

/// `envrt cp -q --replace FROM TO` with the host program's fault point `operation:n`
/// armed: `true` when the copy completed, `false` when the program aborted there.
fn copy_aborted_at(s: &Scratch, from: &str, to: &str, operation: &str, n: u32) -> bool {
    let mut command = s.command(&["cp", "-q", "--replace", from, to]);
    command.env(envrt::core::fault::ABORT_VAR, format!("{operation}:{n}"));
    let out = run_bounded(command);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        return true;
    }
    assert_eq!(out.status.signal(), Some(6), "{operation}:{n}: {stderr}");
    let hook = envrt::core::fault::ABORT_LINE
        .replace("{n}", &n.to_string())
        .replace("{operation}", operation);
    assert!(stderr.contains(&hook), "{operation}:{n}: {stderr}");
    false
}

/// Entries of `dir` a sync made beside its targets (`.envrt-` in the name).
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".envrt-"))
        .collect()
}

fn copy(s: &Scratch, from: &str, to: &str) {
    let out = s.run(&["cp", "-q", "--replace", from, to]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Copies `from` (a tree of tag `new`) onto `to`, whose files are at `target` (a tree of
/// tag `old`), killing the host at every `copy_point` in turn (the target stays old), then
/// copies `again` (a tree of tag `m`, put at `from` by `refill`) killing the host right
/// after the target was put in place (the target is the new one), and a last time without
/// a kill, after which nothing the killed runs left is beside the target.
fn killed_at_every_step(s: &Scratch, (from, to, target): (&str, &str, &Path), copy_point: &str, refill: impl FnOnce()) {
    let old = read_tree(target);
    let mut kills = 0;
    for n in 1.. {
        assert!(n < 100, "the copy never completed");
        if copy_aborted_at(s, from, to, copy_point, n) {
            break;
        }
        kills += 1;
        assert_eq!(read_tree(target), old, "{copy_point}:{n} changed the target");
    }
    // a point after every file
    assert_eq!(kills, FILES, "{copy_point}");
    let new = read_tree(target);
    assert_ne!(new, old);
    assert!(new.values().all(|v| v.ends_with(" x 110") || v == "dir"), "{new:?}");
    refill();
    assert!(!copy_aborted_at(s, from, to, "sync_place", 1));
    let moved = read_tree(target);
    assert!(
        moved.values().all(|v| v.ends_with(" x 109") || v == "dir"),
        "sync_place:1 left {moved:?}"
    );
    let parent = target.parent().unwrap();
    assert_eq!(
        leftovers(parent).len(),
        1,
        "what the killed program replaced is beside the target"
    );
    copy(s, from, to);
    assert_eq!(read_tree(target), moved);
    assert_eq!(
        leftovers(parent),
        Vec::<String>::new(),
        "the next sync removes what a killed one left"
    );
}

/// A lease `id` of `s` holding a tree of tag `n`, synced out onto a host tree of tag `o`
/// with the host killed at every step, then released with no leak of driver `key`.
fn sync_out_killed_at_every_step(s: &Scratch, id: &str, key: &str) {
    let source = format!("lease:{id}:tree");
    write_tree(&s.path().join("n"), b'n');
    write_tree(&s.path().join("m"), b'm');
    write_tree(&s.path().join("host/out"), b'o');
    copy(s, "n", &source);
    let target = s.path().join("host/out");
    killed_at_every_step(s, (&source, target.to_str().unwrap(), &target), "sync_out", || {
        copy(s, "m", &source)
    });
    let out = s.run(&["lease", "release", id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    s.assert_no_leaks(key);
}

#[test]
fn a_local_sync_out_whose_host_is_killed_leaves_the_target_as_it_was_or_complete() {
    let s = Scratch::new(&environment("loc", "local", ""));
    let id = s.acquire("loc");
    sync_out_killed_at_every_step(&s, &id, "local");
}

#[test]
fn a_local_sync_in_whose_host_is_killed_leaves_the_target_as_it_was_or_complete() {
    let s = Scratch::new(&environment("loc", "local", ""));
    let id = s.acquire("loc");
    let workspace: PathBuf = s
        .state()
        .join("workspaces")
        .join(s.lease(&id)["providerLeaseId"].as_str().unwrap());
    write_tree(&s.path().join("o"), b'o');
    write_tree(&s.path().join("n"), b'n');
    let target = format!("lease:{id}:tree");
    copy(&s, "o", &target);
    let m = s.path().join("m");
    killed_at_every_step(&s, ("n", &target, &workspace.join("tree")), "sync_in", || {
        // the source of the last two copies is a tree of another tag
        std::fs::remove_dir_all(s.path().join("n")).unwrap();
        write_tree(&m, b'm');
        std::fs::rename(&m, s.path().join("n")).unwrap();
    });
    let out = s.run(&["lease", "release", &id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    s.assert_no_leaks("local");
}

#[test]
fn a_docker_sync_out_whose_host_is_killed_leaves_the_target_as_it_was_or_complete() {
    let Some(image) = envrt_test_support::docker::image_or_skip() else {
        return;
    };
    let s = Scratch::new(&environment("ctr", "docker", &format!("image = \"{image}\"\n")));
    let id = s.acquire("ctr");
    sync_out_killed_at_every_step(&s, &id, "docker");
}

/// The tree at `source` (a path in a lease) as the host reads it after a sync out.
fn tree_in_lease(s: &Scratch, source: &str) -> std::collections::BTreeMap<PathBuf, String> {
    let out = s.path().join("read-back");
    let _ = std::fs::remove_dir_all(&out);
    copy(s, source, out.to_str().unwrap());
    read_tree(&out)
}

/// Entries of the lease's workspace a sync made beside its targets.
fn leftovers_in_lease(s: &Scratch, id: &str) -> Vec<String> {
    let out = s.run(&["exec", "--lease", id, "--", "ls", "-a"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|n| n.contains(".envrt-"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_docker_sync_in_whose_host_is_killed_leaves_the_target_as_it_was_and_the_next_sync_sweeps() {
    let Some(image) = envrt_test_support::docker::image_or_skip() else {
        return;
    };
    let s = Scratch::new(&environment("ctr", "docker", &format!("image = \"{image}\"\n")));
    let id = s.acquire("ctr");
    write_tree(&s.path().join("o"), b'o');
    write_tree(&s.path().join("n"), b'n');
    let target = format!("lease:{id}:tree");
    copy(&s, "o", &target);
    let old = tree_in_lease(&s, &target);
    // The host is killed after each file it sent (the engine extracts what arrived into
    // the staged sibling); the target stays the old tree.
    let mut kills = 0;
    let mut staged = Vec::new();
    for n in 1.. {
        assert!(n < 100, "the copy never completed");
        if copy_aborted_at(&s, "n", &target, "sync_in", n) {
            break;
        }
        kills += 1;
        assert_eq!(tree_in_lease(&s, &target), old, "sync_in:{n} changed the target");
        staged = leftovers_in_lease(&s, &id);
    }
    assert_eq!(kills, FILES);
    let new = tree_in_lease(&s, &target);
    assert!(new.values().all(|v| v.ends_with(" x 110") || v == "dir"), "{new:?}");
    // The completed copy ran after the kills: what they staged was gone after it.
    assert_eq!(leftovers_in_lease(&s, &id), Vec::<String>::new());
    // ... and there was something to sweep: the killed runs leave what the engine had
    // extracted (the last kill's, at least, was still there before the completed copy).
    assert!(!staged.is_empty(), "no killed sync in left a staged entry in the lease");
    let out = s.run(&["lease", "release", &id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    s.assert_no_leaks("docker");
}

#[test]
fn an_ssh_sync_out_whose_host_is_killed_leaves_the_target_as_it_was_or_complete() {
    let Some(config) = ssh_environment() else { return };
    let s = Scratch::new(&config);
    let id = s.acquire("remote");
    sync_out_killed_at_every_step(&s, &id, "ssh");
}
