//! `envrt lease show ID [--json]` through the binary on the local driver: the fields
//! `lease list` shows plus environment, driver, capabilities, expiry and holder; an
//! unknown id gets the facade's exact not-found text.

mod common;

use common::*;

#[test]
fn lease_show_prints_one_lease_with_its_driver_capabilities_expiry_and_holder() {
    let s = Site::new();
    let out = s.run(&[
        "lease",
        "acquire",
        "--holder-pid",
        &std::process::id().to_string(),
        "--ttl",
        "1h",
    ]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let id = out.stdout_text().trim().to_owned();
    // lease list shows the same expiry in its EXPIRES column.
    let listed = s.run(&["lease", "list"]).stdout_text();
    let expires = listed
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .last()
        .unwrap()
        .to_owned();
    assert!(expires.starts_with("20"), "{listed}");
    let shown = s.run(&["lease", "show", &id]);
    assert_eq!(shown.code, Some(0), "{}", shown.stderr);
    let lines: Vec<String> = shown.stdout_text().lines().map(str::to_owned).collect();
    assert_eq!(lines[0], format!("ID           {id}"));
    assert_eq!(lines[1], "ENVIRONMENT  local");
    assert_eq!(lines[2], "DRIVER       local");
    assert_eq!(lines[3], "STATUS       active");
    assert_eq!(lines[4], "POLICY       ephemeral");
    assert_eq!(lines[5], format!("HOLDER       {} (alive)", std::process::id()));
    assert!(lines[6].starts_with("ACQUIRED     20"), "{lines:?}");
    assert_eq!(lines[7], format!("EXPIRES      {expires}"));
    assert_eq!(
        lines[8],
        // persistentProcessSessions: the supervisor `envrt-agent` is built next to `envrt`.
        "CAPABILITIES reusableLeases nativeSyncIn nativeSyncOut persistentProcessSessions \
         independentControlCommands incrementalSessionOutput concurrentSyncOperations"
    );
    let json = s.run(&["lease", "show", &id, "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["lease"]["id"], id.as_str());
    assert_eq!(doc["driver"], "local");
    assert_eq!(doc["capabilities"]["duplexCommandStream"], false);
    assert_eq!(
        doc["holder"],
        serde_json::json!({"pid": std::process::id(), "alive": true})
    );
    let unknown = s.run(&["lease", "show", "no-such-lease"]);
    assert_eq!(
        (unknown.code, unknown.stderr.as_str()),
        (Some(2), "Lease \"no-such-lease\" was not found.\n")
    );
    assert_eq!(s.run(&["lease", "release", &id]).code, Some(0));
}
