//! `envrt gc` reconciles the local driver's real workspaces with the store: the workspace
//! of a lease whose record is lost (a holder that died, a store that lost the row) is
//! removed and the command still running there killed; the workspaces of active, retained
//! and reusable leases stay; `--dry-run` only says what it would remove.

mod common;

use std::path::PathBuf;

use common::{Reaper, Site, marker, sleepers, survivors};

/// Deletes a lease's row from the state directory's store, as a lost record.
fn lose_record(s: &Site, id: &str) {
    let db = rusqlite::Connection::open(s.state().join("leases.db")).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    assert_eq!(db.execute("DELETE FROM leases WHERE id = ?1", [id]).unwrap(), 1);
}

fn acquire(s: &Site, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["lease", "acquire", "--detached", "--json"];
    args.extend_from_slice(extra);
    let out = s.run(&args);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn workspace(lease: &serde_json::Value) -> PathBuf {
    PathBuf::from(lease["metadata"]["workspace"].as_str().unwrap())
}

#[test]
fn gc_removes_the_workspace_and_the_command_of_a_lost_lease_and_keeps_the_rest() {
    let s = Site::new();
    let mark = marker();
    let _reaper = Reaper(mark.clone());
    // A holder whose command runs; it dies, and its lease's record is lost with it.
    let (mut holder, lost) = s.start_holder(&[], &mark);
    holder.kill().unwrap();
    holder.wait().unwrap();
    let lost_id = lost["id"].as_str().unwrap();
    let lost_workspace = workspace(&lost);
    lose_record(&s, lost_id);
    assert_eq!(sleepers(&mark).len(), 1, "the dead holder's command still runs");

    let active = acquire(&s, &[]);
    let reusable = acquire(&s, &["--policy", "reuse_by_environment"]);
    let out = s.run(&["lease", "release", reusable["id"].as_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let retained = acquire(&s, &["--policy", "retain_on_failure"]);
    let retained_id = retained["id"].as_str().unwrap();
    let out = s.run(&["lease", "release", retained_id, "--status", "failed"]);
    assert_eq!(out.stdout_text(), format!("{retained_id} retained\n"));

    let orphan_line = format!("orphan workspace {} (lease {lost_id})", lost_workspace.display());
    let dry = s.run(&["gc", "--dry-run"]);
    assert_eq!(dry.code, Some(0), "{}", dry.stderr);
    assert_eq!(dry.stdout_text(), format!("would remove {orphan_line}\n"));
    assert!(lost_workspace.is_dir(), "a dry run removes nothing");
    assert_eq!(sleepers(&mark).len(), 1, "a dry run kills nothing");

    let gc = s.run(&["gc"]);
    assert_eq!(gc.code, Some(0), "{}", gc.stderr);
    assert_eq!(
        gc.stdout_text(),
        format!("removed {orphan_line}\ngc: 1 released, 0 failed\n")
    );
    assert!(!lost_workspace.exists(), "the lost lease's workspace is gone");
    assert_eq!(survivors(&mark), Vec::<u32>::new(), "its command is killed");
    for kept in [&active, &reusable, &retained] {
        assert!(workspace(kept).is_dir(), "{} keeps its workspace", kept["leasePolicy"]);
    }
    assert_eq!(s.run(&["gc"]).stdout_text(), "gc: 0 released, 0 failed\n");

    for kept in [&active, &reusable, &retained] {
        let out = s.run(&["lease", "destroy", kept["id"].as_str().unwrap()]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
    }
    let left = std::fs::read_dir(s.state().join("workspaces")).unwrap().count();
    assert_eq!(left, 0);
}
