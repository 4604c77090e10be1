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

#[test]
fn doctor_runs_each_plugin_environments_probe_bounded_in_time() {
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../driver-plugin-sandbox/tests/fixtures/sdk-worker");
    assert!(
        fixture.join("node_modules/@paperclipai/plugin-sdk").exists(),
        "the SDK fixture is not installed; run crates/driver-plugin-sandbox/scripts/install-sdk-fixture.sh"
    );
    let fixture = std::fs::canonicalize(fixture).unwrap();
    let reference = std::path::Path::new(BIN).with_file_name("envrt-sandbox-worker");
    let s = Site::new();
    let config = s.path().join("envrt.toml");
    std::fs::write(
        &config,
        format!(
            "[sandbox]\nworker = \"{}\"\n[[plugin]]\nmanifest = \"{}\"\n\
             [[environment]]\nid = \"fx\"\ndriver = \"fixture\"\n\
             [[environment]]\nid = \"fxr\"\ndriver = \"fixture\"\n[environment.config]\nprobe = \"refuse\"\n\
             [[environment]]\nid = \"fxh\"\ndriver = \"fixture\"\n[environment.config]\nprobe = \"hang\"\n\
             [[environment]]\nid = \"box\"\ndriver = \"sandbox\"\n",
            reference.display(),
            fixture.display()
        ),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = s.run(&["--config", config.to_str().unwrap(), "doctor", "--json"]);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.code, Some(1), "a probe failed: {}", out.stderr);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let probes: Vec<&serde_json::Value> = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == "environment probe")
        .collect();
    assert_eq!(probes.len(), 4, "{doc}");
    let by_env = |id: &str| {
        *probes
            .iter()
            .find(|c| c["detail"].as_str().unwrap().starts_with(&format!("{id} (")))
            .unwrap_or_else(|| panic!("no probe of {id}: {doc}"))
    };
    let fx = by_env("fx");
    assert_eq!(
        (fx["ok"].clone(), fx["required"].clone()),
        (true.into(), true.into()),
        "{fx}"
    );
    assert!(
        fx["detail"]
            .as_str()
            .unwrap()
            .starts_with("fx (fixture): fixture sandbox provider ready (root /"),
        "{fx}"
    );
    assert_eq!(fx["fix"], serde_json::Value::Null);
    let fix = "the environment's provider says it is not usable: see its answer, its worker's stderr and the environment's config";
    assert_eq!(
        by_env("fxr"),
        &serde_json::json!({
            "name": "environment probe", "required": true, "ok": false,
            "detail": "fxr (fixture): the worker refused environmentProbe: fixture probe refused on request",
            "fix": fix,
        })
    );
    assert_eq!(
        by_env("fxh"),
        &serde_json::json!({
            "name": "environment probe", "required": true, "ok": false,
            "detail": "fxh (fixture): environmentProbe got no answer within 10000 ms",
            "fix": fix,
        })
    );
    let reference = by_env("box");
    assert_eq!(reference["ok"], true, "{reference}");
    assert!(
        reference["detail"]
            .as_str()
            .unwrap()
            .starts_with("box (sandbox): bubblewrap sandbox ready ("),
        "{reference}"
    );

    // The text form says the same.
    let text = s.run(&["--config", config.to_str().unwrap(), "doctor"]);
    assert_eq!(text.code, Some(1));
    let text = text.stdout_text();
    assert!(
        text.contains("MISSING environment probe: fxh (fixture): environmentProbe got no answer within 10000 ms\n"),
        "{text}"
    );
    assert!(
        text.contains("ok      environment probe: fx (fixture): fixture sandbox provider ready (root /"),
        "{text}"
    );
}
