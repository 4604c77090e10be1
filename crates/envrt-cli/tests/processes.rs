//! `envrt spawn`, `ps`, `logs`, `kill` and `wait` against the local driver's real
//! supervisor: each invocation is a program of its own on one state directory, so every
//! test here also proves that a process outlives the program that spawned it.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::{Site, marker, survivors};

fn spawn(site: &Site, args: &[&str]) -> String {
    let out = site.run(&[&["spawn"], args].concat());
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let text = out.stdout_text();
    let id = text.lines().last().expect("the process id").to_owned();
    assert!(
        id.rsplit_once('/').is_some_and(|(_, n)| n.parse::<u64>().is_ok()),
        "{id}"
    );
    id
}

fn lease_of(id: &str) -> &str {
    id.rsplit_once('/').unwrap().0
}

#[test]
fn spawn_returns_at_once_and_logs_ps_wait_find_the_process_later() {
    let site = Site::new();
    let id = spawn(
        &site,
        &["--", "sh", "-c", "echo one; echo two >&2; read x < /dev/null; exit 7"],
    );
    let waited = site.run(&["wait", &id]);
    assert_eq!(waited.code, Some(7), "{}", waited.stderr);
    let logs = site.run(&["logs", &id]);
    assert_eq!(logs.code, Some(0));
    assert_eq!(logs.stdout_text(), "one\n");
    assert_eq!(logs.stderr, "two\n");
    let only = site.run(&["logs", "--stream", "stderr", &id]);
    assert_eq!((only.stdout_text().as_str(), only.stderr.as_str()), ("", "two\n"));
    let from = site.run(&["logs", "--from", "2", "--stream", "stdout", &id]);
    assert_eq!(from.stdout_text(), "e\n");
    let ps = site.run(&["ps", "--lease", lease_of(&id)]);
    let text = ps.stdout_text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("PROCESS"), "{text}");
    assert!(lines[1].starts_with(&id) && lines[1].contains("exited(7)"), "{text}");
    let json: serde_json::Value = serde_json::from_slice(&site.run(&["ps", "--json"]).stdout).unwrap();
    assert_eq!(json[0]["id"], id.as_str());
    assert_eq!(json[0]["status"], serde_json::json!({"state": "exited", "code": 7}));
    assert_eq!(site.run(&["lease", "release", lease_of(&id)]).code, Some(0));
}

#[test]
fn a_running_process_is_listed_running_and_kill_ends_it_with_128_plus_n() {
    let site = Site::new();
    let nap = marker();
    let id = spawn(&site, &["--", "sleep", &nap]);
    let ps = site.run(&["ps"]);
    assert!(
        ps.stdout_text()
            .lines()
            .any(|l| l.starts_with(&id) && l.contains(" running ")),
        "{}",
        ps.stdout_text()
    );
    let killed = site.run(&["kill", "-s", "INT", &id]);
    assert_eq!(killed.code, Some(0), "{}", killed.stderr);
    assert_eq!(site.run(&["wait", &id]).code, Some(130));
    let again = site.run(&["kill", &id]);
    assert_eq!(again.code, Some(2));
    assert_eq!(
        again.stderr,
        format!("Process \"{id}\" has exited: cannot signal it.\n")
    );
    assert!(survivors(&nap).is_empty());
    site.run(&["lease", "release", lease_of(&id)]);
}

#[test]
fn logs_refuses_an_offset_no_longer_held_with_the_exact_text() {
    let site = Site::new();
    let id = spawn(&site, &["--keep", "1K", "--", "sh", "-c", "head -c 5000 /dev/zero"]);
    assert_eq!(site.run(&["wait", &id]).code, Some(0));
    let logs = site.run(&["logs", "--from", "0", &id]);
    assert_eq!(logs.code, Some(2));
    assert_eq!(
        logs.stderr,
        format!(
            "Offset 0 of process \"{id}\"'s stdout is no longer held: the first offset still held is 3976 (3976 bytes dropped).\n"
        )
    );
    let held = site.run(&["logs", &id]);
    assert_eq!(held.code, Some(0));
    assert_eq!(held.stdout, vec![0u8; 1024]);
    let bad = site.run(&["spawn", "--keep", "1X", "--", "true"]);
    assert_eq!(bad.code, Some(2));
    assert_eq!(
        bad.stderr,
        "envrt: --keep expects a size like 65536, 64K or 8M, got \"1X\"\n"
    );
    let unknown = site.run(&["logs", "nope/1"]);
    assert_eq!(unknown.code, Some(2));
    assert_eq!(unknown.stderr, "Process \"nope/1\" was not found.\n");
    site.run(&["lease", "release", lease_of(&id)]);
}

/// The spawning program and a first reader are SIGKILLed; another program still reads
/// the whole output from offset 0, then kills the process (on `env`, one of the site's
/// environments; every program is an `envrt` invocation of its own).
fn spawner_and_reader_killed_round(site: &Site, env: &str) {
    let mark = marker();
    let script = format!("i=0; while [ $i -lt 50 ]; do echo {mark}-$i; i=$((i+1)); done; exec sleep {mark}");
    let mut spawner = site.command(&["spawn", "--env-id", env, "--", "sh", "-c", &script]);
    let mut spawner = spawner.stdin(Stdio::null()).spawn().unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(spawner.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    let id = line.trim().to_owned();
    assert!(!id.is_empty(), "{env}: spawn printed no id");
    // The spawner may already be gone; SIGKILL it either way.
    let _ = spawner.kill();
    let _ = spawner.wait();
    let mut reader = site
        .command(&["logs", "--follow", &id])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(reader.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first, format!("{mark}-0\n"), "{env}");
    reader.kill().unwrap();
    reader.wait().unwrap();
    let expected: String = (0..50).map(|i| format!("{mark}-{i}\n")).collect();
    let logs = site.run(&["logs", "--from", "0", &id]);
    assert_eq!(logs.code, Some(0), "{env}: {}", logs.stderr);
    assert_eq!(logs.stdout_text(), expected, "{env}");
    // The lease's processes are this machine's (a container's, the test sshd's user's).
    assert_eq!(common::sleepers(&mark).len(), 1, "{env}: the process no longer runs");
    assert_eq!(site.run(&["kill", "-s", "KILL", &id]).code, Some(0), "{env}");
    assert_eq!(site.run(&["wait", &id]).code, Some(137), "{env}");
    let released = site.run(&["lease", "release", lease_of(&id)]);
    assert_eq!(released.code, Some(0), "{env}: {}", released.stderr);
    assert!(survivors(&mark).is_empty(), "{env}");
}

#[test]
fn after_the_spawner_and_a_reader_are_sigkilled_another_program_reads_from_zero_and_kills() {
    spawner_and_reader_killed_round(&Site::new(), "local");
}

#[test]
fn the_same_on_docker_with_the_static_supervisor() {
    let Some(image) = envrt_test_support::docker::image_or_skip() else {
        return;
    };
    let site = Site::new();
    std::fs::write(
        site.path().join("envrt.toml"),
        format!(
            "[docker]\nagent = \"{}\"\n[[environment]]\nid = \"ctr\"\ndriver = \"docker\"\n[environment.config]\nimage = \"{image}\"\n",
            envrt_test_support::docker::static_agent().display()
        ),
    )
    .unwrap();
    spawner_and_reader_killed_round(&site, "ctr");
}

#[test]
fn the_same_on_the_sandbox_whose_supervisor_outlives_its_worker() {
    let Some(worker) = envrt_test_support::sandbox::worker_beside_or_skip(common::BIN) else {
        return;
    };
    let site = Site::new();
    std::fs::write(
        site.path().join("envrt.toml"),
        format!(
            "[sandbox]\nworker = \"{}\"\n[[environment]]\nid = \"box\"\ndriver = \"sandbox\"\n",
            worker.display()
        ),
    )
    .unwrap();
    spawner_and_reader_killed_round(&site, "box");
}

#[test]
fn the_same_on_ssh_with_the_supervisor_on_the_remote_host() {
    let vars = match envrt_test_support::ssh::settings() {
        Ok(vars) => vars,
        Err(e) => {
            envrt_test_support::Component::Ssh.skip_or_fail(
                format_args!("ENVRT_REQUIRE_SSH=1 but no test sshd ({e})"),
                format_args!("SKIPPED: no test sshd ({e})"),
            );
            return;
        }
    };
    let site = Site::new();
    std::fs::write(
        site.path().join("envrt.toml"),
        format!(
            "[[environment]]\nid = \"remote\"\ndriver = \"ssh\"\n[environment.config]\nhost = \"{}\"\nport = {}\nuser = \"{}\"\nkey = \"{}\"\nknown_hosts = \"{}\"\n",
            vars["ENVRT_TEST_SSH_HOST"],
            vars["ENVRT_TEST_SSH_PORT"],
            vars["ENVRT_TEST_SSH_USER"],
            vars["ENVRT_TEST_SSH_KEY"],
            vars["ENVRT_TEST_SSH_KNOWN_HOSTS"]
        ),
    )
    .unwrap();
    spawner_and_reader_killed_round(&site, "remote");
}

/// `attach` feeds stdin to the process and prints its output; the detach key leaves it
/// running, and a later attach's end of stdin closes the process's stdin, so `cat` ends
/// and attach exits with its code.
#[test]
fn attach_feeds_stdin_detaches_on_ctrl_bracket_and_ends_with_the_process() {
    let site = Site::new();
    let id = spawn(&site, &["--stdin", "--", "cat"]);
    let first = site.run_with(&["attach", "--from", "0", &id], Some(b"hello\n\x1dignored\n"));
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    assert_eq!(first.stderr, format!("envrt: detached from {id}; it keeps running\n"));
    let ps = site.run(&["ps", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&ps.stdout).unwrap();
    assert_eq!(json[0]["status"], serde_json::json!({"state": "running"}));
    let second = site.run_with(&["attach", "--from", "0", &id], Some(b"bye\n"));
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert_eq!(second.stdout_text(), "hello\nbye\n");
    assert_eq!(site.run(&["wait", &id]).code, Some(0));
    site.run(&["lease", "release", lease_of(&id)]);
}
