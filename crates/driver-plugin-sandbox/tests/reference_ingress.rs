//! Paperclip's runner WebSocket ingress through envrt's own host (`runnerWebSocketIngress`,
//! contract section 10), on the reference worker and real `bwrap`: the facade's
//! `runner_ingress` reaches the worker's `environmentRunnerIngressEndpoint`; a WebSocket
//! upgrade carrying the endpoint's secret header reaches a server the lease runs (a
//! persistent process), which never sees the secret; without it the endpoint refuses; a
//! second host (another worker over the same leases, which did not start the lease's
//! supervisor) serves the same lease; the endpoint ends with the lease. A worker that does
//! not advertise the verb, or a manifest that does not declare the key, is refused with
//! the exact text before anything reaches the worker.

mod host_common;

use envrt_driver_plugin_sandbox::SandboxOptions;
use envrt_runtime_core::{
    EnvironmentRuntime, Lease, LeaseContext, LeaseStatus, Offsets, OutputEvent, RunnerIngressEndpoint, SpawnRequest,
};
use host_common::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// A server on the lease's 127.0.0.1:{port}: answers an upgrade with `101`, sends back
/// the request head it got (one line per header line, then `end`), then echoes lines.
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

const PORT: u16 = 8125;

async fn start_server(runtime: &EnvironmentRuntime, lease: &Lease) {
    let info = runtime
        .spawn(
            &lease.id,
            SpawnRequest::new([python(), "-c", SERVER, &PORT.to_string()]),
        )
        .await
        .unwrap();
    let mut output = runtime.output(&info.id.to_string(), &Offsets::default()).await.unwrap();
    let mut said = Vec::new();
    while !said.ends_with(b"listening\n") {
        match bounded("server output", output.next()).await.unwrap() {
            Some(OutputEvent::Chunk(chunk)) => said.extend_from_slice(&chunk.bytes),
            other => panic!("the server ended: {other:?} after {}", String::from_utf8_lossy(&said)),
        }
    }
}

/// `host:port` of an endpoint's `ws://` URL for `path`.
fn address(endpoint: &RunnerIngressEndpoint, path: &str) -> String {
    let url = &endpoint.websocket_url;
    url.strip_prefix("ws://")
        .and_then(|rest| rest.strip_suffix(path))
        .unwrap_or_else(|| panic!("{url}"))
        .to_owned()
}

/// An upgrade request for `path` carrying `headers`.
fn upgrade(path: &str, headers: &[(String, String)]) -> String {
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head + "\r\n"
}

fn secrets(endpoint: &RunnerIngressEndpoint) -> Vec<(String, String)> {
    endpoint
        .secret_headers
        .iter()
        .map(|h| (h.name.clone(), h.value.expose().to_owned()))
        .collect()
}

/// Sends `head` and reads the answer's head; the reader stays open for more.
async fn ask(addr: &str, head: &str) -> (BufReader<tokio::net::TcpStream>, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut r = BufReader::new(s);
    let mut got = String::new();
    while !got.ends_with("\r\n\r\n") {
        let n = bounded("an answer", r.read_line(&mut got)).await.unwrap();
        assert_ne!(n, 0, "closed after {got:?}");
    }
    (r, got)
}

/// Reads what the lease's server saw, up to its `end` line.
async fn seen(r: &mut BufReader<tokio::net::TcpStream>) -> String {
    let mut seen = String::new();
    while !seen.ends_with("end\n") {
        let n = bounded("the echoed head", r.read_line(&mut seen)).await.unwrap();
        assert_ne!(n, 0, "{seen}");
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_with_the_secret_header_reaches_the_lease_and_the_endpoint_ends_with_it() {
    let root = TempDir::new("ingress");
    let Some(manifest) = reference_manifest(&root.join("leases")) else {
        return;
    };
    let driver = start(manifest.clone(), SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    let snapshot = runtime.resolve_capabilities(&lease.id).await.unwrap().unwrap();
    assert!(snapshot.runner_web_socket_ingress, "{snapshot:?}");
    start_server(&runtime, &lease).await;

    let endpoint = runtime.runner_ingress(&lease.id, PORT, "/runner").await.unwrap();
    let addr = address(&endpoint, "/runner");
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let headers = secrets(&endpoint);
    assert_eq!(headers.len(), 1);
    assert_eq!(headers[0].0, "x-envrt-ingress-token");
    let token = headers[0].1.clone();
    let shown = format!("{endpoint:?}");
    assert!(!shown.contains(&token), "Debug shows the secret: {shown}");

    // With the header: the lease's server answers the upgrade, and never sees the secret.
    let (mut r, head) = ask(&addr, &upgrade("/runner?x=1", &headers)).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    let saw = seen(&mut r).await;
    assert!(saw.starts_with("GET /runner?x=1 HTTP/1.1\n"), "{saw}");
    assert!(!saw.contains(&token), "the lease saw the secret: {saw}");
    r.get_mut().write_all(b"ping\n").await.unwrap();
    let mut echo = String::new();
    bounded("the echo", r.read_line(&mut echo)).await.unwrap();
    assert_eq!(echo, "ping\n");

    // Without it, or with a wrong one: refused before the lease.
    for headers in [vec![], vec![("x-envrt-ingress-token".to_owned(), "0".repeat(64))]] {
        let (mut r, head) = ask(&addr, &upgrade("/runner", &headers)).await;
        assert!(head.starts_with("HTTP/1.1 401 "), "{head}");
        let mut body = String::new();
        bounded("the refusal", r.read_to_string(&mut body)).await.unwrap();
        assert_eq!(body, "envrt ingress: refused: wrong or missing token\n");
    }

    // The facade refuses bad requests with its own texts.
    let err = runtime.runner_ingress(&lease.id, 0, "/runner").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid input: runner ingress port must be 1 to 65535, not 0"
    );
    let err = runtime.runner_ingress(&lease.id, PORT, "runner").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid input: runner ingress path must start with \"/\" and be at most 1024 visible ASCII characters without \"?\" or \"#\", not \"runner\""
    );

    // Another host over the same leases (a new worker that did not start the lease's
    // supervisor) serves the same lease through the supervisor that runs.
    let second = start(manifest, SandboxOptions::default()).await;
    let context = LeaseContext {
        lease: runtime.lease(&lease.id).await.unwrap().unwrap(),
        environment: None,
    };
    use envrt_runtime_core::EnvironmentDriver as _;
    let other = second
        .as_runner_ingress()
        .expect("the second host has the group")
        .runner_ingress_endpoint(&context, PORT, "/second")
        .await
        .unwrap();
    let (mut r2, head) = ask(&address(&other, "/second"), &upgrade("/second", &secrets(&other))).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert!(seen(&mut r2).await.starts_with("GET /second HTTP/1.1\n"));
    second.shutdown().await;

    // The lease ends: the open connection is cut, and the endpoint carries nothing more.
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    let mut rest = Vec::new();
    let _ = bounded("the cut", r.read_to_end(&mut rest)).await;
    assert_eq!(rest, b"", "the open connection outlived the lease");
    if let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await {
        let _ = s.write_all(upgrade("/runner", &headers).as_bytes()).await;
        let mut rest = Vec::new();
        let _ = bounded("a closed endpoint", s.read_to_end(&mut rest)).await;
        assert_eq!(rest, b"", "{addr} still carries after the release");
    }
    let err = runtime.runner_ingress(&lease.id, PORT, "/runner").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Lease \"{}\" is not active (status: released).", lease.id)
    );
    driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_verb_or_the_declaration_the_capability_is_false_and_refused() {
    let root = TempDir::new("ingress-refused");
    let Some(mut no_agent) = reference_manifest(&root.join("a")) else {
        return;
    };
    // A worker that finds no supervisor's binary does not advertise the verb.
    no_agent
        .worker
        .env
        .insert("ENVRT_AGENT".into(), "/nonexistent/envrt-agent".into());
    let mut undeclared = reference_manifest(&root.join("b")).unwrap();
    if let Some(declaration) = undeclared.environment_drivers[0].sandbox_capabilities.as_mut() {
        declaration.runner_web_socket_ingress = None;
    }
    for (manifest, has_group) in [(no_agent, false), (undeclared, true)] {
        let driver = start(manifest, SandboxOptions::default()).await;
        use envrt_runtime_core::EnvironmentDriver as _;
        assert_eq!(driver.as_runner_ingress().is_some(), has_group);
        let runtime = runtime_with(driver.clone()).await;
        let lease = acquire(&runtime).await;
        let snapshot = runtime.resolve_capabilities(&lease.id).await.unwrap().unwrap();
        assert!(!snapshot.runner_web_socket_ingress, "{snapshot:?}");
        let err = runtime.runner_ingress(&lease.id, PORT, "/runner").await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "Environment driver \"sandbox\" does not support runner WebSocket ingress."
        );
        assert_eq!(err.kind(), "runner_ingress_unsupported");
        runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        driver.shutdown().await;
    }
}
