//! Process sessions through the service on the local driver's real supervisor
//! (`envrt-agent` built in this target directory): spawn, list, show, output from
//! per-stream offsets (live, binary-safe, then the exit), stdin, signal, resize and wait;
//! every refusal with its exact text and kind; the per-tenant limit on running processes;
//! a process that outlives a restart of the service; and a stop that ends live output
//! streams instead of waiting for them.

mod common;

use std::time::Duration;

use common::{Harness, error, ndjson, process_path, read_lines_until, stream_bytes};
use envrt_serve::Limits;
use serde_json::{Value, json};

/// A local lease whose driver grants process sessions (the supervisor binary is built).
async fn process_lease(h: &Harness, token: &str) -> String {
    let lease = h.acquire(token, "local").await;
    let caps = h
        .call("GET", &format!("/v1/leases/{lease}/capabilities"), token, Value::Null)
        .await
        .json();
    assert_eq!(
        caps["persistentProcessSessions"], true,
        "no process sessions on local: build the supervisor (cargo build -p envrt-agent): {caps}"
    );
    lease
}

/// Spawns `body` on `lease`; answers the process.
async fn spawn(h: &Harness, token: &str, lease: &str, body: Value) -> Value {
    let answer = h
        .call("POST", &format!("/v1/leases/{lease}/processes"), token, body)
        .await;
    assert_eq!(answer.status, 201, "{}", String::from_utf8_lossy(&answer.body));
    answer.json()
}

async fn release(h: &Harness, token: &str, lease: &str) {
    let answer = h
        .call("POST", &format!("/v1/leases/{lease}/release"), token, json!({}))
        .await;
    assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_is_spawned_fed_read_live_and_from_offsets_then_waited() {
    let h = Harness::start().await;
    let (token_id, token) = h.token("acme", &[]).await;
    let lease = process_lease(&h, &token).await;
    let info = spawn(
        &h,
        &token,
        &lease,
        json!({ "argv": ["sh", "-c", "cat; printf done >&2"], "stdin": "piped", "env": { "K": "secret-v" } }),
    )
    .await;
    let id = info["id"].as_str().unwrap().to_owned();
    assert_eq!(id, format!("{lease}/1"));
    assert_eq!(info["status"], json!({ "state": "running" }));
    assert_eq!(info["argv"], json!(["sh", "-c", "cat; printf done >&2"]));
    let listed = h
        .call("GET", &format!("/v1/leases/{lease}/processes"), &token, Value::Null)
        .await;
    assert_eq!(listed.json()[0]["id"], id.as_str());
    let shown = h.call("GET", &process_path(&id, ""), &token, Value::Null).await;
    assert_eq!((shown.status, shown.json()["pid"].clone()), (200, info["pid"].clone()));
    // A reader attached before any output sees it arrive, then the exit.
    let response = h
        .open("GET", &process_path(&id, "/output"), &token, String::new())
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let mut live = response.into_body();
    let binary: &[u8] = b"\x00\xff\xfebinary\n";
    let auth = format!("Bearer {token}");
    let fed = h.send("POST", &process_path(&id, "/stdin"), Some(&auth), binary).await;
    assert_eq!(fed.status, 204, "{}", String::from_utf8_lossy(&fed.body));
    let seen = read_lines_until(&mut live, |l| l["stream"] == "stdout").await;
    assert_eq!(stream_bytes(&seen, "stdout", 0), binary);
    let closed = h
        .call("POST", &process_path(&id, "/stdin/close"), &token, Value::Null)
        .await;
    assert_eq!(closed.status, 204);
    let rest = read_lines_until(&mut live, |l| l.get("exit").is_some()).await;
    let exit = &rest.last().unwrap()["exit"];
    assert_eq!(exit["id"], id.as_str());
    assert_eq!(exit["status"], json!({ "state": "exited", "code": 0 }));
    assert_eq!(stream_bytes(&rest, "stderr", 0), b"done");
    let waited = h.call("GET", &process_path(&id, "/wait"), &token, Value::Null).await;
    assert_eq!(waited.json(), json!({ "state": "exited", "code": 0 }));
    // The whole output again from 0, and from the middle of each stream.
    let again = ndjson(
        &h.call("GET", &process_path(&id, "/output"), &token, Value::Null)
            .await
            .body,
    );
    assert_eq!(stream_bytes(&again, "stdout", 0), binary);
    let middle = h
        .call(
            "GET",
            &process_path(&id, "/output?stdout=3&stderr=2"),
            &token,
            Value::Null,
        )
        .await;
    let middle = ndjson(&middle.body);
    assert_eq!(stream_bytes(&middle, "stdout", 3), &binary[3..]);
    assert_eq!(stream_bytes(&middle, "stderr", 2), b"ne");
    assert!(middle.last().unwrap().get("exit").is_some());
    // One audit line per mutating call, naming the process, never the environment.
    let audit = h.audit.lock().unwrap().clone();
    let calls: Vec<(&str, &str)> = audit
        .iter()
        .filter(|l| l.get("process").is_some())
        .map(|l| (l["audit"].as_str().unwrap(), l["process"].as_str().unwrap()))
        .collect();
    assert_eq!(
        calls,
        [
            ("process.spawn", id.as_str()),
            ("process.stdin", id.as_str()),
            ("process.stdin.close", id.as_str())
        ]
    );
    assert!(audit.iter().all(|l| l["who"] == token_id.as_str()));
    assert!(!format!("{audit:?}").contains("secret-v"), "{audit:?}");
    release(&h, &token, &lease).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_process_refusal_has_its_exact_text_kind_and_status() {
    let h = Harness::start().await;
    let (_, token) = h.token("acme", &[]).await;
    let lease = process_lease(&h, &token).await;
    let spawn_path = format!("/v1/leases/{lease}/processes");
    let empty = h.call("POST", &spawn_path, &token, json!({ "argv": [] })).await;
    assert_eq!(
        (empty.status, empty.json()),
        (
            400,
            error("process_spawn_refused", "Cannot spawn the process: argv is empty")
        )
    );
    let unknown_field = h
        .call("POST", &spawn_path, &token, json!({ "argv": ["true"], "timeout": 1 }))
        .await;
    assert_eq!(unknown_field.status, 400);
    assert_eq!(unknown_field.json()["kind"], "invalid_request");
    let exited = spawn(&h, &token, &lease, json!({ "argv": ["printf", "abc"] })).await;
    let exited = exited["id"].as_str().unwrap().to_owned();
    let status = h
        .call(
            "GET",
            &process_path(&exited, "/wait?timeoutMs=30000"),
            &token,
            Value::Null,
        )
        .await;
    assert_eq!(status.json(), json!({ "state": "exited", "code": 0 }));
    let sleeper = spawn(
        &h,
        &token,
        &lease,
        json!({ "argv": ["sleep", "300"], "idempotencyKey": "k" }),
    )
    .await;
    let sleeper = sleeper["id"].as_str().unwrap().to_owned();
    let cases: Vec<(&str, String, Value, u16, Value)> = vec![
        (
            "POST",
            process_path(&exited, "/stdin"),
            json!("x"),
            409,
            error(
                "process_exited",
                &format!("Process \"{exited}\" has exited: cannot write to its stdin."),
            ),
        ),
        (
            "POST",
            process_path(&exited, "/stdin/close"),
            Value::Null,
            409,
            error(
                "process_exited",
                &format!("Process \"{exited}\" has exited: cannot close its stdin."),
            ),
        ),
        (
            "POST",
            process_path(&exited, "/signal"),
            json!({}),
            409,
            error(
                "process_exited",
                &format!("Process \"{exited}\" has exited: cannot signal it."),
            ),
        ),
        (
            "POST",
            process_path(&exited, "/resize"),
            json!({ "rows": 10, "cols": 40 }),
            409,
            error(
                "process_no_tty",
                &format!("Process \"{exited}\" has no terminal to resize."),
            ),
        ),
        (
            "GET",
            process_path(&exited, "/output?stdout=4"),
            Value::Null,
            400,
            error(
                "process_offset_past_end",
                &format!("Offset 4 of process \"{exited}\"'s stdout is past its end: 3 bytes written so far."),
            ),
        ),
        (
            "GET",
            process_path(&exited, "/output?tty=1"),
            Value::Null,
            400,
            error("process_no_stream", &format!("Process \"{exited}\" has no tty stream.")),
        ),
        (
            "GET",
            process_path(&exited, "/output?stdout=x"),
            Value::Null,
            400,
            error(
                "invalid_request",
                "Invalid query: Failed to deserialize query string: stdout: invalid digit found in string",
            ),
        ),
        (
            "POST",
            process_path(&sleeper, "/stdin"),
            json!("x"),
            409,
            error(
                "process_stdin_not_piped",
                &format!("Process \"{sleeper}\" was not started with piped stdin."),
            ),
        ),
        (
            "POST",
            process_path(&sleeper, "/signal"),
            json!({ "signal": "NOPE" }),
            400,
            error("process_unknown_signal", "Unknown signal \"NOPE\"."),
        ),
        (
            "POST",
            spawn_path.clone(),
            json!({ "argv": ["sleep", "301"], "idempotencyKey": "k" }),
            409,
            error(
                "process_idempotency_conflict",
                &format!("Idempotency key \"k\" was already used for process \"{sleeper}\" with a different request."),
            ),
        ),
        (
            "GET",
            format!("/v1/leases/{lease}/processes/99"),
            Value::Null,
            404,
            error("process_not_found", &format!("Process \"{lease}/99\" was not found.")),
        ),
        (
            "GET",
            format!("/v1/leases/{lease}/processes/x1/wait"),
            Value::Null,
            404,
            error("process_not_found", &format!("Process \"{lease}/x1\" was not found.")),
        ),
    ];
    for (method, path, body, status, expected) in cases {
        let answer = h.call(method, &path, &token, body).await;
        assert_eq!((answer.status, answer.json()), (status, expected), "{method} {path}");
    }
    // The sleeper still runs: a wait that times out says so; KILL ends it as signalled(9).
    let waited = h
        .call(
            "GET",
            &process_path(&sleeper, "/wait?timeoutMs=50"),
            &token,
            Value::Null,
        )
        .await;
    assert_eq!(waited.json(), json!({ "state": "running" }));
    let killed = h
        .call(
            "POST",
            &process_path(&sleeper, "/signal"),
            &token,
            json!({ "signal": "KILL" }),
        )
        .await;
    assert_eq!(killed.status, 200, "{}", String::from_utf8_lossy(&killed.body));
    assert_eq!(killed.json()["id"], sleeper.as_str());
    let waited = h
        .call("GET", &process_path(&sleeper, "/wait"), &token, Value::Null)
        .await;
    assert_eq!(waited.json(), json!({ "state": "signalled", "signal": 9 }));
    // A driver without process sessions refuses before it is asked.
    let probe = h.acquire(&token, "probe").await;
    let before = h.probe.operation_calls();
    let refused = h
        .call(
            "POST",
            &format!("/v1/leases/{probe}/processes"),
            &token,
            json!({ "argv": ["true"] }),
        )
        .await;
    assert_eq!(
        (refused.status, refused.json()),
        (
            409,
            error(
                "process_sessions_unsupported",
                "Environment driver \"probe\" does not support persistent process sessions."
            )
        )
    );
    assert_eq!(h.probe.operation_calls(), before);
    release(&h, &token, &lease).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_is_resized_and_a_tenant_past_its_process_limit_is_refused() {
    let limits = Limits {
        max_live_processes: 1,
        ..Limits::default()
    };
    let h = Harness::start_with(limits).await;
    let (_, token) = h.token("acme", &[]).await;
    let lease = process_lease(&h, &token).await;
    let tty = spawn(
        &h,
        &token,
        &lease,
        json!({ "argv": ["sh", "-c", "read x; stty size"], "tty": { "rows": 24, "cols": 80 } }),
    )
    .await;
    let id = tty["id"].as_str().unwrap().to_owned();
    assert_eq!(tty["tty"], true);
    let resized = h
        .call(
            "POST",
            &process_path(&id, "/resize"),
            &token,
            json!({ "rows": 30, "cols": 100 }),
        )
        .await;
    assert_eq!(resized.status, 204, "{}", String::from_utf8_lossy(&resized.body));
    let other = h.acquire(&token, "local").await;
    let refused = h
        .call(
            "POST",
            &format!("/v1/leases/{other}/processes"),
            &token,
            json!({ "argv": ["true"] }),
        )
        .await;
    assert_eq!(
        (refused.status, refused.json()),
        (
            429,
            error(
                "process_limit",
                "Tenant \"acme\" already has 1 running processes, the most it may."
            )
        )
    );
    // Another tenant has its own count.
    let (_, globex) = h.token("globex", &[]).await;
    let theirs = process_lease(&h, &globex).await;
    spawn(&h, &globex, &theirs, json!({ "argv": ["true"] })).await;
    let auth = format!("Bearer {token}");
    let fed = h.send("POST", &process_path(&id, "/stdin"), Some(&auth), "go\n").await;
    assert_eq!(fed.status, 204, "{}", String::from_utf8_lossy(&fed.body));
    let output = h.call("GET", &process_path(&id, "/output"), &token, Value::Null).await;
    let lines = ndjson(&output.body);
    let text = String::from_utf8(stream_bytes(&lines, "tty", 0)).unwrap();
    assert!(text.contains("30 100"), "{text:?}");
    // Once it ended, the tenant may spawn again.
    spawn(&h, &token, &other, json!({ "argv": ["true"] })).await;
    for (t, l) in [(&token, &lease), (&token, &other), (&globex, &theirs)] {
        release(&h, t, l).await;
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_outlives_a_restart_and_a_stop_ends_live_output_at_once() {
    let mut h = Harness::start().await;
    let (_, token) = h.token("acme", &[]).await;
    let lease = process_lease(&h, &token).await;
    let info = spawn(
        &h,
        &token,
        &lease,
        json!({ "argv": ["sh", "-c", "echo before; read x; echo after"], "stdin": "piped" }),
    )
    .await;
    let id = info["id"].as_str().unwrap().to_owned();
    let response = h
        .open("GET", &process_path(&id, "/output"), &token, String::new())
        .await;
    let mut live = response.into_body();
    read_lines_until(&mut live, |l| l["stream"] == "stdout").await;
    // The stop ends the live stream with its last line, and the service drains at once.
    let started = std::time::Instant::now();
    h.signal_stop();
    let rest = read_lines_until(&mut live, |l| l.get("error").is_some()).await;
    assert_eq!(
        rest.last().unwrap()["error"],
        error(
            "service_stopping",
            "The service is stopping: read on from the next offsets once it is back."
        )
    );
    assert!(h.stopped().await, "the live stream held the drain");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let dir = std::mem::replace(&mut h.dir, tempfile::tempdir().unwrap());
    drop(h);
    let h = Harness::start_in(dir, Limits::default()).await;
    let shown = h.call("GET", &process_path(&id, ""), &token, Value::Null).await;
    assert_eq!(shown.json()["status"], json!({ "state": "running" }));
    let auth = format!("Bearer {token}");
    let fed = h.send("POST", &process_path(&id, "/stdin"), Some(&auth), "go\n").await;
    assert_eq!(fed.status, 204);
    let output = h
        .call("GET", &process_path(&id, "/output?stdout=0"), &token, Value::Null)
        .await;
    let lines = ndjson(&output.body);
    assert_eq!(stream_bytes(&lines, "stdout", 0), b"before\nafter\n");
    assert_eq!(
        lines.last().unwrap()["exit"]["status"],
        json!({ "state": "exited", "code": 0 })
    );
    release(&h, &token, &lease).await;
    h.stop().await;
}
