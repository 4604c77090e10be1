//! Every refusal text of the agent, each pinned exactly, through the real binary: unknown and
//! exited processes, terminals, offsets, bounds, bad requests and hostile frames.

mod common;

use std::time::Duration;

use common::{bounded, cmd, collect, refused, sh, start};
use envrt_agent::client::Client;
use envrt_agent::proto::{Offsets, Op, StdinMode, TtySize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

#[tokio::test]
async fn every_operation_on_an_unknown_process_is_refused() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let text = "no process 999 in this agent";
        assert_eq!(refused(client.info(999).await), text);
        assert_eq!(refused(client.write_stdin(999, b"x").await), text);
        assert_eq!(refused(client.close_stdin(999).await), text);
        assert_eq!(refused(client.signal(999, "TERM").await), text);
        assert_eq!(refused(client.resize(999, 1, 1).await), text);
        assert_eq!(refused(client.wait(999, None).await), text);
        assert_eq!(refused(collect(&client, 999, Offsets::default()).await.1), text);
    })
    .await;
}

#[tokio::test]
async fn stdin_signal_and_resize_of_an_exited_process_are_refused() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let mut request = cmd(&["true"]);
        request.stdin = StdinMode::Piped;
        let piped = client.spawn(request).await.unwrap();
        client.wait(piped.id, None).await.unwrap();
        let id = piped.id;
        assert_eq!(
            refused(client.write_stdin(id, b"x").await),
            format!("process {id} has exited: cannot write to its stdin")
        );
        assert_eq!(
            refused(client.close_stdin(id).await),
            format!("process {id} has exited: cannot close its stdin")
        );
        assert_eq!(
            refused(client.signal(id, "KILL").await),
            format!("process {id} has exited: cannot signal it")
        );
        let mut request = cmd(&["true"]);
        request.tty = Some(TtySize { rows: 5, cols: 5 });
        let tty = client.spawn(request).await.unwrap();
        client.wait(tty.id, None).await.unwrap();
        assert_eq!(
            refused(client.resize(tty.id, 9, 9).await),
            format!("process {} has exited: cannot resize its terminal", tty.id)
        );
    })
    .await;
}

#[tokio::test]
async fn stdin_terminal_stream_and_signal_misuse_on_a_running_process_is_refused() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let null = client.spawn(cmd(&["sleep", "100"])).await.unwrap();
        let id = null.id;
        assert_eq!(
            refused(client.write_stdin(id, b"x").await),
            format!("process {id} was not started with piped stdin")
        );
        assert_eq!(
            refused(client.resize(id, 2, 2).await),
            format!("process {id} has no terminal to resize")
        );
        assert_eq!(
            refused(client.signal(id, "SIGNOPE").await),
            "unknown signal \"SIGNOPE\""
        );
        assert_eq!(refused(client.signal(id, "64").await), "unknown signal \"64\"");
        let tty_offset = Offsets {
            tty: Some(0),
            ..Offsets::default()
        };
        assert_eq!(
            refused(collect(&client, id, tty_offset).await.1),
            format!("process {id} has no tty stream (it has stdout and stderr)")
        );
        let bad = Op::WriteStdin {
            process: id,
            data: "!!".to_owned(),
        };
        assert_eq!(refused(client.request(bad).await), "stdin data is not valid base64");
        let mut request = cmd(&["sleep", "100"]);
        request.stdin = StdinMode::Piped;
        let sleeper = client.spawn(request).await.unwrap();
        client.close_stdin(sleeper.id).await.unwrap();
        assert_eq!(
            refused(client.close_stdin(sleeper.id).await),
            format!("process {}'s stdin is already closed", sleeper.id)
        );
        assert_eq!(
            refused(client.write_stdin(sleeper.id, b"x").await),
            format!("process {}'s stdin is already closed", sleeper.id)
        );
        let mut request = cmd(&["sleep", "100"]);
        request.tty = Some(TtySize { rows: 3, cols: 3 });
        let tty = client.spawn(request).await.unwrap();
        let stdout_offset = Offsets {
            stdout: Some(0),
            ..Offsets::default()
        };
        assert_eq!(
            refused(collect(&client, tty.id, stdout_offset).await.1),
            format!("process {} has no stdout stream (it has tty)", tty.id)
        );
        assert_eq!(
            refused(client.resize(tty.id, 0, 3).await),
            "a terminal must be at least 1 row by 1 column"
        );
    })
    .await;
}

#[tokio::test]
async fn bad_spawn_requests_are_refused() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        assert_eq!(refused(client.spawn(cmd(&[])).await), "argv is empty");
        assert_eq!(refused(client.spawn(cmd(&["a\0b"])).await), "argv contains a NUL byte");
        let mut request = cmd(&["true"]);
        request.env.insert("A=B".to_owned(), "x".to_owned());
        assert_eq!(
            refused(client.spawn(request).await),
            "environment variable name \"A=B\" is empty or holds '=' or a NUL byte"
        );
        let mut request = cmd(&["true"]);
        request.env.insert("A".to_owned(), "x\0y".to_owned());
        assert_eq!(
            refused(client.spawn(request).await),
            "the value of A contains a NUL byte"
        );
        let mut request = cmd(&["true"]);
        request.cwd = Some("/nonexistent-dir".to_owned());
        assert_eq!(
            refused(client.spawn(request).await),
            "cwd \"/nonexistent-dir\" is not a directory"
        );
        let mut request = cmd(&["true"]);
        request.keep = Some(0);
        assert_eq!(
            refused(client.spawn(request).await),
            "keep of 0 bytes is outside the bound of 1 to 1073741824 bytes"
        );
        let mut request = cmd(&["true"]);
        request.idempotency_key = Some("k".repeat(257));
        assert_eq!(
            refused(client.spawn(request).await),
            "idempotency key of 257 bytes is outside the bound of 1 to 256 bytes"
        );
        let mut request = cmd(&["true"]);
        request.tty = Some(TtySize { rows: 0, cols: 80 });
        assert_eq!(
            refused(client.spawn(request).await),
            "a terminal must be at least 1 row by 1 column"
        );
        let mut request = cmd(&["true"]);
        request.tty = Some(TtySize { rows: 1, cols: 1 });
        request.stdin = StdinMode::Piped;
        assert_eq!(
            refused(client.spawn(request).await),
            "a process with a terminal reads its terminal: stdin must not be piped"
        );
        assert_eq!(
            refused(client.spawn(cmd(&["/nonexistent/program"])).await),
            "cannot start \"/nonexistent/program\": No such file or directory (os error 2)"
        );
        let argv: Vec<String> = (0..4097).map(|_| "x".to_owned()).collect();
        let request = envrt_agent::proto::SpawnRequest {
            argv,
            ..Default::default()
        };
        assert_eq!(
            refused(client.spawn(request).await),
            "argv has 4097 entries, more than the bound of 4096"
        );
        assert!(
            client.list().await.unwrap().is_empty(),
            "no refused request left a process"
        );
        // Hostile but well-formed: the largest timeouts do not break the agent.
        let mut request = cmd(&["sleep", "100"]);
        request.timeout_ms = Some(u64::MAX);
        let info = client.spawn(request).await.unwrap();
        let wait = Op::Wait {
            process: info.id,
            timeout_ms: Some(u64::MAX),
        };
        let waiting = client.request(wait);
        let killed = async {
            client.signal(info.id, "KILL").await.unwrap();
        };
        let (status, ()) = tokio::join!(waiting, killed);
        assert_eq!(
            status.unwrap(),
            envrt_agent::proto::Reply::Status(envrt_agent::proto::Status::Signalled { signal: 9 })
        );
    })
    .await;
}

#[tokio::test]
async fn the_agents_bounds_on_processes_and_buffer_bytes_are_enforced() {
    bounded(30, async {
        let agent = start(&["--max-processes", "1", "--max-buffer-bytes", "100"]).await;
        let client = agent.client().await;
        let mut request = sh("exit 0");
        request.keep = Some(60);
        assert_eq!(
            refused(client.spawn(request).await),
            "the process would reserve 120 bytes of replay buffers, but 0 of the agent's bound of 100 bytes are reserved"
        );
        // A running process reserves its whole keep per stream (an ended one only what it
        // holds: see the table's tests).
        let mut request = sh("exec sleep 30");
        request.keep = Some(50);
        client.spawn(request.clone()).await.unwrap();
        assert_eq!(refused(client.spawn(request).await), "the agent already holds 1 processes, its bound");
        let info = client.agent().await.unwrap();
        assert_eq!((info.processes, info.buffer_reserved, info.buffer_bound), (1, 100, 100));
    })
    .await;
}

async fn raw(agent: &common::AgentProc) -> UnixStream {
    UnixStream::connect(&agent.socket).await.unwrap()
}

async fn send_json(stream: &mut UnixStream, json: &str) {
    let mut frame = ((json.len() + 1) as u32).to_be_bytes().to_vec();
    frame.push(b'J');
    frame.extend_from_slice(json.as_bytes());
    stream.write_all(&frame).await.unwrap();
}

/// Reads one JSON response frame, or `None` once the agent closed the connection.
async fn recv_json(stream: &mut UnixStream) -> Option<serde_json::Value> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await.ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).await.unwrap();
    assert_eq!(body[0], b'J');
    Some(serde_json::from_slice(&body[1..]).unwrap())
}

fn err(value: &serde_json::Value) -> &str {
    value["result"]["Err"]
        .as_str()
        .unwrap_or_else(|| panic!("not a refusal: {value}"))
}

#[tokio::test]
async fn hostile_frames_are_refused_with_their_texts() {
    bounded(30, async {
        let agent = start(&[]).await;
        // Another version: refused, then the connection closes.
        let mut stream = raw(&agent).await;
        send_json(&mut stream, r#"{"id":1,"op":{"hello":{"version":2}}}"#).await;
        let reply = recv_json(&mut stream).await.unwrap();
        assert_eq!(err(&reply), "protocol version 2 is not supported: this agent speaks version 1");
        assert!(recv_json(&mut stream).await.is_none());
        // Anything before hello.
        let mut stream = raw(&agent).await;
        send_json(&mut stream, r#"{"id":1,"op":"list"}"#).await;
        assert_eq!(err(&recv_json(&mut stream).await.unwrap()), "the first request on a connection must be hello");
        assert!(recv_json(&mut stream).await.is_none());
        // Malformed JSON, a second hello, a duplicate id in flight.
        let mut stream = raw(&agent).await;
        send_json(&mut stream, r#"{"id":1,"op":{"hello":{"version":1}}}"#).await;
        assert_eq!(recv_json(&mut stream).await.unwrap()["result"]["Ok"]["hello"]["version"], 1);
        send_json(&mut stream, r#"{"id":2,"op":"nope"}"#).await;
        let reply = recv_json(&mut stream).await.unwrap();
        assert_eq!(reply["id"], 0);
        assert_eq!(
            err(&reply),
            "malformed request: unknown variant `nope`, expected one of `hello`, `spawn`, `list`, `info`, `output`, `write_stdin`, `close_stdin`, `signal`, `resize`, `wait`, `agent`, `connect` at line 1 column 19"
        );
        send_json(&mut stream, r#"{"id":3,"op":{"hello":{"version":1}}}"#).await;
        assert_eq!(err(&recv_json(&mut stream).await.unwrap()), "hello was already sent on this connection");
        send_json(&mut stream, r#"{"id":4,"op":{"spawn":{"argv":["sleep","100"]}}}"#).await;
        let process = recv_json(&mut stream).await.unwrap()["result"]["Ok"]["process"]["id"].as_u64().unwrap();
        let wait = format!(r#"{{"id":5,"op":{{"wait":{{"process":{process}}}}}}}"#);
        send_json(&mut stream, &wait).await;
        send_json(&mut stream, &wait).await;
        assert_eq!(err(&recv_json(&mut stream).await.unwrap()), "request id 5 is already in flight on this connection");
        // A frame over the bound: refused, then the connection closes.
        stream.write_all(&((1024 * 1024 + 1) as u32).to_be_bytes()).await.unwrap();
        let reply = recv_json(&mut stream).await.unwrap();
        assert_eq!(err(&reply), "frame of 1048577 bytes is outside the bound of 1 to 1048576 bytes");
        assert!(recv_json(&mut stream).await.is_none());
        // A data frame from a client.
        let mut stream = raw(&agent).await;
        stream.write_all(&[0, 0, 0, 1, b'D']).await.unwrap();
        assert_eq!(err(&recv_json(&mut stream).await.unwrap()), "data frame of 1 bytes is shorter than its header");
        // The agent is still serving.
        let client = Client::connect(&agent.socket).await.unwrap();
        assert_eq!(client.list().await.unwrap().len(), 1);
        let _ = client.wait(process, Some(Duration::from_millis(1))).await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn the_socket_is_0600_in_a_0700_directory() {
    use std::os::unix::fs::PermissionsExt;
    let agent = start(&[]).await;
    let mode = |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&agent.socket), 0o600);
    assert_eq!(mode(agent.socket.parent().unwrap()), 0o700);
}
