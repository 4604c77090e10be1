//! `envrt lease pause` and `envrt lease unpause` on the local driver, each a program of
//! its own on one state directory: the counter a spawned process keeps stands still while
//! the lease is paused (measured against a second lease's counter), `lease list` says
//! `paused`, `exec` and `spawn` are refused with the exact text (exit 2), and after
//! `unpause` the counter goes on and `logs` still reads the process.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{Site, survivors};

const COUNTER: &str =
    "i=0; while :; do i=$((i+1)); echo $i > count.tmp; mv count.tmp count; echo tick-$i; sleep 0.02; done";

/// Spawns the counter on a new lease; (process id, lease id, workspace).
fn counting(site: &Site, tag: &str) -> (String, String, PathBuf) {
    let out = site.run(&["spawn", "--", "sh", "-c", COUNTER, tag]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let id = out.stdout_text().lines().last().unwrap().to_owned();
    let lease = id.rsplit_once('/').unwrap().0.to_owned();
    let record = site
        .leases_json()
        .into_iter()
        .find(|l| l["id"] == lease.as_str())
        .unwrap();
    let workspace = PathBuf::from(record["metadata"]["workspace"].as_str().unwrap());
    assert!(eventually(|| count(&workspace) > 2), "the counter never counted");
    (id, lease, workspace)
}

fn count(workspace: &std::path::Path) -> u64 {
    std::fs::read_to_string(workspace.join("count"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(30);
    while !done() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[test]
fn pause_freezes_the_lease_list_says_so_refusals_and_unpause_goes_on() {
    let site = Site::new();
    let tag = common::marker();
    let (process, lease, workspace) = counting(&site, &tag);
    let (_, reference, reference_ws) = counting(&site, &common::marker());

    let paused = site.run(&["lease", "pause", &lease]);
    assert_eq!(paused.code, Some(0), "{}", paused.stderr);
    assert_eq!(paused.stdout_text(), format!("{lease} paused\n"));
    let frozen_at = count(&workspace);
    let start = count(&reference_ws);
    assert!(
        eventually(|| count(&reference_ws) >= start + 20),
        "the reference stopped too"
    );
    assert_eq!(count(&workspace), frozen_at, "the paused lease's counter moved");

    let list = site.run(&["lease", "list"]).stdout_text();
    let row = list.lines().find(|l| l.starts_with(&lease)).unwrap().to_owned();
    assert!(row.contains("  paused  "), "{list}");
    let other = list.lines().find(|l| l.starts_with(&reference)).unwrap().to_owned();
    assert!(other.contains("  active  "), "{list}");

    let text = format!("Lease \"{lease}\" is paused.\n");
    let refused = site.run(&["exec", "--lease", &lease, "--", "true"]);
    assert_eq!((refused.code, refused.stderr.as_str()), (Some(2), text.as_str()));
    let refused = site.run(&["spawn", "--lease", &lease, "--", "true"]);
    assert_eq!((refused.code, refused.stderr.as_str()), (Some(2), text.as_str()));

    let unpaused = site.run(&["lease", "unpause", &lease]);
    assert_eq!(unpaused.code, Some(0), "{}", unpaused.stderr);
    assert_eq!(unpaused.stdout_text(), format!("{lease} unpaused\n"));
    assert!(
        eventually(|| count(&workspace) > frozen_at + 2),
        "the counter did not go on"
    );
    let logs = site.run(&["logs", "--stream", "stdout", &process]);
    // A process still running: logs prints what it has so far.
    assert!(logs.stdout_text().starts_with("tick-1\ntick-2\n"), "{}", logs.stderr);

    // Paused again, the lease still releases and its processes die.
    assert_eq!(site.run(&["lease", "pause", &lease]).code, Some(0));
    let released = site.run(&["lease", "release", &lease]);
    assert_eq!(released.code, Some(0), "{}", released.stderr);
    assert!(survivors(&tag).is_empty(), "a paused process outlived release");
    assert_eq!(site.run(&["lease", "release", &reference]).code, Some(0));
}
