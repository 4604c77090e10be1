//! Duplex channels over the worker protocol: frames, half-close, exit codes, stop, close.

mod common;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use common::*;
use serde_json::{Value, json};

fn open(w: &mut Worker, lease: &str, route: &str, command: Value) -> String {
    let r = w.ok(
        "duplexChannelOpen",
        json!({"hostRouteId": route, "driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1",
            "providerLeaseId": lease, "command": command}),
    );
    assert_eq!(r["hostRouteId"], route, "the open reply echoes the route: {r}");
    let session = r["workerSessionId"].as_str().unwrap().to_owned();
    assert!(session.starts_with("dws-"));
    session
}

fn pair(route: &str, session: &str) -> Value {
    json!({"hostRouteId": route, "workerSessionId": session})
}

/// Waits for the exit frame of the pair; returns it and the bytes of every data frame
/// that came before it.
fn collect_until_exit(w: &mut Worker, route: &str, session: &str) -> (Value, Vec<u8>) {
    let exit = w.wait_note(|n| {
        n["method"] == "duplexChannel.exit"
            && n["params"]["hostRouteId"] == route
            && n["params"]["workerSessionId"] == session
    });
    let mut bytes = Vec::new();
    let mut rest = Vec::new();
    for n in std::mem::take(&mut w.notes) {
        if n["method"] == "duplexChannel.data"
            && n["params"]["hostRouteId"] == route
            && n["params"]["workerSessionId"] == session
        {
            let chunk = n["params"]["chunk"].as_str().unwrap();
            let decoded = STANDARD.decode(chunk).unwrap();
            assert!(!decoded.is_empty());
            assert_eq!(STANDARD.encode(&decoded), chunk, "canonical base64");
            bytes.extend(decoded);
        } else {
            rest.push(n);
        }
    }
    w.notes = rest;
    (exit, bytes)
}

#[test]
fn cat_round_trip_with_arbitrary_bytes_then_half_close_exits_zero() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let session = open(&mut w, &lease, "duplex-route-1", json!(["cat"]));
    let p = pair("duplex-route-1", &session);
    let mut sent = Vec::new();
    for i in 0..40u32 {
        let chunk: Vec<u8> = (0..(i * 997 % 5000 + 1)).map(|j| (j * 31 + i) as u8).collect();
        let mut params = p.clone();
        params["data"] = json!(STANDARD.encode(&chunk));
        assert_eq!(w.ok("duplexChannelWrite", params), Value::Null);
        sent.extend(chunk);
    }
    // Writes sent back to back without waiting keep their order.
    let ids: Vec<u64> = (0..20u8)
        .map(|i| {
            let mut params = p.clone();
            params["data"] = json!(STANDARD.encode([i; 100]));
            sent.extend([i; 100]);
            w.send("duplexChannelWrite", params)
        })
        .collect();
    let close_input = w.send("duplexChannelCloseInput", p.clone());
    for id in ids {
        assert_eq!(w.wait_response(id)["result"], Value::Null);
    }
    assert_eq!(w.wait_response(close_input)["result"], Value::Null);
    let (exit, received) = collect_until_exit(&mut w, "duplex-route-1", &session);
    assert_eq!(received, sent);
    assert_eq!(
        exit,
        json!({"jsonrpc": "2.0", "method": "duplexChannel.exit", "paperclipInvocationId": "inv-3",
            "params": {"hostRouteId": "duplex-route-1", "workerSessionId": session, "exitCode": 0, "transportClosed": false}})
    );
    // (Frames carry the open call's invocation id, as SDK workers do.)
    // After the exit the pair still exists until closed; a write now fails cleanly.
    let mut params = p.clone();
    params["data"] = json!("aGk=");
    assert_eq!(
        w.err("duplexChannelWrite", params),
        (-32002, "Duplex channel is closed.".into())
    );
    assert_eq!(w.ok("duplexChannelClose", p.clone()), p);
    assert_eq!(w.ok("duplexChannelClose", p.clone()), p, "close is idempotent");
    assert_eq!(w.ok("health", json!({}))["details"]["openChannels"], 0);
}

#[test]
fn stderr_comes_out_of_the_channel_where_the_command_wrote_it() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let script = "echo out-1; echo err-1 >&2; echo out-2; echo err-2 >&2; echo out-3";
    let session = open(&mut w, &lease, "duplex-route-e", json!(["sh", "-c", script]));
    let (exit, bytes) = collect_until_exit(&mut w, "duplex-route-e", &session);
    assert_eq!(String::from_utf8_lossy(&bytes), "out-1\nerr-1\nout-2\nerr-2\nout-3\n");
    assert_eq!(exit["params"]["exitCode"], 0);
    // What the sandbox init says of a missing program is the channel's too.
    let session = open(&mut w, &lease, "duplex-route-f", json!(["no-such-program-abc"]));
    let (exit, bytes) = collect_until_exit(&mut w, "duplex-route-f", &session);
    assert_eq!(
        String::from_utf8_lossy(&bytes),
        "envrt: command not found: no-such-program-abc\n"
    );
    assert_eq!(exit["params"]["exitCode"], 127);
}

#[test]
fn exit_codes_come_through() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let session = open(
        &mut w,
        &lease,
        "duplex-route-7",
        json!(["sh", "-c", "printf hi; exit 7"]),
    );
    let (exit, bytes) = collect_until_exit(&mut w, "duplex-route-7", &session);
    assert_eq!(bytes, b"hi");
    assert_eq!(exit["params"]["exitCode"], 7);
    assert_eq!(exit["params"]["transportClosed"], false);
    let session = open(&mut w, &lease, "duplex-route-8", json!(["no-such-program-abc"]));
    let (exit, _) = collect_until_exit(&mut w, "duplex-route-8", &session);
    assert_eq!(exit["params"]["exitCode"], 127);
}

#[test]
fn stop_kills_the_command_and_close_silences_the_pair() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let mark = marker("duplex-stop");
    let session = open(
        &mut w,
        &lease,
        "duplex-route-1",
        json!(["sh", "-c", format!("echo up; read x; : {mark}")]),
    );
    let p = pair("duplex-route-1", &session);
    wait_for_process(&mark);
    // stopped once it has started (its first output is in), not while bwrap sets up
    while !w.notes.iter().any(|n| n["method"] == "duplexChannel.data") {
        let line = w.next_line();
        w.notes.push(line);
    }
    assert_eq!(w.ok("duplexChannelStop", p.clone()), Value::Null);
    let (exit, bytes) = collect_until_exit(&mut w, "duplex-route-1", &session);
    assert_eq!(bytes, b"up\n");
    assert_eq!(
        exit["params"]["exitCode"],
        Value::Null,
        "ended by the host: no exit code"
    );
    assert_eq!(survivors_after_wait(&mark), Vec::<u32>::new());
    assert_eq!(w.ok("duplexChannelClose", p.clone()), p);

    // Close of a live channel kills it and nothing more is sent for the pair.
    let mark = marker("duplex-close");
    let session = open(
        &mut w,
        &lease,
        "duplex-route-2",
        json!(["sh", "-c", format!("read x; : {mark}")]),
    );
    wait_for_process(&mark);
    let p = pair("duplex-route-2", &session);
    assert_eq!(w.ok("duplexChannelClose", p.clone()), p);
    assert_eq!(survivors_after_wait(&mark), Vec::<u32>::new());
    // A later call's reply comes after anything the closed pair could still have sent.
    w.ok("health", json!({}));
    assert!(
        !w.notes
            .iter()
            .any(|n| n["params"]["workerSessionId"] == session.as_str()),
        "no frame after close: {:?}",
        w.notes
    );
    // Route-only close acknowledges the route alone.
    assert_eq!(
        w.ok("duplexChannelClose", json!({"hostRouteId": "duplex-route-2"})),
        json!({"hostRouteId": "duplex-route-2"})
    );
}

#[test]
fn bad_duplex_calls_have_exact_errors() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let session = open(&mut w, &lease, "duplex-route-1", json!(["cat"]));
    let write = |route: &str, session: &str, data: Value| json!({"hostRouteId": route, "workerSessionId": session, "data": data});
    assert_eq!(
        w.err("duplexChannelWrite", write("duplex-route-1", "wrong", json!("aGk="))),
        (-32002, "No live duplex channel for pair (duplex-route-1, wrong)".into())
    );
    assert_eq!(
        w.err("duplexChannelWrite", write("duplex-route-9", &session, json!("aGk="))),
        (
            -32002,
            format!("No live duplex channel for pair (duplex-route-9, {session})")
        )
    );
    for bad in [json!("not base64!!"), json!(""), json!("aGk"), json!("aGl="), json!(5)] {
        assert_eq!(
            w.err("duplexChannelWrite", write("duplex-route-1", &session, bad)),
            (-32602, "data must be a non-empty, well-formed base64 string".into())
        );
    }
    assert_eq!(
        w.err("duplexChannelStop", pair("duplex-route-1", "wrong")),
        (-32002, "No live duplex channel for pair (duplex-route-1, wrong)".into())
    );
    let open_params = |command: Value, lease: &str| {
        json!({"hostRouteId": "duplex-route-2", "driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1",
            "providerLeaseId": lease, "command": command})
    };
    assert_eq!(
        w.err("duplexChannelOpen", open_params(json!([]), &lease)),
        (-32602, "command must be a non-empty argv list".into())
    );
    assert_eq!(
        w.err(
            "duplexChannelOpen",
            open_params(json!(["cat"]), "sbx-00000000-0000-0000-0000-000000000000")
        ),
        (
            -32002,
            "Lease resource \"sbx-00000000-0000-0000-0000-000000000000\" does not exist.".into()
        )
    );
    // The live channel is unaffected by all of that.
    let mut params = pair("duplex-route-1", &session);
    params["data"] = json!("aGk=");
    w.ok("duplexChannelWrite", params);
    w.ok("duplexChannelCloseInput", pair("duplex-route-1", &session));
    let (exit, bytes) = collect_until_exit(&mut w, "duplex-route-1", &session);
    assert_eq!((bytes, exit["params"]["exitCode"].clone()), (b"hi".to_vec(), json!(0)));
}
