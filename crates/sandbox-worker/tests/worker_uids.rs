//! Every lease's sandboxes run as a host uid of their own (a worker run as root): the uid
//! is the lease directory's owner, kept across a worker restart, given back at release;
//! a lease that fills its process limit does not hold another off; another host user
//! (`nobody`, another lease) can neither read a sandboxed command's variables nor open
//! its memory; a range that is exhausted or overlaps host users is refused exactly.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::{Value, json};

const DEFAULT_BASE: u32 = 2_100_000_000;
const DEFAULT_COUNT: u32 = 65_536;

fn running_as_root() -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        eprintln!("SKIPPED: per-lease uids need the worker to run as root (as in CI)");
    }
    root
}

fn sh(w: &mut Worker, lease: &str, script: &str) -> Value {
    w.ok(
        "environmentExecute",
        on_lease(
            lease,
            json!({"command": "sh", "args": ["-c", script], "timeoutMs": 60000}),
        ),
    )
}

fn owner(path: &Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(path).unwrap();
    (m.uid(), m.gid())
}

fn in_default_range(uid: u32) -> bool {
    (DEFAULT_BASE..DEFAULT_BASE + DEFAULT_COUNT).contains(&uid)
}

/// A range of `count` uids for this test process only (the claims are host-wide).
fn private_range(slot: u32, count: u32) -> (u32, u32) {
    (2_100_100_000 + (std::process::id() % 100_000) * 16 + slot * 4, count)
}

fn end(w: &mut Worker, method: &str, lease: &str) {
    w.ok(
        method,
        json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1",
        "config": {}, "providerLeaseId": lease}),
    );
}

#[test]
fn each_lease_is_its_own_host_user_kept_across_a_restart_and_given_back_at_release() {
    if !running_as_root() {
        return;
    }
    let mut w = Worker::ready();
    let (a, b) = (w.acquire(), w.acquire());
    let (dir_a, dir_b) = (w.root.path().join(&a), w.root.path().join(&b));
    let (ua, ub) = (owner(&dir_a), owner(&dir_b));
    assert!(in_default_range(ua.0) && in_default_range(ub.0), "{ua:?} {ub:?}");
    assert_eq!((ua.0, ub.0), (ua.1, ub.1), "gid is the uid's number");
    assert_ne!(ua, ub, "two leases, two host users");
    // Inside, the command is still 65534; what it makes is its lease's host user's.
    let r = sh(&mut w, &a, "id -u; id -g; echo one > /workspace/made; echo t > /tmp/t");
    assert_eq!(
        (&r["exitCode"], &r["stdout"]),
        (&json!(0), &json!("65534\n65534\n")),
        "{r}"
    );
    assert_eq!(owner(&dir_a.join("made")), ua);

    // A worker restarted over the same root finds the lease's uid again at resume.
    let root = w.root.path().to_string_lossy().into_owned();
    w.close_stdin();
    assert_eq!(w.wait_exit(), Some(0));
    let mut w2 = Worker::ready_with(&["--root", &root]);
    let resumed = w2.ok(
        "environmentResumeLease",
        json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1", "config": {},
            "providerLeaseId": a}),
    );
    assert_eq!(resumed["providerLeaseId"], json!(a), "{resumed}");
    assert_eq!(owner(&dir_a), ua, "same uid after the restart");
    let r = sh(&mut w2, &a, "echo two >> /workspace/made && cat /workspace/made");
    assert_eq!(r["stdout"], "one\ntwo\n", "{r}");

    // Release gives the uid back; a resume claims one and hands the files to it.
    end(&mut w2, "environmentReleaseLease", &a);
    assert_eq!(owner(&dir_a), (0, 0), "a released lease holds no uid");
    w2.ok(
        "environmentResumeLease",
        json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1", "config": {},
            "providerLeaseId": a}),
    );
    let again = owner(&dir_a);
    assert!(in_default_range(again.0) && again != ub, "{again:?}");
    assert_eq!(owner(&dir_a.join("made")), again, "files follow the lease's new uid");
    let r = sh(
        &mut w2,
        &a,
        "echo three >> /workspace/made && echo u >> /tmp/t && cat /tmp/t",
    );
    assert_eq!((&r["exitCode"], &r["stdout"]), (&json!(0), &json!("t\nu\n")), "{r}");
}

#[test]
fn an_exhausted_range_refuses_acquire_until_a_lease_ends() {
    if !running_as_root() {
        return;
    }
    let (base, count) = private_range(0, 2);
    let mut w = Worker::ready_with(&["--sandbox-uids", &format!("{base}:{count}")]);
    let (a, b) = (w.acquire(), w.acquire());
    let mut held = [owner(&w.root.path().join(&a)).0, owner(&w.root.path().join(&b)).0];
    held.sort_unstable();
    assert_eq!(held, [base, base + 1]);
    let acquire = json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1",
        "config": {}, "runId": "run-1"});
    let refused = format!("No sandbox uid is free: all 2 uids from {base} are held by leases.");
    assert_eq!(w.err("environmentAcquireLease", acquire.clone()).1, refused);
    let leftovers = std::fs::read_dir(w.root.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("sbx-"))
        .count();
    assert_eq!(leftovers, 2, "a refused acquire leaves no directory");
    // Release gives a uid back; so does destroy.
    end(&mut w, "environmentReleaseLease", &a);
    let c = w.acquire();
    assert_eq!(w.err("environmentAcquireLease", acquire.clone()).1, refused);
    end(&mut w, "environmentDestroyLease", &b);
    let d = w.acquire();
    let mut held = [owner(&w.root.path().join(&c)).0, owner(&w.root.path().join(&d)).0];
    held.sort_unstable();
    assert_eq!(held, [base, base + 1]);
    // The released lease cannot be resumed while the range is full.
    let (_, message) = w.err(
        "environmentResumeLease",
        json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1", "config": {},
            "providerLeaseId": a}),
    );
    assert_eq!(message, refused);
}

#[test]
fn one_fixed_user_for_every_lease_owns_each_new_workspace_and_can_write_it() {
    if !running_as_root() {
        return;
    }
    let mut w = Worker::ready_with(&["--sandbox-uid", "65534", "--sandbox-gid", "65534"]);
    let lease = w.acquire();
    assert_eq!(owner(&w.root.path().join(&lease)), (65534, 65534));
    let out = sh(&mut w, &lease, "echo kept > /workspace/made && cat /workspace/made");
    assert_eq!(out["exitCode"], 0, "{out}");
    assert_eq!(out["stdout"], "kept\n", "{out}");
    end(&mut w, "environmentDestroyLease", &lease);
}

/// Starts a worker with `args` that must refuse to start; its exit code and stderr.
fn refused_start(args: &[&str]) -> (Option<i32>, String) {
    let root = tempfile::tempdir().unwrap();
    let out = Command::new(WORKER)
        .arg("--root")
        .arg(root.path())
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_range_that_holds_host_users_or_reserved_uids_is_refused_at_start() {
    if !running_as_root() {
        return;
    }
    let reserved = "(0, 65534, 65535 and 4294967295 are never sandbox uids)";
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let (name, uid) = passwd
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            Some((f.first()?.to_string(), f.get(2)?.parse::<u32>().ok()?))
        })
        .find(|(_, uid)| ![0, 65534, 65535].contains(uid))
        .expect("a user besides root and nobody");
    for (value, message) in [
        ("0:10", format!("--sandbox-uids 0:10: the range holds uid 0 {reserved}")),
        (
            "65000:1000",
            format!("--sandbox-uids 65000:1000: the range holds uid 65534 {reserved}"),
        ),
        (
            &format!("{uid}:1"),
            format!("--sandbox-uids {uid}:1: the range holds uid {uid} of user \"{name}\" in /etc/passwd"),
        ),
        ("7:0", "--sandbox-uids 7:0: COUNT must be at least 1".to_owned()),
        ("seven", "--sandbox-uids: expected BASE:COUNT, got \"seven\"".to_owned()),
    ] {
        let (code, stderr) = refused_start(&["--sandbox-uids", value]);
        let prefix = if value == "seven" { "" } else { "envrt-sandbox-worker: " };
        assert_eq!((code, stderr), (Some(2), format!("{prefix}{message}\n")), "{value}");
    }
}

/// Starts, in `lease`, a command that holds processes until it cannot fork any more;
/// returns once it says so. Its call stays open (the processes live until it ends).
fn fill_process_table(w: &mut Worker, lease: &str) -> u64 {
    let id = w.send(
        "environmentExecute",
        on_lease(
            lease,
            // perl's fork gives undef when the limit is reached (a shell would exit)
            json!({"command": "perl", "args": ["-e",
                "$| = 1; my $n = 0; while (1) { my $p = fork; last unless defined $p; \
                 if ($p == 0) { sleep 1000; exit 0 } $n++ } print \"full $n\\n\"; sleep 1000"],
                "timeoutMs": 60000}),
        ),
    );
    let full = w.wait_note(|n| {
        n["method"] == "execute.log" && n["params"]["chunk"].as_str().is_some_and(|c| c.contains("full"))
    });
    let started: u32 = full["params"]["chunk"]
        .as_str()
        .unwrap()
        .trim()
        .strip_prefix("full ")
        .unwrap()
        .parse()
        .unwrap();
    assert!((40..64).contains(&started), "the host limit (64) stopped it: {full}");
    id
}

#[test]
fn a_lease_with_a_full_process_table_does_not_stop_another_lease() {
    if !running_as_root() {
        return;
    }
    // The host-side process limit of each sandbox user is the worker's RLIMIT_NPROC (64
    // here): with one user for all, one lease's processes count against every lease.
    let wrapper = ["prlimit", "--nproc=64:64", "--"];
    let (base, _) = private_range(1, 4);
    let shared = base.to_string();
    for (args, other_runs) in [
        (vec![], true),
        (
            vec!["--sandbox-uid", shared.as_str(), "--sandbox-gid", shared.as_str()],
            false,
        ),
    ] {
        let mut w = Worker::start_under(&wrapper, &args, &[]);
        assert_eq!(w.call("initialize", init_params())["result"]["ok"], json!(true));
        let (a, b) = (w.acquire(), w.acquire());
        let filling = fill_process_table(&mut w, &a);
        let r = w.call(
            "environmentExecute",
            on_lease(&b, json!({"command": "echo", "args": ["b runs"], "timeoutMs": 60000})),
        );
        let got = (&r["result"]["exitCode"], &r["result"]["stdout"], &r["result"]["stderr"]);
        if other_runs {
            assert_eq!(got, (&json!(0), &json!("b runs\n"), &json!("")), "{r}");
        } else {
            // the layout before per-lease uids (every sandbox 65534): the full lease holds
            // every other one off
            let stderr = "bwrap: Creating new namespace failed: Resource temporarily unavailable\n";
            assert_eq!(got, (&json!(1), &json!(""), &json!(stderr)), "{r}");
        }
        end(&mut w, "environmentReleaseLease", &a);
        let done = w.wait_response(filling);
        assert!(done.get("result").is_some(), "{done}");
    }
}

#[test]
fn another_host_user_cannot_read_the_variables_of_a_sandboxed_command_or_open_its_memory() {
    if !running_as_root() {
        return;
    }
    let mut w = Worker::ready();
    let (a, b) = (w.acquire(), w.acquire());
    let ub = owner(&w.root.path().join(&b)).0;
    let ua = owner(&w.root.path().join(&a)).0;
    let secret = marker("secret");
    let running = w.send(
        "environmentExecute",
        on_lease(
            &a,
            json!({"command": "sleep", "args": ["1000"], "env": {"SECRET": secret}, "timeoutMs": 60000}),
        ),
    );
    let pids = wait_for_process(&secret);
    assert_eq!(pids.len(), 1, "only the command holds the variable: {pids:?}");
    let pid = pids[0];
    let init: u32 = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap()
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let as_user = |uid: u32, file: String| {
        let out = Command::new("setpriv")
            .args([
                "--reuid",
                &uid.to_string(),
                "--regid",
                &uid.to_string(),
                "--clear-groups",
            ])
            .args(["head", "-c", "4096", &file])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).contains(&secret),
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        )
    };
    for uid in [65534, ub] {
        for file in ["environ", "mem"] {
            let path = format!("/proc/{pid}/{file}");
            assert_eq!(
                as_user(uid, path.clone()),
                (
                    false,
                    false,
                    format!("head: cannot open '{path}' for reading: Permission denied")
                ),
                "as uid {uid}"
            );
        }
    }
    // The lease's own uid reads its command's variables (the check above is not vacuous);
    // its sandbox init, which read them first, is not dumpable: not even that uid may.
    assert!(
        as_user(ua, format!("/proc/{pid}/environ")).1,
        "the lease's uid reads its own command"
    );
    for file in ["environ", "mem"] {
        let path = format!("/proc/{init}/{file}");
        assert_eq!(
            as_user(ua, path.clone()),
            (
                false,
                false,
                format!("head: cannot open '{path}' for reading: Permission denied")
            ),
        );
    }
    // What the init holds (read as root): nothing of the request, only the PWD bwrap sets.
    assert_eq!(
        std::fs::read(format!("/proc/{init}/environ")).unwrap(),
        b"PWD=/workspace\0"
    );
    end(&mut w, "environmentReleaseLease", &a);
    let done = w.wait_response(running);
    assert!(done.get("result").is_some(), "{done}");
}
