//! `environmentRunnerIngressEndpoint` on the real worker, `bwrap` and supervisor: a server
//! the lease runs on its own loopback answers a WebSocket upgrade that reaches it through
//! the endpoint the worker opened on the host's loopback, with the token, never without
//! it, and never seeing it; every refusal is an exact text; release closes the endpoint
//! and its open connections; a worker without the supervisor's binary does not serve it.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::*;
use envrt_driver_agent::{AgentSpawnRequest, Client};
use serde_json::json;

const METHOD: &str = "environmentRunnerIngressEndpoint";
const PORT: u16 = 8124;

/// A server on the lease's 127.0.0.1:PORT: answers an upgrade with `101`, then sends back
/// the request head it got (one line per header, then `end`), then echoes lines.
const SERVER: &str = r#"
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16)
print("listening", flush=True)
def serve(c):
    f = c.makefile("rb")
    lines = []
    while True:
        line = f.readline()
        if line in (b"\r\n", b""): break
        lines.append(line.rstrip(b"\r\n"))
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
    c.sendall(b"".join(l + b"\n" for l in lines) + b"end\n")
    while True:
        line = f.readline()
        if not line: break
        c.sendall(line)
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

fn agent() -> PathBuf {
    let path = Path::new(WORKER).with_file_name("envrt-agent");
    assert!(
        path.is_file(),
        "{} is not built; run `cargo build -p envrt-agent`",
        path.display()
    );
    path
}

/// A worker and its lease, released on drop, so that a failing test leaves no supervisor
/// (it outlives the worker by design).
struct Leased(Worker, String);

impl Drop for Leased {
    fn drop(&mut self) {
        let release = json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1",
            "config": {}, "providerLeaseId": self.1});
        self.0.call("environmentReleaseLease", release);
    }
}

/// A worker with a lease whose supervisor runs the server; the lease id and the socket's
/// directory (kept alive by the returned temporary directory).
fn lease_with_server() -> (Leased, String, tempfile::TempDir) {
    let mut w = Worker::start_with_env(&[("ENVRT_AGENT", agent().to_str().unwrap())]);
    let r = w.call("initialize", init_params());
    assert!(
        r["result"]["supportedMethods"]
            .as_array()
            .unwrap()
            .contains(&json!(METHOD)),
        "{r}"
    );
    let lease = w.acquire();
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("sd");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let params = on_lease(&lease, json!({"socketDir": dir.to_str().unwrap()}));
    assert_eq!(w.ok("envrtStartProcessSupervisor", params), json!({"started": true}));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = Client::connect(&dir.join("sock")).await.expect("connect");
        let request = AgentSpawnRequest {
            argv: vec!["python3".into(), "-c".into(), SERVER.into(), PORT.to_string()],
            ..AgentSpawnRequest::default()
        };
        let info = client.spawn(request).await.expect("spawn");
        let mut output = client.output(info.id, Default::default()).await.expect("output");
        let mut said = Vec::new();
        while !said.ends_with(b"listening\n") {
            match tokio::time::timeout(BOUND, output.next()).await {
                Ok(Some(Ok(envrt_agent::client::Event::Chunk(chunk)))) => said.extend_from_slice(&chunk.bytes),
                other => panic!("the server ended: {other:?} after {}", String::from_utf8_lossy(&said)),
            }
        }
    });
    (Leased(w, lease.clone()), lease, parent)
}

/// Sends `head` to the endpoint at `addr` and reads the answer's head and, for a refusal,
/// its body (the endpoint closes after it).
fn ask(addr: &str, head: &str) -> (BufReader<TcpStream>, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(BOUND)).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut r = BufReader::new(s);
    let mut got = String::new();
    while !got.ends_with("\r\n\r\n") {
        assert_ne!(r.read_line(&mut got).unwrap(), 0, "closed after {got:?}");
    }
    (r, got)
}

fn refusal(addr: &str, head: &str) -> (String, String) {
    let (mut r, got) = ask(addr, head);
    let mut body = String::new();
    r.read_to_string(&mut body).unwrap();
    (got.lines().next().unwrap().to_owned(), body)
}

#[test]
fn an_upgrade_with_the_token_reaches_the_lease_port_without_the_token_and_release_closes_it() {
    let (mut leased, lease, _dir) = lease_with_server();
    let w = &mut leased.0;
    let params = on_lease(&lease, json!({"port": PORT, "path": "/runner"}));
    let answer = w.ok(METHOD, params.clone());
    assert_eq!(answer["kind"], "authenticated_websocket");
    let url = answer["websocketUrl"].as_str().unwrap().to_owned();
    let addr = url
        .strip_prefix("ws://127.0.0.1:")
        .and_then(|rest| rest.strip_suffix("/runner"))
        .map(|port| format!("127.0.0.1:{port}"))
        .unwrap_or_else(|| panic!("{url}"));
    let headers = answer["secretHeaders"].as_array().unwrap();
    assert_eq!(headers.len(), 1, "{answer}");
    assert_eq!(headers[0]["name"], "x-envrt-ingress-token");
    let token = headers[0]["value"].as_str().unwrap().to_owned();
    assert!(
        token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()),
        "{token}"
    );
    assert!(!answer["generation"].as_str().unwrap().is_empty());
    // The same lease, port and path: the same endpoint.
    assert_eq!(w.ok(METHOD, params), answer);

    let upgrade = |token: &str, path: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nx-envrt-ingress-token: {token}\r\n\r\n"
        )
    };
    let (mut r, head) = ask(&addr, &upgrade(&token, "/runner?x=1"));
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    let mut seen = String::new();
    while !seen.ends_with("end\n") {
        assert_ne!(r.read_line(&mut seen).unwrap(), 0, "{seen}");
    }
    assert!(seen.starts_with("GET /runner?x=1 HTTP/1.1\n"), "{seen}");
    assert!(seen.to_ascii_lowercase().contains("upgrade: websocket"), "{seen}");
    assert!(
        !seen.to_ascii_lowercase().contains("x-envrt-ingress-token"),
        "the lease saw the token: {seen}"
    );
    assert!(!seen.contains(&token), "the lease saw the token: {seen}");
    r.get_mut().write_all(b"ping\n").unwrap();
    let mut echo = String::new();
    r.read_line(&mut echo).unwrap();
    assert_eq!(echo, "ping\n");

    let refused = |why: &str| format!("envrt ingress: refused: {why}\n");
    assert_eq!(
        refusal(&addr, &upgrade("0".repeat(64).as_str(), "/runner")),
        ("HTTP/1.1 401 Unauthorized".into(), refused("wrong or missing token"))
    );
    let no_token = format!("GET /runner HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\n\r\n");
    assert_eq!(
        refusal(&addr, &no_token),
        ("HTTP/1.1 401 Unauthorized".into(), refused("wrong or missing token"))
    );
    assert_eq!(
        refusal(&addr, &upgrade(&token, "/other")),
        (
            "HTTP/1.1 404 Not Found".into(),
            refused("this endpoint serves only GET /runner")
        )
    );
    let plain = format!("GET /runner HTTP/1.1\r\nHost: {addr}\r\nx-envrt-ingress-token: {token}\r\n\r\n");
    assert_eq!(
        refusal(&addr, &plain),
        ("HTTP/1.1 400 Bad Request".into(), refused("not a WebSocket upgrade"))
    );
    let long = format!("GET /runner HTTP/1.1\r\nx-long: {}\r\n\r\n", "v".repeat(20 * 1024));
    assert_eq!(
        refusal(&addr, &long),
        (
            "HTTP/1.1 431 Request Header Fields Too Large".into(),
            refused("the request head is longer than 16384 bytes")
        )
    );
    // Nothing listens on another port of the lease: the endpoint says so.
    let other = w.ok(METHOD, on_lease(&lease, json!({"port": PORT + 1, "path": "/runner"})));
    assert_ne!(other["websocketUrl"], answer["websocketUrl"]);
    assert_ne!(other["generation"], answer["generation"]);
    let other_addr = other["websocketUrl"].as_str().unwrap()["ws://".len()..]
        .trim_end_matches("/runner")
        .to_owned();
    let other_token = other["secretHeaders"][0]["value"].as_str().unwrap();
    let (status, body) = refusal(&other_addr, &upgrade(other_token, "/runner"));
    assert_eq!(status, "HTTP/1.1 502 Bad Gateway");
    assert!(
        body.starts_with(&format!("envrt ingress: cannot reach port {} in the lease: ", PORT + 1)),
        "{body}"
    );

    // 64 connections at once per endpoint (a fresh one): the 65th is answered 503.
    let limit = w.ok(METHOD, on_lease(&lease, json!({"port": PORT, "path": "/limit"})));
    let limit_addr = limit["websocketUrl"].as_str().unwrap()["ws://".len()..]
        .trim_end_matches("/limit")
        .to_owned();
    let limit_token = limit["secretHeaders"][0]["value"].as_str().unwrap().to_owned();
    let held: Vec<_> = (0..64)
        .map(|_| {
            let (r, head) = ask(&limit_addr, &upgrade(&limit_token, "/limit"));
            assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
            r
        })
        .collect();
    assert_eq!(
        refusal(&limit_addr, &upgrade(&limit_token, "/limit")),
        (
            "HTTP/1.1 503 Service Unavailable".into(),
            "envrt ingress: too many connections (the limit is 64)\n".into()
        )
    );
    drop(held);
    // 16 endpoints per lease (three are open): the 17th is refused.
    for port in PORT + 2..PORT + 15 {
        w.ok(METHOD, on_lease(&lease, json!({"port": port, "path": "/runner"})));
    }
    assert_eq!(
        w.err(METHOD, on_lease(&lease, json!({"port": PORT + 16, "path": "/runner"}))),
        (
            -32602,
            format!("Lease {lease}: runner ingress refused: the lease has 16 endpoints open (the limit)")
        )
    );

    // Release: the open connection ends and the endpoint no longer listens.
    w.ok(
        "environmentReleaseLease",
        json!({"driverKey": "sandbox", "companyId": "c", "environmentId": "e", "config": {}, "providerLeaseId": lease}),
    );
    let mut rest = String::new();
    let _ = r.read_to_string(&mut rest);
    // A connection after the release is refused, or closed without an answer.
    if let Ok(mut late) = TcpStream::connect(&addr) {
        late.set_read_timeout(Some(BOUND)).unwrap();
        let _ = late.write_all(upgrade(&token, "/runner").as_bytes());
        let mut got = Vec::new();
        let _ = late.read_to_end(&mut got);
        assert!(
            got.is_empty(),
            "answered after release: {}",
            String::from_utf8_lossy(&got)
        );
    }
}

#[test]
fn bad_requests_and_a_lease_without_a_supervisor_are_refused_with_exact_texts() {
    let mut w = Worker::start_with_env(&[("ENVRT_AGENT", agent().to_str().unwrap())]);
    w.call("initialize", init_params());
    let lease = w.acquire();
    let text = |why: &str| format!("Lease {lease}: runner ingress refused: {why}");
    assert_eq!(
        w.err(METHOD, on_lease(&lease, json!({"port": 8000, "path": "/r"}))),
        (
            -32602,
            text(
                "the lease has no process supervisor to reach its port through (start it with envrtStartProcessSupervisor)"
            )
        )
    );
    // A socket directory the host names must be an absolute directory (not a link);
    // anything else is as if none was named.
    let link = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/tmp", link.path().join("l")).unwrap();
    let link = link.path().join("l");
    for named in ["/nonexistent/sd", "relative/sd", "/tmp/../tmp", link.to_str().unwrap()] {
        assert_eq!(
            w.err(
                METHOD,
                on_lease(&lease, json!({"port": 8000, "path": "/r", "envrtSocketDir": named}))
            ),
            (
                -32602,
                text(
                    "the lease has no process supervisor to reach its port through (start it with envrtStartProcessSupervisor)"
                )
            ),
            "{named}"
        );
    }
    assert_eq!(
        w.err(METHOD, on_lease(&lease, json!({"port": 0, "path": "/r"}))),
        (-32602, text("the port must be 1 to 65535, not 0"))
    );
    for path in ["r", "/a b", "/r?x=1"] {
        assert_eq!(
            w.err(METHOD, on_lease(&lease, json!({"port": 8000, "path": path}))),
            (
                -32602,
                text(&format!(
                    "the path must start with \"/\" and be at most 1024 visible ASCII characters without \"?\" or \"#\", not {path:?}"
                ))
            ),
            "{path}"
        );
    }
    // A worker that cannot start a supervisor neither advertises nor serves the verb.
    let mut w = Worker::start_with_env(&[("ENVRT_AGENT", "/nonexistent/envrt-agent")]);
    let r = w.call("initialize", init_params());
    assert!(
        !r["result"]["supportedMethods"]
            .as_array()
            .unwrap()
            .contains(&json!(METHOD)),
        "{r}"
    );
    let lease = w.acquire();
    assert_eq!(
        w.err(METHOD, on_lease(&lease, json!({"port": 8000, "path": "/r"}))),
        (-32004, format!("{METHOD} is not implemented by this plugin"))
    );
}
