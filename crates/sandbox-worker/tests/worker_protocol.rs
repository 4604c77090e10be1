//! The worker's JSON-RPC surface: handshake, errors, concurrency, start refusal, exits.

mod common;

use std::process::{Command, Stdio};

use common::*;
use serde_json::json;

#[test]
fn handshake_advertises_every_verb_and_both_extensions() {
    // Any executable as the supervisor: the worker advertises the verbs that start it (as
    // the lease's supervisor and as its egress forwarder), and the runner ingress, which
    // reaches the lease through the supervisor.
    let mut w = Worker::start_with_env(&[("ENVRT_AGENT", "/bin/true")]);
    let r = w.call("initialize", init_params());
    assert_eq!(
        r,
        json!({"jsonrpc": "2.0", "id": 1, "result": {"ok": true, "supportedMethods": [
            "health", "shutdown", "environmentValidateConfig", "environmentProbe",
            "environmentAcquireLease", "environmentResumeLease", "environmentReleaseLease",
            "environmentDestroyLease", "environmentRealizeWorkspace", "environmentExecute",
            "environmentExecuteBinary", "environmentSyncIn", "environmentSyncOut",
            "duplexChannelOpen", "duplexChannelWrite", "duplexChannelStop", "duplexChannelClose",
            "duplexChannelCloseInput", "envrtListLeases", "environmentCaptureTemplate",
            "environmentDeleteTemplate", "environmentListTemplates", "environmentStartInteractiveSetup",
            "environmentGetInteractiveSetup", "environmentCancelInteractiveSetup",
            "envrtExecuteAsUser", "envrtCwdAnywhere", "envrtFilesAnywhere",
            "envrtStartProcessSupervisor", "envrtStartEgress",
            "environmentRunnerIngressEndpoint"]}})
    );
    assert_eq!(
        w.err("initialize", init_params()),
        (-32002, "Worker already initialized".into())
    );
    let health = w.ok("health", json!({}));
    assert_eq!(health["status"], "ok");
    assert_eq!(health["details"]["openChannels"], 0);
    assert!(health["details"]["bwrap"].as_str().unwrap().starts_with("bubblewrap"));
}

#[test]
fn protocol_errors_have_the_sdk_texts_and_do_not_break_the_worker() {
    let mut w = Worker::ready();
    assert_eq!(
        w.err("noSuchMethod", json!({})),
        (-32601, "Unknown method: noSuchMethod".into())
    );
    assert_eq!(
        w.err("validateConfig", json!({})),
        (-32004, "validateConfig is not implemented by this plugin".into())
    );
    w.send_raw("this is not json");
    assert_eq!(
        w.next_line(),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error: Invalid JSON: this is not json"}})
    );
    w.send_raw(r#"{"jsonrpc":"1.0","id":99,"method":"health","params":{}}"#);
    assert_eq!(
        w.next_line(),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700,
            "message": "Parse error: Invalid or missing jsonrpc version (expected \"2.0\", got \"1.0\")"}})
    );
    // Notifications, responses and null-id requests are ignored; blank lines too.
    w.send_raw(r#"{"jsonrpc":"2.0","method":"onEvent","params":{}}"#);
    w.send_raw(r#"{"jsonrpc":"2.0","id":7,"result":null}"#);
    w.send_raw(r#"{"jsonrpc":"2.0","id":null,"method":"health"}"#);
    w.send_raw("");
    // String ids are echoed verbatim.
    w.send_raw(r#"{"jsonrpc":"2.0","id":"abc","method":"health","params":{}}"#);
    let r = w.next_line();
    assert_eq!(r["id"], "abc");
    assert_eq!(r["result"]["status"], "ok");
    // Params of the wrong shape are -32602 with the field named.
    let (code, message) = w.err("environmentExecute", json!({"command": "true"}));
    assert_eq!(code, -32602);
    assert!(
        message.starts_with("Invalid params for environmentExecute: missing field `lease`"),
        "{message}"
    );
    // Validate and probe.
    assert_eq!(
        w.ok(
            "environmentValidateConfig",
            json!({"driverKey": "sandbox", "config": {"a": 1}})
        ),
        json!({"ok": false, "errors": ["unknown field `a`, there are no fields"]})
    );
    assert_eq!(
        w.ok(
            "environmentValidateConfig",
            json!({"driverKey": "sandbox", "config": 3})
        ),
        json!({"ok": false, "errors": ["config must be a JSON object"]})
    );
    assert_eq!(
        w.ok(
            "environmentProbe",
            json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "e", "config": {}})
        )["ok"],
        true
    );
}

#[test]
fn requests_are_served_concurrently() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    // A command blocked for good does not hold other calls back.
    let mark = marker("concurrent");
    let blocked = w.send(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sleep", "args": ["30"], "env": {"MARK": mark}, "timeoutMs": 20000}),
        ),
    );
    wait_for_process(&mark);
    // The sandbox is visible in /proc a moment before the worker has recorded its pid:
    // ask again (bounded) until health counts it; every ask must be answered meanwhile.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let h = w.send("health", json!({}));
        let reply = w.next_line();
        assert_eq!(
            reply["id"],
            json!(h),
            "health must be answered while the sleep runs: {reply}"
        );
        if reply["result"]["details"]["runningSandboxes"] == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "health never counted the running sandbox: {reply}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    w.close_stdin();
    assert_eq!(w.wait_exit(), Some(0));
    let _ = blocked;
}

#[test]
fn stdin_eof_ends_the_worker_and_every_sandboxed_process() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let mark = marker("eof");
    w.send(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sh", "args": ["-c", "sleep 60 & sleep 60 & wait", mark], "env": {"MARK": mark}}),
        ),
    );
    let r = w.call(
        "duplexChannelOpen",
        json!({"hostRouteId": "duplex-route-1", "driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1",
            "providerLeaseId": lease, "command": ["sh", "-c", format!("read x; : {mark}")]}),
    );
    assert!(r.get("result").is_some(), "{r}");
    // Two bwraps (outer + namespace init) and the sandbox init per sandbox (the mark in
    // their command lines), the shell and two sleepers of the execute, the channel's shell
    // (blocked reading its stdin).
    let before = wait_for_processes(&mark, 8);
    assert!(before.len() >= 8, "sleepers and their sandboxes: {before:?}");
    w.close_stdin();
    assert_eq!(w.wait_exit(), Some(0));
    assert_eq!(survivors_after_wait(&mark), Vec::<u32>::new());
}

#[test]
fn a_killed_worker_takes_its_sandboxes_with_it() {
    // SIGKILL leaves the worker no chance to clean up: bwrap's --die-with-parent does it.
    let mut w = Worker::ready();
    let lease = w.acquire();
    let mark = marker("sigkill");
    w.send(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sh", "args": ["-c", "sleep 60 & sleep 60", mark], "env": {"MARK": mark}}),
        ),
    );
    // the two bwraps, the sandbox init and sh carry the mark in their command lines (the
    // init no longer holds the request's variables), the two sleeps in their environment
    wait_for_processes(&mark, 6);
    w.child.kill().unwrap();
    w.child.wait().unwrap();
    assert_eq!(survivors_after_wait(&mark), Vec::<u32>::new());
}

#[test]
fn shutdown_replies_then_exits_and_kills_sandboxes() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let mark = marker("shutdown");
    w.send(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sleep", "args": ["60"], "env": {"MARK": mark}}),
        ),
    );
    wait_for_process(&mark);
    let id = w.send("shutdown", json!({}));
    assert_eq!(w.wait_response(id), json!({"jsonrpc": "2.0", "id": id, "result": null}));
    assert_eq!(w.wait_exit(), Some(0));
    assert_eq!(survivors_after_wait(&mark), Vec::<u32>::new());
}

#[test]
fn refuses_to_start_without_bwrap() {
    let root = tempfile::tempdir().unwrap();
    for (path_env, args) in [
        ("/nonexistent-dir", vec![]),
        ("/usr/bin:/bin", vec!["--bwrap", "/nonexistent/bwrap"]),
    ] {
        let out = Command::new(WORKER)
            .arg("--root")
            .arg(root.path())
            .args(&args)
            .env_clear()
            .env("PATH", path_env)
            .stdin(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(out.stdout.is_empty(), "no protocol output at all");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("install it with `apt-get install bubblewrap`"),
            "{stderr}"
        );
    }
    let stderr = String::from_utf8(
        Command::new(WORKER)
            .env_clear()
            .env("PATH", "/nonexistent-dir")
            .arg("--root")
            .arg(root.path())
            .output()
            .unwrap()
            .stderr,
    )
    .unwrap();
    assert_eq!(
        stderr,
        "envrt-sandbox-worker: bwrap was not found on PATH: bwrap (bubblewrap) is required to sandbox commands; install it with `apt-get install bubblewrap`\n"
    );
}

#[test]
fn bad_flags_are_refused() {
    let out = Command::new(WORKER).arg("--frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "unknown argument \"--frobnicate\"\nusage: envrt-sandbox-worker [--root DIR] [--bwrap PATH] [--kill-grace-ms N] [--max-output-bytes N] [--no-duplex] [--sandbox-uids BASE:COUNT] [--sandbox-uid N] [--sandbox-gid N] [--fresh-tmp] [--tmp-size BYTES] [--shm-size BYTES] [--max-processes N] [--max-memory BYTES] [--max-line-bytes N]\n"
    );
}

#[test]
fn lease_lifecycle() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    assert!(lease.starts_with("sbx-"));
    assert!(w.root.path().join(&lease).is_dir());
    let base = json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1", "config": {}});
    let with = |extra: serde_json::Value| {
        let mut p = base.clone();
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        p
    };
    // Realize: a path under /workspace is created; one outside is refused.
    let r = w.ok(
        "environmentRealizeWorkspace",
        on_lease(&lease, json!({"workspace": {"remotePath": "/workspace/proj/a"}})),
    );
    assert_eq!(
        r,
        json!({"cwd": "/workspace/proj/a", "metadata": {"remoteCwd": "/workspace/proj/a"}})
    );
    assert!(w.root.path().join(&lease).join("proj/a").is_dir());
    assert_eq!(
        w.err(
            "environmentRealizeWorkspace",
            on_lease(&lease, json!({"workspace": {"remotePath": "/tmp/x"}}))
        ),
        (-32602, "Path \"/tmp/x\" is outside the lease workspace.".into())
    );
    assert_eq!(
        w.ok(
            "environmentRealizeWorkspace",
            on_lease(&lease, json!({"workspace": {}}))
        )["cwd"],
        "/workspace"
    );
    // Resume, release (files kept, resumable), destroy (gone), all idempotent.
    let resumed = w.ok("environmentResumeLease", with(json!({"providerLeaseId": lease})));
    assert_eq!(resumed["providerLeaseId"], json!(lease));
    assert_eq!(
        w.ok("environmentReleaseLease", with(json!({"providerLeaseId": lease}))),
        json!({"providerLeaseId": lease, "state": "stopped"})
    );
    assert_eq!(
        w.ok("environmentResumeLease", with(json!({"providerLeaseId": lease})))["providerLeaseId"],
        json!(lease)
    );
    assert_eq!(
        w.ok("environmentDestroyLease", with(json!({"providerLeaseId": lease}))),
        json!({"providerLeaseId": lease, "state": "destroyed"})
    );
    assert!(!w.root.path().join(&lease).exists());
    assert_eq!(
        w.ok("environmentDestroyLease", with(json!({"providerLeaseId": lease}))),
        json!({"providerLeaseId": lease, "state": "destroyed"})
    );
    assert_eq!(
        w.ok("environmentResumeLease", with(json!({"providerLeaseId": lease}))),
        json!({"providerLeaseId": null, "metadata": {"gone": true}})
    );
    assert_eq!(
        w.ok("environmentReleaseLease", with(json!({"providerLeaseId": null}))),
        json!(null)
    );
    assert_eq!(
        w.ok("environmentReleaseLease", with(json!({"providerLeaseId": "../../etc"}))),
        json!(null)
    );
    // Lease-bound verbs on a gone lease name it.
    assert_eq!(
        w.err("environmentExecute", on_lease(&lease, json!({"command": "true"}))),
        (-32002, format!("Lease resource \"{lease}\" does not exist."))
    );
    assert_eq!(
        w.err("environmentExecute", on_lease("../x", json!({"command": "true"}))),
        (-32002, "Lease resource \"../x\" does not exist.".into())
    );
}

#[test]
fn destroy_kills_the_lease_work() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let mark = marker("destroy");
    let id = w.send(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sleep", "args": ["60"], "env": {"MARK": mark}}),
        ),
    );
    wait_for_process(&mark);
    w.ok(
        "environmentDestroyLease",
        json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1", "config": {}, "providerLeaseId": lease}),
    );
    let r = w.wait_response(id);
    assert_eq!(r["result"]["exitCode"], json!(null), "{r}");
    assert_eq!(r["result"]["signal"], "SIGKILL");
    assert_eq!(survivors_after_wait(&mark), Vec::<u32>::new());
}

#[test]
fn a_host_that_stops_reading_does_not_stop_timeouts() {
    let root = tempfile::tempdir().unwrap();
    let mut child = Command::new(WORKER)
        .arg("--root")
        .arg(root.path())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut send = |v: serde_json::Value| {
        use std::io::Write;
        stdin.write_all(format!("{v}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    };
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "environmentAcquireLease", "params": {}}));
    // The lease id is not known without reading; use a second worker-independent trick:
    // the lease directory appears under the root.
    let lease = {
        let deadline = std::time::Instant::now() + BOUND;
        loop {
            if let Some(e) = std::fs::read_dir(root.path()).unwrap().flatten().next() {
                break e.file_name().to_string_lossy().into_owned();
            }
            assert!(std::time::Instant::now() < deadline, "no lease directory");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    };
    let mark = marker("unread");
    // Far more output than the pipe and the worker's queue hold; nobody reads it.
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "environmentExecute", "paperclipInvocation": {"id": "inv-2"},
        "params": on_lease(&lease, json!({"command": "yes", "args": [mark], "env": {"MARK": mark}, "timeoutMs": 4000}))}),
    );
    wait_for_process(&mark);
    // By the deadline the worker's stdout pipe and queue are long full.
    assert_eq!(
        survivors_within(&mark, std::time::Duration::from_secs(20)),
        Vec::<u32>::new(),
        "the timeout fired although stdout is full"
    );
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
}
