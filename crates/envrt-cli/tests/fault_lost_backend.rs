//! Stuck states: a lease whose backend died behind envrt's back (the local workspace
//! deleted, the container removed, the sandbox's directory deleted, the remote ssh
//! workspace deleted) is reported as lost, with one exact text, by its next execute, sync
//! in, sync out and spawn; releasing or destroying it then succeeds and cleans what is
//! left, and the soak's leak count finds nothing. Each driver's test skips loudly without
//! its component (fails with `ENVRT_REQUIRE_*=1`).

mod faults;

use faults::{Scratch, environment, last_error_line, ssh_environment};

/// The one text of a lost lease (contract section 3).
fn lost(id: &str, resource: &str) -> String {
    format!(
        "Lease \"{id}\" is lost: its provider resource \"{resource}\" is gone; release or destroy the lease to end it."
    )
}

/// Every operation on the lost lease `id` fails with the lost text; `spawn` only where the
/// driver has process sessions.
fn every_operation_reports_lost(s: &Scratch, id: &str, resource: &str, spawn: bool) {
    // Larger than any pipe or channel window: a remote side that exits before reading it
    // leaves the sender a broken pipe, which must not hide why it exited.
    std::fs::write(s.path().join("in.txt"), vec![7u8; 8 << 20]).unwrap();
    let target = format!("lease:{id}:note");
    let mut calls: Vec<Vec<&str>> = vec![
        vec!["exec", "--lease", id, "--", "true"],
        vec!["cp", "-q", "in.txt", &target],
        vec!["cp", "-q", &target, "out.txt"],
    ];
    if spawn {
        calls.push(vec!["spawn", "--lease", id, "--", "true"]);
    }
    for call in calls {
        let out = s.run(&call);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{call:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(last_error_line(&out), lost(id, resource), "{call:?}");
    }
    assert!(
        !s.path().join("out.txt").exists(),
        "a lost lease's sync out wrote a file"
    );
}

/// Ends the lost lease with `verb` (`release` or `destroy`), twice (idempotent), and checks
/// its record says it ended cleanly.
fn ending_succeeds(s: &Scratch, id: &str, verb: &str) {
    for _ in 0..2 {
        let out = s.run(&["lease", verb, id]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{verb}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let lease = s.lease(id);
    assert_eq!(lease["status"], "released", "{lease}");
    assert_eq!(lease["cleanupStatus"], "success", "{lease}");
}

/// `envrt gc` ends a lost lease (`broken`, after `break_it` removed its backend) and leaves
/// a healthy one (`kept`) alone: the lost one is recorded `failed` with reason
/// `lease_lost`, what was left of it is cleaned, and the healthy one stays active until
/// released.
fn gc_ends_a_lost_lease(s: &Scratch, env: &str, break_it: impl FnOnce(&Scratch, &str)) {
    let kept = s.acquire(env);
    let broken = s.acquire(env);
    break_it(s, &broken);
    let out = s.run(&["gc"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout
            .lines()
            .any(|l| l == format!("released lease {broken} (it is lost: its provider resource is gone)")),
        "{stdout}"
    );
    assert!(!stdout.contains(&kept), "gc touched the healthy lease: {stdout}");
    let lease = s.lease(&broken);
    assert_eq!(lease["status"], "failed", "{lease}");
    assert_eq!(lease["failureReason"], "lease_lost", "{lease}");
    assert_eq!(lease["cleanupStatus"], "success", "{lease}");
    assert_eq!(s.lease(&kept)["status"], "active");
    let out = s.run(&["exec", "--lease", &kept, "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = s.run(&["lease", "release", &kept]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

fn provider_id(s: &Scratch, id: &str) -> String {
    s.lease(id)["providerLeaseId"].as_str().unwrap().to_owned()
}

#[test]
fn a_local_lease_whose_workspace_was_deleted_is_lost_and_releasable() {
    let s = Scratch::new(&environment("loc", "local", ""));
    let id = s.acquire("loc");
    let resource = provider_id(&s, &id);
    std::fs::remove_dir_all(s.state().join("workspaces").join(&resource)).unwrap();
    every_operation_reports_lost(&s, &id, &resource, true);
    ending_succeeds(&s, &id, "release");
    s.assert_no_leaks("local");
}

#[test]
fn gc_ends_a_local_lease_whose_workspace_was_deleted() {
    let s = Scratch::new(&environment("loc", "local", ""));
    gc_ends_a_lost_lease(&s, "loc", |s, id| {
        std::fs::remove_dir_all(s.state().join("workspaces").join(provider_id(s, id))).unwrap();
    });
    s.assert_no_leaks("local");
}

#[test]
fn a_docker_lease_whose_container_was_removed_is_lost_and_destroyable() {
    let Some(image) = envrt_test_support::docker::image_or_skip() else {
        return;
    };
    let s = Scratch::new(&environment("ctr", "docker", &format!("image = \"{image}\"\n")));
    let id = s.acquire("ctr");
    let container = provider_id(&s, &id);
    let removed = std::process::Command::new("docker")
        .args(["rm", "-f", &container])
        .output()
        .unwrap();
    assert!(removed.status.success(), "{}", String::from_utf8_lossy(&removed.stderr));
    every_operation_reports_lost(&s, &id, &container, false);
    ending_succeeds(&s, &id, "destroy");
    s.assert_no_leaks("docker");
}

#[test]
fn gc_ends_a_docker_lease_whose_container_was_removed() {
    let Some(image) = envrt_test_support::docker::image_or_skip() else {
        return;
    };
    let s = Scratch::new(&environment("ctr", "docker", &format!("image = \"{image}\"\n")));
    gc_ends_a_lost_lease(&s, "ctr", |s, id| {
        let container = provider_id(s, id);
        let removed = std::process::Command::new("docker")
            .args(["rm", "-f", &container])
            .output()
            .unwrap();
        assert!(removed.status.success(), "{}", String::from_utf8_lossy(&removed.stderr));
    });
    s.assert_no_leaks("docker");
}

#[test]
fn a_sandbox_lease_whose_sandbox_was_deleted_is_lost_and_destroyable() {
    if envrt_test_support::sandbox::worker_beside_or_skip(faults::BIN).is_none() {
        return;
    }
    let s = Scratch::new(&environment("box", "sandbox", ""));
    let id = s.acquire("box");
    let resource = provider_id(&s, &id);
    std::fs::remove_dir_all(s.state().join("sandbox").join(&resource)).unwrap();
    every_operation_reports_lost(&s, &id, &resource, true);
    ending_succeeds(&s, &id, "destroy");
    s.assert_no_leaks("sandbox");
}

#[test]
fn gc_ends_a_sandbox_lease_whose_sandbox_was_deleted() {
    if envrt_test_support::sandbox::worker_beside_or_skip(faults::BIN).is_none() {
        return;
    }
    let s = Scratch::new(&environment("box", "sandbox", ""));
    gc_ends_a_lost_lease(&s, "box", |s, id| {
        std::fs::remove_dir_all(s.state().join("sandbox").join(provider_id(s, id))).unwrap();
    });
    s.assert_no_leaks("sandbox");
}

/// The remote workspace of ssh lease `id` (the test host is this machine).
fn remote_workspace(s: &Scratch, id: &str) -> std::path::PathBuf {
    s.lease(id)["metadata"]["workspace"].as_str().unwrap().into()
}

#[test]
fn an_ssh_lease_whose_remote_workspace_was_deleted_is_lost_and_releasable() {
    let Some(config) = ssh_environment() else { return };
    let s = Scratch::new(&config);
    let id = s.acquire("remote");
    let resource = provider_id(&s, &id);
    // The test host is this machine: its lease directory is the workspace's parent.
    let workspace = s.lease(&id)["metadata"]["workspace"].as_str().unwrap().to_owned();
    let lease_dir = std::path::Path::new(&workspace).parent().unwrap().to_owned();
    assert!(lease_dir.ends_with(&resource), "{}", lease_dir.display());
    std::fs::remove_dir_all(&workspace).unwrap();
    every_operation_reports_lost(&s, &id, &resource, true);
    ending_succeeds(&s, &id, "release");
    assert!(
        !lease_dir.exists(),
        "the remote lease directory is left: {}",
        lease_dir.display()
    );
    s.assert_no_leaks("ssh");
}

#[test]
fn gc_ends_an_ssh_lease_whose_remote_workspace_was_deleted() {
    let Some(config) = ssh_environment() else { return };
    let s = Scratch::new(&config);
    let mut lease_dirs = Vec::new();
    gc_ends_a_lost_lease(&s, "remote", |s, id| {
        let workspace = remote_workspace(s, id);
        lease_dirs.push(workspace.parent().unwrap().to_owned());
        std::fs::remove_dir_all(&workspace).unwrap();
    });
    for dir in lease_dirs {
        assert!(!dir.exists(), "the remote lease directory is left: {}", dir.display());
    }
    s.assert_no_leaks("ssh");
}
