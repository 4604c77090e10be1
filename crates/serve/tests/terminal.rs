//! A process's terminal over WebSocket (`GET .../processes/{n}/terminal`) on the local
//! driver's real supervisor: input, output from an offset, resize, the exit as the last
//! message; a detach that leaves the process running and a reattach from offset 0; every
//! refusal before the upgrade with its exact status and body, and a bad message after it.

mod common;

use common::{Harness, error, process_path};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

type Socket = tokio_tungstenite::WebSocketStream<tokio::net::UnixStream>;

async fn websocket(h: &Harness, token: &str, path: &str) -> Result<Socket, tokio_tungstenite::tungstenite::Error> {
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

/// Reads binary output into `seen` until it contains `needle`.
async fn read_until(socket: &mut Socket, seen: &mut Vec<u8>, needle: &str) {
    while !String::from_utf8_lossy(seen).contains(needle) {
        match socket.next().await.expect("the socket ended").unwrap() {
            Message::Binary(data) => seen.extend_from_slice(&data),
            other => panic!(
                "unexpected {other:?} before {needle:?}; so far {:?}",
                String::from_utf8_lossy(seen)
            ),
        }
    }
}

/// The next text message, as JSON (binary output before it is skipped).
async fn next_text(socket: &mut Socket) -> Value {
    loop {
        match socket.next().await.expect("the socket ended").unwrap() {
            Message::Text(text) => return serde_json::from_str(&text).unwrap(),
            Message::Binary(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Releases `lease`, which ends its supervisor (nothing is left behind).
async fn release(h: &Harness, token: &str, lease: &str) {
    let answer = h
        .call("POST", &format!("/v1/leases/{lease}/release"), token, json!({}))
        .await;
    assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
}

async fn tty_process(h: &Harness, token: &str, lease: &str, script: &str) -> String {
    let answer = h
        .call(
            "POST",
            &format!("/v1/leases/{lease}/processes"),
            token,
            json!({ "argv": ["sh", "-c", script], "tty": { "rows": 24, "cols": 80 } }),
        )
        .await;
    assert_eq!(answer.status, 201, "{}", String::from_utf8_lossy(&answer.body));
    answer.json()["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_carries_input_output_and_resize_and_ends_with_the_exit() {
    let h = Harness::start().await;
    let (_, token) = h.token("acme", &[]).await;
    let lease = h.acquire(&token, "local").await;
    let id = tty_process(
        &h,
        &token,
        &lease,
        "stty size; read a; echo got:$a; read b; stty size; exit 3",
    )
    .await;
    let mut socket = websocket(&h, &token, &process_path(&id, "/terminal?from=0"))
        .await
        .unwrap();
    let mut seen = Vec::new();
    read_until(&mut socket, &mut seen, "24 80").await;
    socket.send(Message::Binary(b"hi\n".to_vec().into())).await.unwrap();
    read_until(&mut socket, &mut seen, "got:hi").await;
    let resize = json!({ "type": "resize", "rows": 30, "cols": 100 }).to_string();
    socket.send(Message::Text(resize.into())).await.unwrap();
    socket.send(Message::Binary(b"go\n".to_vec().into())).await.unwrap();
    read_until(&mut socket, &mut seen, "30 100").await;
    let exit = next_text(&mut socket).await;
    assert_eq!(exit["type"], "exit");
    assert_eq!(exit["process"]["id"], id.as_str());
    assert_eq!(exit["process"]["status"], json!({ "state": "exited", "code": 3 }));
    assert!(matches!(socket.next().await, Some(Ok(Message::Close(_))) | None));
    release(&h, &token, &lease).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_terminal_leaves_the_process_running_and_a_reattach_reads_from_zero() {
    let h = Harness::start().await;
    let (_, token) = h.token("acme", &[]).await;
    let lease = h.acquire(&token, "local").await;
    let id = tty_process(&h, &token, &lease, "echo first; read a; echo second:$a").await;
    let mut socket = websocket(&h, &token, &process_path(&id, "/terminal")).await.unwrap();
    let mut seen = Vec::new();
    read_until(&mut socket, &mut seen, "first").await;
    drop(socket);
    let shown = h.call("GET", &process_path(&id, ""), &token, Value::Null).await.json();
    assert_eq!(shown["status"], json!({ "state": "running" }));
    let mut again = websocket(&h, &token, &process_path(&id, "/terminal?from=0"))
        .await
        .unwrap();
    let mut replay = Vec::new();
    read_until(&mut again, &mut replay, "first").await;
    again.send(Message::Binary(b"x\n".to_vec().into())).await.unwrap();
    read_until(&mut again, &mut replay, "second:x").await;
    assert_eq!(
        next_text(&mut again).await["process"]["status"],
        json!({ "state": "exited", "code": 0 })
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_refusals_have_exact_statuses_and_bodies() {
    let h = Harness::start().await;
    let (_, token) = h.token("acme", &[]).await;
    let lease = h.acquire(&token, "local").await;
    let plain = h
        .call(
            "POST",
            &format!("/v1/leases/{lease}/processes"),
            &token,
            json!({ "argv": ["sleep", "600"] }),
        )
        .await
        .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let refused = |result: Result<Socket, tokio_tungstenite::tungstenite::Error>| {
        let Err(tokio_tungstenite::tungstenite::Error::Http(response)) = result else {
            panic!("the upgrade was not refused");
        };
        let body: Value = serde_json::from_slice(response.body().as_deref().unwrap()).unwrap();
        (response.status().as_u16(), body)
    };
    assert_eq!(
        refused(websocket(&h, &token, &process_path(&plain, "/terminal")).await),
        (
            409,
            error(
                "process_no_tty",
                &format!("Process \"{plain}\" has no terminal to attach to.")
            )
        )
    );
    assert_eq!(
        refused(websocket(&h, &token, &format!("/v1/leases/{lease}/processes/9/terminal")).await),
        (
            404,
            error("process_not_found", &format!("Process \"{lease}/9\" was not found."))
        )
    );
    let (read_id, read_only) = h.token("acme", &["processes:read"]).await;
    assert_eq!(
        refused(websocket(&h, &read_only, &process_path(&plain, "/terminal")).await),
        (
            403,
            error(
                "forbidden",
                &format!("Token \"{read_id}\" does not allow the operation \"processes:write\".")
            )
        )
    );
    let (_, other) = h.token("other", &[]).await;
    assert_eq!(
        refused(websocket(&h, &other, &process_path(&plain, "/terminal")).await),
        (
            404,
            error("process_not_found", &format!("Process \"{plain}\" was not found."))
        )
    );
    let tty = tty_process(&h, &token, &lease, "echo ready; sleep 600").await;
    assert_eq!(
        refused(websocket(&h, &token, &process_path(&tty, "/terminal?from=999")).await).0,
        400
    );
    let plain_get = h
        .call("GET", &process_path(&tty, "/terminal"), &token, Value::Null)
        .await;
    assert_eq!(
        (plain_get.status, plain_get.json()),
        (400, error("invalid_request", "This route needs a WebSocket upgrade."))
    );
    // After the upgrade: a text message that is not a resize ends the session with its text.
    let mut socket = websocket(&h, &token, &process_path(&tty, "/terminal")).await.unwrap();
    socket.send(Message::Text("{\"type\":\"dance\"}".into())).await.unwrap();
    assert_eq!(
        next_text(&mut socket).await,
        json!({
            "type": "error",
            "kind": "invalid_request",
            "message": envrt_serve::NOT_A_TERMINAL_MESSAGE,
        })
    );
    assert_eq!(
        envrt_serve::NOT_A_TERMINAL_MESSAGE,
        "A terminal message is binary input or {\"type\":\"resize\",\"rows\":R,\"cols\":C}."
    );
    for id in [&plain, &tty] {
        h.call(
            "POST",
            &process_path(id, "/signal"),
            &token,
            json!({ "signal": "KILL" }),
        )
        .await;
    }
    h.stop().await;
}
