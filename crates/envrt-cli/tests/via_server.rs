//! `envrt --server URL` (and `ENVRT_SERVER`) against a real `envrt serve` on a state
//! directory of its own, from a client with another (empty) state directory: leases,
//! exec, process sessions and cp act through the service and print what they print
//! locally; the client's own store is never touched; the service's refusals keep their
//! exact texts and what does not work through a service is refused with its own.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStderr, Stdio};
use std::time::Duration;

use common::{Outcome, Site};

/// A service on a unix socket, stopped with SIGTERM when dropped.
struct Served {
    /// The service's state directory, kept for as long as it runs.
    _site: Site,
    child: Child,
    _stderr: std::thread::JoinHandle<()>,
    url: String,
    token: String,
}

impl Served {
    fn start() -> Served {
        let site = Site::new();
        let out = site.run(&["token", "create", "--tenant", "acme"]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let token = out.stdout_text().lines().last().unwrap().to_owned();
        let socket = site.path().join("serve.sock");
        let mut child = site
            .command(&["serve", "--socket", socket.to_str().unwrap()])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let mut stderr: BufReader<ChildStderr> = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        assert_eq!(line, format!("envrt serve: listening on unix:{}\n", socket.display()));
        // Audit lines keep coming on stderr: read them so the pipe never fills.
        let drain = std::thread::spawn(move || {
            let mut rest = String::new();
            while stderr.read_line(&mut rest).is_ok_and(|n| n > 0) {}
        });
        Served {
            url: format!("unix:{}", socket.display()),
            _site: site,
            child,
            _stderr: drain,
            token,
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        common::wait_bounded(&mut self.child, Duration::from_secs(60));
    }
}

/// `envrt --server URL ARGS` from `client`'s state directory with `token`.
fn through(client: &Site, served: &Served, args: &[&str], stdin: Option<&[u8]>) -> Outcome {
    let mut all = vec!["--server", served.url.as_str()];
    all.extend_from_slice(args);
    let mut command = client.command(&all);
    command.env("ENVRT_TOKEN", &served.token);
    common::run_command(command, stdin)
}

fn ok(out: &Outcome) -> String {
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    out.stdout_text()
}

#[test]
fn leases_and_exec_go_through_the_service_and_not_the_clients_store() {
    let served = Served::start();
    let client = Site::new();
    let id = ok(&through(&client, &served, &["lease", "acquire"], None))
        .trim()
        .to_owned();
    let listed = ok(&through(&client, &served, &["lease", "list"], None));
    let row: Vec<&str> = listed.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..4], [id.as_str(), "local", "local", "active"], "{listed}");
    let out = through(
        &client,
        &served,
        &[
            "exec",
            "--lease",
            &id,
            "-e",
            "X=x",
            "--",
            "sh",
            "-c",
            "printf \"$X:\"; cat; echo err >&2; exit 3",
        ],
        Some(b"in"),
    );
    assert_eq!(
        (out.code, out.stdout_text(), out.stderr.as_str()),
        (Some(3), "x:in".into(), "err\n")
    );
    let json = ok(&through(
        &client,
        &served,
        &["exec", "--json", "-n", "--lease", &id, "--", "echo", "j"],
        None,
    ));
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        (doc["exitCode"].clone(), doc["stdout"].clone()),
        (0.into(), "j\n".into())
    );
    // An exec without --lease holds an ephemeral lease of its own and releases it.
    let own = through(&client, &served, &["exec", "-n", "--", "echo", "own"], None);
    assert_eq!((ok(&own), own.stderr.as_str()), ("own\n".to_owned(), ""));
    let every: Vec<serde_json::Value> = serde_json::from_str(&ok(&through(
        &client,
        &served,
        &["lease", "list", "--all", "--json"],
        None,
    )))
    .unwrap();
    assert_eq!(every.len(), 2);
    assert!(
        every
            .iter()
            .any(|l| l["id"] != id.as_str() && l["status"] == "released")
    );
    assert_eq!(
        ok(&through(&client, &served, &["lease", "release", &id], None)),
        format!("{id} released\n")
    );
    assert_eq!(
        ok(&through(&client, &served, &["lease", "destroy", &id], None)),
        format!("{id} released (destroyed)\n")
    );
    // The client's own state directory holds no store at all.
    assert!(!client.state().join("leases.db").exists());
    // ENVRT_SERVER does what --server does.
    let mut command = client.command(&["lease", "list", "--all", "--json"]);
    command
        .env("ENVRT_SERVER", &served.url)
        .env("ENVRT_TOKEN", &served.token);
    let listed: Vec<serde_json::Value> = serde_json::from_str(&ok(&common::run_command(command, None))).unwrap();
    assert_eq!(listed.len(), 2);
}

#[test]
fn processes_are_spawned_listed_read_killed_and_waited_through_the_service() {
    let served = Served::start();
    let client = Site::new();
    let spawned = through(
        &client,
        &served,
        &["spawn", "--", "sh", "-c", "echo one; echo two >&2"],
        None,
    );
    let id = ok(&spawned).trim().to_owned();
    let lease = id.rsplit_once('/').unwrap().0.to_owned();
    assert_eq!(spawned.stderr, format!("envrt: spawned on new lease {lease}\n"));
    let waited = through(&client, &served, &["wait", &id], None);
    assert_eq!(waited.code, Some(0), "{}", waited.stderr);
    let logs = through(&client, &served, &["logs", &id], None);
    assert_eq!(
        (logs.code, logs.stdout_text(), logs.stderr.as_str()),
        (Some(0), "one\n".into(), "two\n")
    );
    let from = through(
        &client,
        &served,
        &["logs", "--from", "2", "--stream", "stdout", &id],
        None,
    );
    assert_eq!(
        (from.code, from.stdout_text(), from.stderr.as_str()),
        (Some(0), "e\n".into(), "")
    );
    let sleeper = ok(&through(
        &client,
        &served,
        &["spawn", "--lease", &lease, "--", "sleep", "600"],
        None,
    ));
    let sleeper = sleeper.trim();
    assert_eq!(sleeper, format!("{lease}/2"));
    let ps = ok(&through(&client, &served, &["ps", "--lease", &lease], None));
    let rows: Vec<&str> = ps.lines().collect();
    assert!(rows[0].starts_with("PROCESS"), "{ps}");
    assert!(rows[1].starts_with(&id) && rows[1].contains("exited(0)"), "{ps}");
    assert!(rows[2].starts_with(sleeper) && rows[2].contains("running"), "{ps}");
    assert_eq!(ok(&through(&client, &served, &["ps"], None)), ps);
    let timed = through(&client, &served, &["wait", "--timeout", "10ms", sleeper], None);
    assert_eq!(timed.code, Some(124), "{}", timed.stderr);
    ok(&through(&client, &served, &["kill", "-s", "KILL", sleeper], None));
    let killed = through(&client, &served, &["wait", sleeper], None);
    assert_eq!(killed.code, Some(137), "{}", killed.stderr);
    let gone = through(&client, &served, &["kill", &format!("{lease}/9")], None);
    assert_eq!(
        (gone.code, gone.stderr.as_str()),
        (Some(2), format!("Process \"{lease}/9\" was not found.\n").as_str())
    );
    let malformed = through(&client, &served, &["wait", "garbage"], None);
    assert_eq!(
        (malformed.code, malformed.stderr.as_str()),
        (Some(2), "Process \"garbage\" was not found.\n")
    );
    ok(&through(&client, &served, &["lease", "release", &lease], None));
}

fn write_tree(root: &Path) {
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("a.txt"), "alpha").unwrap();
    std::fs::write(root.join("sub/b.bin"), [0u8, 1, 2, 255]).unwrap();
}

#[test]
fn cp_moves_directories_in_and_trees_and_files_out_through_the_service() {
    let served = Served::start();
    let client = Site::new();
    let id = ok(&through(&client, &served, &["lease", "acquire"], None))
        .trim()
        .to_owned();
    let tree = client.path().join("tree");
    write_tree(&tree);
    let into = format!("lease:{id}:data");
    let copied = through(&client, &served, &["cp", tree.to_str().unwrap(), &into], None);
    assert_eq!(
        copied.stderr,
        format!("copied 2 files, 9 bytes: {} → {into}\n", tree.display())
    );
    let cat = through(
        &client,
        &served,
        &["exec", "-n", "--lease", &id, "--", "cat", "data/a.txt"],
        None,
    );
    assert_eq!(ok(&cat), "alpha");
    // Into an existing directory: the copy lands under its name there.
    ok(&through(
        &client,
        &served,
        &["cp", "-q", tree.to_str().unwrap(), &into],
        None,
    ));
    let cat = through(
        &client,
        &served,
        &["exec", "-n", "--lease", &id, "--", "cat", "data/tree/a.txt"],
        None,
    );
    assert_eq!(ok(&cat), "alpha");
    // ... and again it exists: refused, nothing replaced without --replace.
    let again = through(&client, &served, &["cp", tree.to_str().unwrap(), &into], None);
    assert_eq!(
        (again.code, again.stderr.as_str()),
        (
            Some(2),
            "envrt: \"data/tree\" exists in the lease, and a copy through a service replaces a directory whole; pass --replace to replace it\n"
        )
    );
    let out = client.path().join("out");
    ok(&through(
        &client,
        &served,
        &["cp", "-q", &into, out.to_str().unwrap()],
        None,
    ));
    assert_eq!(std::fs::read_to_string(out.join("a.txt")).unwrap(), "alpha");
    assert_eq!(std::fs::read(out.join("sub/b.bin")).unwrap(), [0u8, 1, 2, 255]);
    assert_eq!(std::fs::read_to_string(out.join("tree/a.txt")).unwrap(), "alpha");
    // Into the existing host directory: under its name there, once.
    ok(&through(
        &client,
        &served,
        &["cp", "-q", &into, out.to_str().unwrap()],
        None,
    ));
    assert_eq!(std::fs::read_to_string(out.join("data/a.txt")).unwrap(), "alpha");
    let merged = through(&client, &served, &["cp", &into, out.to_str().unwrap()], None);
    assert_eq!(
        (merged.code, merged.stderr),
        (
            Some(2),
            format!(
                "envrt: \"{}\" exists on the host, and a copy through a service does not merge into it; pass --replace to replace it\n",
                out.join("data").display()
            )
        )
    );
    let one = client.path().join("one.txt");
    let file = through(
        &client,
        &served,
        &["cp", &format!("{into}/a.txt"), one.to_str().unwrap()],
        None,
    );
    assert_eq!(
        file.stderr,
        format!("copied 1 file, 5 bytes: {into}/a.txt → {}\n", one.display())
    );
    assert_eq!(std::fs::read_to_string(&one).unwrap(), "alpha");
    let single = through(&client, &served, &["cp", one.to_str().unwrap(), &into], None);
    assert_eq!(
        (single.code, single.stderr.as_str()),
        (
            Some(2),
            "envrt: \"cp of a single file into a lease\" does not work through a service (--server or ENVRT_SERVER); run it where the service runs\n"
        )
    );
    ok(&through(&client, &served, &["lease", "release", &id], None));
}

#[test]
fn attach_through_the_service_writes_stdin_detaches_and_ends_with_the_process() {
    let served = Served::start();
    let client = Site::new();
    let id = ok(&through(&client, &served, &["spawn", "--stdin", "--", "cat"], None))
        .trim()
        .to_owned();
    // The detach key ends the attachment; what came before it reached the process.
    let first = through(&client, &served, &["attach", "--from", "0", &id], Some(b"hello\n\x1d"));
    assert_eq!(
        (first.code, first.stderr.as_str()),
        (
            Some(0),
            format!("envrt: detached from {id}; it keeps running\n").as_str()
        )
    );
    let ps = ok(&through(&client, &served, &["ps"], None));
    assert!(
        ps.lines().any(|row| row.starts_with(&id) && row.contains("running")),
        "{ps}"
    );
    // The end of stdin closes the process's stdin: cat ends, attach ends with its code,
    // and --from 0 replays everything it wrote.
    let second = through(&client, &served, &["attach", "--from", "0", &id], Some(b"bye\n"));
    assert_eq!(
        (second.code, second.stdout_text(), second.stderr.as_str()),
        (Some(0), "hello\nbye\n".into(), "")
    );
    let unknown = through(&client, &served, &["attach", "nope/1"], None);
    assert_eq!(
        (unknown.code, unknown.stderr.as_str()),
        (Some(2), "Process \"nope/1\" was not found.\n")
    );
}

#[test]
fn refusals_through_a_service_have_exact_texts() {
    let served = Served::start();
    let client = Site::new();
    for (args, what) in [
        (&["shell"][..], "shell"),
        (&["gc"][..], "gc"),
        (&["caps"][..], "caps"),
        (&["doctor"][..], "doctor"),
        (&["template", "list"][..], "template"),
        (&["token", "list"][..], "token"),
        (&["lease", "show", "x"][..], "lease show"),
        (&["expose", "x", "80"][..], "expose"),
        (&["lease", "pause", "x"][..], "lease pause"),
        (&["lease", "unpause", "x"][..], "lease unpause"),
        (&["lease", "fork", "x"][..], "lease fork"),
        (&["lease", "keep-alive", "x"][..], "lease keep-alive"),
        (&["lease", "acquire", "--idle-timeout", "5m"][..], "--idle-timeout"),
        (
            &["lease", "acquire", "--scope", "s"][..],
            "lease acquire --scope/--label",
        ),
        (
            &["lease", "release", "--scope", "s"][..],
            "lease release --scope/--label",
        ),
        (&["lease", "acquire", "--driver", "local"][..], "--driver"),
        (
            &["lease", "acquire", "--holder-pid", "1"][..],
            "lease acquire --holder-pid",
        ),
        (&["cp", "--exclude", "x", "a", "lease:x:/b"][..], "cp --exclude"),
    ] {
        let out = through(&client, &served, args, None);
        assert_eq!(
            (out.code, out.stderr),
            (
                Some(2),
                format!(
                    "envrt: \"{what}\" does not work through a service (--server or ENVRT_SERVER); run it where the service runs\n"
                )
            ),
            "{args:?}"
        );
    }
    let unknown = through(&client, &served, &["exec", "-n", "--lease", "nope", "--", "true"], None);
    assert_eq!(
        (unknown.code, unknown.stderr.as_str()),
        (Some(2), "Lease \"nope\" was not found.\n")
    );
    let nowhere = through(&client, &served, &["lease", "acquire", "--env-id", "nowhere"], None);
    assert_eq!(
        (nowhere.code, nowhere.stderr.as_str()),
        (Some(2), "Environment \"nowhere\" was not found.\n")
    );
    // A bad token, no token, a bad URL, a service that is not there.
    let mut bad = client.command(&["--server", &served.url, "lease", "list"]);
    bad.env("ENVRT_TOKEN", "envrt_nope_nope");
    let bad = common::run_command(bad, None);
    assert_eq!(
        (bad.code, bad.stderr.as_str()),
        (Some(2), "A valid bearer token is required.\n")
    );
    let none = common::run_command(client.command(&["--server", &served.url, "lease", "list"]), None);
    assert_eq!(
        (none.code, none.stderr.as_str()),
        (
            Some(2),
            "envrt: --server needs a token: set ENVRT_TOKEN (envrt token create prints one)\n"
        )
    );
    for (url, text) in [
        (
            "ftp://x",
            "envrt: \"ftp://x\" is not a service URL: give unix:PATH, an absolute socket path or http://HOST:PORT\n",
        ),
        (
            "https://x:1",
            "envrt: the CLI reaches a service over its unix socket or plain http:// on loopback, not \"https://x:1\"\n",
        ),
    ] {
        let mut command = client.command(&["--server", url, "lease", "list"]);
        command.env("ENVRT_TOKEN", "t");
        let out = common::run_command(command, None);
        assert_eq!((out.code, out.stderr.as_str()), (Some(2), text), "{url}");
    }
    let missing = client.path().join("none.sock");
    let mut command = client.command(&["--server", &format!("unix:{}", missing.display()), "lease", "list"]);
    command.env("ENVRT_TOKEN", "t");
    let out = common::run_command(command, None);
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.starts_with(&format!(
            "envrt: cannot reach the service at unix:{}: ",
            missing.display()
        )),
        "{}",
        out.stderr
    );
    // None of the refused calls made a lease.
    let every = ok(&through(&client, &served, &["lease", "list", "--all", "--json"], None));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&every).unwrap(),
        serde_json::json!([])
    );
}
