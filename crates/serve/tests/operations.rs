//! The facade's operations through the service on the local driver: execute buffered and
//! streamed, sync in and out as tar, duplex over WebSocket, the request-size and
//! per-tenant lease limits with their exact bodies, and leases and templates that
//! outlive a restart of the service.

mod common;

use common::{Harness, error};
use envrt_serve::Limits;
use futures::{SinkExt as _, StreamExt as _};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_answers_a_result_and_streams_output_then_the_result() {
    let h = Harness::start().await;
    let (_, token) = h.token("acme", &[]).await;
    let lease = h.acquire(&token, "local").await;
    let body = json!({ "command": "sh", "args": ["-c", "printf out; printf err >&2; exit 3"], "env": { "K": "v" } });
    let answer = h
        .call("POST", &format!("/v1/leases/{lease}/execute"), &token, body.clone())
        .await;
    assert_eq!(answer.status, 200);
    let result = answer.json();
    assert_eq!(
        (result["exitCode"].clone(), result["stdout"].clone()),
        (json!(3), json!("out"))
    );
    assert_eq!(result["stderr"], "err");
    let answer = h
        .call("POST", &format!("/v1/leases/{lease}/execute/stream"), &token, body)
        .await;
    assert_eq!(answer.status, 200);
    let lines: Vec<serde_json::Value> = String::from_utf8(answer.body.to_vec())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (last, chunks) = lines.split_last().unwrap();
    assert_eq!(last["result"]["exitCode"], 3);
    use base64::Engine as _;
    let decode = |s: &str| {
        chunks
            .iter()
            .filter(|c| c["stream"] == s)
            .flat_map(|c| {
                base64::engine::general_purpose::STANDARD
                    .decode(c["data"].as_str().unwrap())
                    .unwrap()
            })
            .collect::<Vec<u8>>()
    };
    assert_eq!((decode("stdout"), decode("stderr")), (b"out".to_vec(), b"err".to_vec()));
    let bad = h
        .call(
            "POST",
            &format!("/v1/leases/{lease}/execute"),
            &token,
            json!({ "args": [] }),
        )
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        bad.json(),
        error(
            "invalid_request",
            "Invalid JSON body: missing field `command` at line 1 column 11"
        )
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tar_synced_in_comes_back_out_with_its_content_and_modes() {
    let h = Harness::start().await;
    let (_, token) = h.token("acme", &[]).await;
    let lease = h.acquire(&token, "local").await;
    let mut builder = tar::Builder::new(Vec::new());
    for (name, data, mode) in [
        ("a.txt", &b"alpha"[..], 0o644),
        ("sub/run.sh", &b"#!/bin/sh\n"[..], 0o755),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_cksum();
        builder.append_data(&mut header, name, data).unwrap();
    }
    let archive = builder.into_inner().unwrap();
    let auth = format!("Bearer {token}");
    let put = h
        .send(
            "PUT",
            &format!("/v1/leases/{lease}/files?path=in"),
            Some(&auth),
            archive,
        )
        .await;
    assert_eq!(put.status, 200, "{}", String::from_utf8_lossy(&put.body));
    assert_eq!(put.json()["operations"][0]["filesTransferred"], 2);
    let run = h
        .call(
            "POST",
            &format!("/v1/leases/{lease}/execute"),
            &token,
            json!({ "command": "sh", "args": ["-c", "cat in/a.txt; test -x in/sub/run.sh && echo x"] }),
        )
        .await;
    assert_eq!(run.json()["stdout"], "alphax\n");
    let got = h
        .send("GET", &format!("/v1/leases/{lease}/files?path=in"), Some(&auth), "")
        .await;
    assert_eq!(got.status, 200);
    let mut entries = std::collections::BTreeMap::new();
    for entry in tar::Archive::new(&got.body[..]).entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().display().to_string();
        let mode = entry.header().mode().unwrap() & 0o777;
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
        entries.insert(name, (data, mode));
    }
    assert_eq!(entries["a.txt"], (b"alpha".to_vec(), 0o644));
    assert_eq!(entries["sub/run.sh"], (b"#!/bin/sh\n".to_vec(), 0o755));
    let file = h
        .send(
            "GET",
            &format!("/v1/leases/{lease}/files?path=in/a.txt&kind=file"),
            Some(&auth),
            "",
        )
        .await;
    let names: Vec<String> = tar::Archive::new(&file.body[..])
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert_eq!(names, ["./", "a.txt"]);
    let outside = h
        .send("GET", &format!("/v1/leases/{lease}/files?path=../x"), Some(&auth), "")
        .await;
    assert_eq!(
        (outside.status, outside.json()),
        (
            400,
            error(
                "path_outside_workspace",
                "Path \"../x\" is outside the lease workspace."
            )
        )
    );
    h.stop().await;
}

async fn websocket(
    h: &Harness,
    token: &str,
    path: &str,
) -> Result<tokio_tungstenite::WebSocketStream<tokio::net::UnixStream>, tokio_tungstenite::tungstenite::Error> {
    let stream = tokio::net::UnixStream::connect(&h.socket).await.unwrap();
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(format!("ws://serve{path}"))
            .unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    tokio_tungstenite::client_async(request, stream)
        .await
        .map(|(socket, _)| socket)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplex_over_websocket_carries_stdin_output_and_the_exit() {
    let h = Harness::start().await;
    let (_, token) = h.token("acme", &[]).await;
    // The probe driver's channel echoes its input, as cat would.
    let lease = h.acquire(&token, "probe").await;
    let mut socket = websocket(&h, &token, &format!("/v1/leases/{lease}/duplex?command=cat"))
        .await
        .unwrap();
    socket.send(Message::Binary(b"ping\n".to_vec().into())).await.unwrap();
    let mut output = Vec::new();
    while output.len() < 5 {
        match socket.next().await.unwrap().unwrap() {
            Message::Binary(data) => output.extend_from_slice(&data),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(output, b"ping\n");
    socket
        .send(Message::Text(json!({ "type": "closeInput" }).to_string().into()))
        .await
        .unwrap();
    let exit = match socket.next().await.unwrap().unwrap() {
        Message::Text(text) => serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(exit, json!({ "type": "exit", "exitCode": 0, "transportClosed": false }));
    assert_eq!(h.probe.calls("open_duplex_channel"), 1);
    // A driver without duplex refuses before the upgrade, with the contract's text.
    let local = h.acquire(&token, "local").await;
    let refused = websocket(&h, &token, &format!("/v1/leases/{local}/duplex?command=cat")).await;
    let Err(tokio_tungstenite::tungstenite::Error::Http(response)) = refused else {
        panic!("the upgrade was not refused");
    };
    let body: serde_json::Value = serde_json::from_slice(response.body().as_deref().unwrap()).unwrap();
    assert_eq!(
        (response.status().as_u16(), body),
        (
            409,
            error(
                "duplex_unsupported",
                "Environment driver \"local\" does not support duplex channels."
            )
        )
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_the_limit_and_a_lease_past_the_tenant_limit_are_refused_with_their_text() {
    let limits = Limits {
        max_json_bytes: 64,
        max_upload_bytes: 100,
        max_live_leases: 1,
        ..Limits::default()
    };
    let h = Harness::start_with(limits).await;
    let (_, token) = h.token("acme", &[]).await;
    let lease = h.acquire(&token, "probe").await;
    let big = json!({ "environmentId": "x".repeat(100) });
    let answer = h.call("POST", "/v1/leases", &token, big).await;
    assert_eq!(
        (answer.status, answer.json()),
        (
            413,
            error("body_too_large", "The request body is larger than 64 bytes.")
        )
    );
    let auth = format!("Bearer {token}");
    let upload = h
        .send(
            "PUT",
            &format!("/v1/leases/{lease}/files?path=x"),
            Some(&auth),
            vec![0u8; 512],
        )
        .await;
    assert_eq!(
        (upload.status, upload.json()),
        (
            413,
            error("body_too_large", "The request body is larger than 100 bytes.")
        )
    );
    let calls = h.probe.calls("acquire_lease");
    let answer = h
        .call("POST", "/v1/leases", &token, json!({ "environmentId": "probe" }))
        .await;
    assert_eq!(
        (answer.status, answer.json()),
        (
            429,
            error(
                "lease_limit",
                "Tenant \"acme\" already holds 1 active leases, the most it may."
            )
        )
    );
    assert_eq!(h.probe.calls("acquire_lease"), calls);
    // Another tenant has its own count.
    let (_, other) = h.token("globex", &[]).await;
    h.acquire(&other, "probe").await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_templates_outlive_a_restart_of_the_service() {
    let h = Harness::start().await;
    let (_, token) = h.token("acme", &[]).await;
    let lease = h.acquire(&token, "local").await;
    let write = json!({ "command": "sh", "args": ["-c", "echo kept > f"] });
    assert_eq!(
        h.call("POST", &format!("/v1/leases/{lease}/execute"), &token, write)
            .await
            .status,
        200
    );
    let captured = h
        .call(
            "POST",
            &format!("/v1/leases/{lease}/templates"),
            &token,
            json!({ "label": "l" }),
        )
        .await;
    let template = captured.json()["id"].as_str().unwrap().to_owned();
    let dir = h.stop().await;
    let h = Harness::start_in(dir, Limits::default()).await;
    let shown = h
        .call("GET", &format!("/v1/leases/{lease}"), &token, serde_json::Value::Null)
        .await;
    assert_eq!((shown.status, shown.json()["status"].clone()), (200, json!("active")));
    let read = json!({ "command": "cat", "args": ["f"] });
    let run = h
        .call("POST", &format!("/v1/leases/{lease}/execute"), &token, read)
        .await;
    assert_eq!(run.json()["stdout"], "kept\n");
    let templates = h
        .call(
            "GET",
            "/v1/environments/local/templates",
            &token,
            serde_json::Value::Null,
        )
        .await;
    assert_eq!(templates.json()[0]["id"], template.as_str());
    let released = h
        .call("POST", &format!("/v1/leases/{lease}/release"), &token, json!({}))
        .await;
    assert_eq!(released.json()["status"], "released");
    h.stop().await;
}
