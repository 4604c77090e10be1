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

/// The check named `name` of a `doctor --json` document.
fn check<'a>(doc: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} check: {doc}"))
}

#[test]
fn doctor_checks_the_worker_that_sandbox_worker_names_and_only_that_one() {
    let s = Site::new();
    let config = s.path().join("envrt.toml");
    let sandbox_env = "[[environment]]\nid = \"box\"\ndriver = \"sandbox\"\n";
    // A worker exists next to envrt (the test build's), but the file names another path.
    std::fs::write(&config, format!("[sandbox]\nworker = \"bin/nope\"\n{sandbox_env}")).unwrap();
    let out = s.run(&["--config", config.to_str().unwrap(), "doctor", "--json"]);
    assert_eq!(out.code, Some(1), "a required worker is missing: {}", out.stderr);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let missing = s.path().join("bin/nope");
    assert_eq!(
        check(&doc, "sandbox worker"),
        &serde_json::json!({
            "name": "sandbox worker",
            "required": true,
            "ok": false,
            "detail": format!(
                "Sandbox worker \"{}\" (set by [sandbox] worker in envrt.toml) is not an executable file.",
                missing.display()
            ),
            "fix": "build it (cargo build -p envrt-sandbox-worker) where [sandbox] worker in envrt.toml says, or correct that path",
        })
    );
    // The missing worker is said once, by that check.
    assert!(
        doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["name"] != "plugin worker"),
        "{doc}"
    );

    // A path that is the built worker is the one shown.
    let built = std::path::Path::new(BIN).with_file_name("envrt-sandbox-worker");
    std::fs::write(
        &config,
        format!("[sandbox]\nworker = \"{}\"\n{sandbox_env}", built.display()),
    )
    .unwrap();
    let out = s.run(&["--config", config.to_str().unwrap(), "doctor", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let worker = check(&doc, "sandbox worker");
    assert_eq!(worker["ok"], true, "{doc}");
    assert_eq!(
        worker["detail"],
        format!("{} (set by [sandbox] worker in envrt.toml)", built.display()).as_str()
    );
}
