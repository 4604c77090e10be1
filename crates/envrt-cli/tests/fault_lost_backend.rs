//! Stuck states: a lease whose backend died behind envrt's back (the local workspace
//! deleted, the container removed, the sandbox's directory deleted, the remote ssh
//! workspace deleted) is reported as lost, with one exact text, by its next execute, sync
//! in, sync out and spawn; releasing or destroying it then succeeds and cleans what is
//! left, and the soak's leak count finds nothing. Each driver's test skips loudly without
//! its component (fails with `ENVRT_REQUIRE_*=1`).

mod faults;

use faults::{Scratch, environment, last_error_line};

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
fn an_ssh_lease_whose_remote_workspace_was_deleted_is_lost_and_releasable() {
    let vars = match envrt_test_support::ssh::settings() {
        Ok(vars) => vars,
        Err(e) => {
            return envrt_test_support::Component::Ssh.skip_or_fail(
                format_args!("ENVRT_REQUIRE_SSH=1 but no test sshd ({e})"),
                format_args!("SKIPPED: no test sshd ({e})"),
            );
        }
    };
    let config = format!(
        "host = \"{}\"\nport = {}\nuser = \"{}\"\nkey = \"{}\"\nknown_hosts = \"{}\"\n",
        vars["ENVRT_TEST_SSH_HOST"],
        vars["ENVRT_TEST_SSH_PORT"],
        vars["ENVRT_TEST_SSH_USER"],
        vars["ENVRT_TEST_SSH_KEY"],
        vars["ENVRT_TEST_SSH_KNOWN_HOSTS"]
    );
    let s = Scratch::new(&environment("remote", "ssh", &config));
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
