//! The `envrtListLeases` extension: the worker lists every lease directory under its root
//! with the envrt lease id the host gave at acquire, across a restart, and forgets a
//! destroyed one.

mod common;

use common::*;
use serde_json::json;

fn acquire_for(w: &mut Worker, envrt_lease_id: Option<&str>) -> String {
    let mut params =
        json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1", "config": {}, "runId": "run-1"});
    if let Some(id) = envrt_lease_id {
        params["envrtLeaseId"] = json!(id);
    }
    w.ok("environmentAcquireLease", params)["providerLeaseId"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn the_worker_lists_its_leases_with_their_envrt_ids_and_forgets_destroyed_ones() {
    let mut w = Worker::ready();
    assert_eq!(
        w.ok("envrtListLeases", json!({"driverKey": "sandbox"})),
        json!({"leases": []})
    );
    let held = acquire_for(&mut w, Some("lease-held"));
    let anonymous = acquire_for(&mut w, None);
    let mut expected = vec![
        json!({"providerLeaseId": held, "envrtLeaseId": "lease-held"}),
        json!({"providerLeaseId": anonymous}),
    ];
    expected.sort_by_key(|v| v["providerLeaseId"].as_str().unwrap().to_owned());
    assert_eq!(w.ok("envrtListLeases", json!({})), json!({"leases": expected}));
    // the record is an attribute of the lease directory: nothing in the workspace or the root
    let listing = w.ok(
        "environmentExecute",
        on_lease(&held, json!({"command": "ls", "args": ["-a", "/workspace"]})),
    );
    assert_eq!(listing["stdout"], ".\n..\n");

    // a released lease keeps its files, so it is still listed
    w.ok("environmentReleaseLease", json!({"providerLeaseId": anonymous}));
    w.ok("environmentDestroyLease", json!({"providerLeaseId": held}));
    let left: Vec<String> = std::fs::read_dir(w.root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, std::slice::from_ref(&anonymous));
    assert_eq!(
        w.ok("envrtListLeases", json!({})),
        json!({"leases": [{"providerLeaseId": anonymous}]})
    );
}

#[test]
fn a_restarted_worker_lists_what_the_previous_one_left() {
    let root;
    let held;
    {
        let mut first = Worker::ready();
        held = acquire_for(&mut first, Some("lease-1"));
        root = first.root.path().to_path_buf();
        // keep the directory: a second worker is started over the same root below
        std::mem::forget(std::mem::replace(&mut first.root, tempfile::tempdir().unwrap()));
    }
    let mut second = Worker::ready_with(&["--root", root.to_str().unwrap()]);
    assert_eq!(
        second.ok("envrtListLeases", json!({})),
        json!({"leases": [{"providerLeaseId": held, "envrtLeaseId": "lease-1"}]})
    );
    second.ok("environmentDestroyLease", json!({"providerLeaseId": held}));
    assert_eq!(second.ok("envrtListLeases", json!({})), json!({"leases": []}));
    drop(second);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_sandboxed_command_cannot_change_which_envrt_lease_its_workspace_belongs_to() {
    if !running_as_root() {
        eprintln!("SKIPPED: the trusted.* record needs a worker running as root");
        return;
    }
    let mut w = Worker::ready();
    let held = acquire_for(&mut w, Some("lease-held"));
    let script = "import os\n\
        for name in ('trusted.envrt.lease', 'user.envrt.lease'):\n\
        \x20   try:\n\
        \x20       os.setxattr('/workspace', name, b'lease-other')\n\
        \x20       print(name, 'set')\n\
        \x20   except OSError as e:\n\
        \x20       print(name, e.errno)\n";
    let result = w.ok(
        "environmentExecute",
        on_lease(&held, json!({"command": "python3", "args": ["-c", script]})),
    );
    assert_eq!(result["exitCode"], 0, "{result}");
    let stdout = result["stdout"].as_str().unwrap();
    assert!(stdout.starts_with("trusted.envrt.lease 1\n"), "{stdout}");
    assert_eq!(
        w.ok("envrtListLeases", json!({})),
        json!({"leases": [{"providerLeaseId": held, "envrtLeaseId": "lease-held"}]})
    );
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}
