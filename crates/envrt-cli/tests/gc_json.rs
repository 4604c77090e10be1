//! `envrt gc --json`: one document `{ok, dryRun, leases, orphans, errors, released, failed}`
//! with the same verdicts, counts and exit code as the text form (the shape is documented
//! in the CLI's README and in `src/gc_report.rs`).

mod common;

use common::{Reaper, Site, marker, survivors};
use serde_json::json;

fn doc(out: &common::Outcome) -> serde_json::Value {
    assert_eq!(out.stderr, "", "--json puts every failure in the document");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout_text()))
}

#[test]
fn gc_json_reports_each_release_and_orphan_with_the_text_forms_counts() {
    let s = Site::new();
    let mark = marker();
    let _reaper = Reaper(mark.clone());
    assert_eq!(
        doc(&s.run(&["gc", "--json"])),
        json!({"ok": true, "dryRun": false, "leases": [], "orphans": [], "errors": [], "released": 0, "failed": 0})
    );

    // A holder that dies with its command running.
    let (mut holder, lease) = s.start_holder(&[], &mark);
    holder.kill().unwrap();
    holder.wait().unwrap();
    let id = lease["id"].as_str().unwrap();
    // A lease whose record is lost: its workspace is an orphan.
    let lost = s.run(&["lease", "acquire", "--detached", "--json"]);
    let lost: serde_json::Value = serde_json::from_slice(&lost.stdout).unwrap();
    let lost_id = lost["id"].as_str().unwrap();
    let lost_workspace = lost["metadata"]["workspace"].as_str().unwrap().to_owned();
    let db = rusqlite::Connection::open(s.state().join("leases.db")).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    assert_eq!(db.execute("DELETE FROM leases WHERE id = ?1", [lost_id]).unwrap(), 1);
    drop(db);

    let dry = s.run(&["gc", "--dry-run", "--json"]);
    assert_eq!(dry.code, Some(0));
    assert_eq!(
        doc(&dry),
        json!({
            "ok": true,
            "dryRun": true,
            "leases": [{"id": id, "reason": "holder_gone", "holderPid": holder.id(), "killedProcesses": 0, "done": false, "error": null}],
            "orphans": [{"kind": "workspace", "id": lost_workspace, "lease": lost_id, "done": false}],
            "errors": [],
            "released": 0,
            "failed": 0
        })
    );

    let gc = s.run(&["gc", "--json"]);
    assert_eq!(gc.code, Some(0));
    let report = doc(&gc);
    let killed = report["leases"][0]["killedProcesses"].clone();
    assert_eq!(
        report,
        json!({
            "ok": true,
            "dryRun": false,
            "leases": [{"id": id, "reason": "holder_gone", "holderPid": holder.id(), "killedProcesses": killed, "done": true, "error": null}],
            "orphans": [{"kind": "workspace", "id": lost_workspace, "lease": lost_id, "done": true}],
            "errors": [],
            "released": 2,
            "failed": 0
        })
    );
    assert_eq!(killed, 1, "the sleep the holder left running: {report}");
    assert_eq!(survivors(&mark), Vec::<u32>::new(), "the holder's command survived gc");
    assert!(!std::path::Path::new(&lost_workspace).exists());
}
