//! `[[environment]] driver = "ssh"` end to end, against the test `sshd` of
//! `scripts/start-sshd.sh` (settings from `ENVRT_TEST_SSH_ENV`, default
//! `/var/lib/envrt-test-ssh/env`): `envrt exec` runs in a remote workspace, `envrt doctor`
//! checks reachability and the host key. Without the server the tests skip loudly, unless
//! `ENVRT_REQUIRE_SSH=1`, which makes them fail.

mod common;

use std::collections::HashMap;

use common::Site;

/// The `[environment.config]` lines of the test server, or `None` (skipped).
fn server_config() -> Option<(HashMap<String, String>, String)> {
    match envrt_test_support::ssh::settings() {
        Ok(vars) => {
            let toml = format!(
                "host = \"{}\"\nport = {}\nuser = \"{}\"\nkey = \"{}\"\n",
                vars["ENVRT_TEST_SSH_HOST"],
                vars["ENVRT_TEST_SSH_PORT"],
                vars["ENVRT_TEST_SSH_USER"],
                vars["ENVRT_TEST_SSH_KEY"]
            );
            Some((vars, toml))
        }
        Err(e) => {
            envrt_test_support::Component::Ssh.skip_or_fail(
                format_args!("ENVRT_REQUIRE_SSH=1 but no test sshd ({e})"),
                format_args!("\n*** SKIPPED: no test sshd ({e}); set ENVRT_REQUIRE_SSH=1 to make this a failure ***\n"),
            );
            None
        }
    }
}

#[test]
fn exec_runs_in_a_remote_workspace_and_doctor_checks_the_host() {
    let Some((vars, config)) = server_config() else { return };
    let s = Site::new();
    let empty_known = s.path().join("empty_known_hosts");
    std::fs::write(&empty_known, "").unwrap();
    std::fs::write(
        s.path().join("envrt.toml"),
        format!(
            "[[environment]]\nid = \"remote\"\ndriver = \"ssh\"\n[environment.config]\n{config}known_hosts = \"{}\"\n\n\
             [[environment]]\nid = \"unknown-key\"\ndriver = \"ssh\"\n[environment.config]\n{config}known_hosts = \"{}\"\n",
            vars["ENVRT_TEST_SSH_KNOWN_HOSTS"],
            empty_known.display()
        ),
    )
    .unwrap();
    let out = s.run(&["exec", "--env-id", "remote", "--", "sh", "-c", "echo hi; pwd"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let text = out.stdout_text();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("hi"));
    let workspace = lines.next().unwrap().to_owned();
    assert!(
        workspace.starts_with(&format!("/home/{}/.envrt/leases/lease-", vars["ENVRT_TEST_SSH_USER"]))
            && workspace.ends_with("/work"),
        "{workspace}"
    );
    assert!(
        !std::path::Path::new(&workspace).exists(),
        "the lease's workspace is gone after exec"
    );

    let doctor = s.run(&["doctor"]);
    let shown = doctor.stdout_text();
    let destination = format!(
        "{}@{}:{}",
        vars["ENVRT_TEST_SSH_USER"], vars["ENVRT_TEST_SSH_HOST"], vars["ENVRT_TEST_SSH_PORT"]
    );
    assert!(
        shown.contains(&format!(
            "ok      ssh host: remote: {destination} reachable, host key verified, login works"
        )),
        "{shown}"
    );
    assert!(
        shown.contains(&format!(
            "MISSING ssh host: unknown-key: Cannot connect to SSH host {destination}: the host key is not in the known-hosts file."
        )),
        "{shown}"
    );
    assert_eq!(doctor.code, Some(1), "a required check failed");
}

/// `envrt gc` cleans a remote host: the workspace of a lease whose record is lost is
/// removed (found by the ssh driver's inventory of the configured host), an active lease's
/// workspace stays.
#[test]
fn gc_removes_the_remote_workspace_of_a_lost_lease() {
    let Some((vars, config)) = server_config() else { return };
    let s = Site::new();
    std::fs::write(
        s.path().join("envrt.toml"),
        format!(
            "[[environment]]\nid = \"remote\"\ndriver = \"ssh\"\n[environment.config]\n{config}known_hosts = \"{}\"\n",
            vars["ENVRT_TEST_SSH_KNOWN_HOSTS"]
        ),
    )
    .unwrap();
    let acquire = || {
        let out = s.run(&["lease", "acquire", "--detached", "--json", "--env-id", "remote"]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let (lost, kept) = (acquire(), acquire());
    let workspace = |l: &serde_json::Value| std::path::PathBuf::from(l["metadata"]["workspace"].as_str().unwrap());
    assert!(workspace(&lost).is_dir() && workspace(&kept).is_dir());
    let db = rusqlite::Connection::open(s.state().join("leases.db")).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    assert_eq!(
        db.execute("DELETE FROM leases WHERE id = ?1", [lost["id"].as_str().unwrap()])
            .unwrap(),
        1
    );
    drop(db);
    let gc = s.run(&["gc"]);
    assert_eq!(gc.code, Some(0), "{}", gc.stderr);
    assert!(
        gc.stdout_text().contains(lost["id"].as_str().unwrap()),
        "{}",
        gc.stdout_text()
    );
    assert!(
        !workspace(&lost).exists(),
        "the lost lease's remote workspace is removed"
    );
    assert!(workspace(&kept).is_dir(), "an active lease's remote workspace stays");
    let out = s.run(&["lease", "release", kept["id"].as_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!workspace(&kept).exists());
}
