//! `envrt doctor --json`: one document `{ok, checks: [{name, required, ok, detail, fix}]}`,
//! the same verdicts and exit code as the text form; counts are in the right number.

mod common;

use common::*;

#[test]
fn doctor_json_lists_every_check_and_fails_like_the_text_form() {
    let s = Site::new();
    let id = s
        .run(&["lease", "acquire", "--detached"])
        .stdout_text()
        .trim()
        .to_owned();
    let out = s.run(&["doctor", "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], true);
    let store = &doc["checks"][0];
    assert_eq!(store["name"], "lease store");
    assert_eq!(
        (store["required"].clone(), store["ok"].clone()),
        (true.into(), true.into())
    );
    assert_eq!(store["fix"], serde_json::Value::Null);
    assert_eq!(
        store["detail"],
        format!("{} (1 lease, 1 active)", s.state().join("leases.db").display()).as_str()
    );
    for check in doc["checks"].as_array().unwrap() {
        let keys: Vec<&String> = check.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["detail", "fix", "name", "ok", "required"], "{check}");
    }
    std::fs::write(s.path().join("blocker"), b"not a directory").unwrap();
    let broken = s.run(&["--state-dir", "blocker/state", "doctor", "--json"]);
    assert_eq!(broken.code, Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&broken.stdout).unwrap();
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["checks"][0]["ok"], false);
    assert!(doc["checks"][0]["fix"].as_str().unwrap().starts_with("make "), "{doc}");
    assert_eq!(s.run(&["lease", "release", &id]).code, Some(0));
}
