//! Paperclip's runner WebSocket ingress (`runnerWebSocketIngress`, contract section 10):
//! the refusal when the driver lacks the group or the lease does not grant the key, and,
//! where it is granted, a WebSocket upgrade through the endpoint that reaches a server in
//! the lease with the secret headers and never without them.
//!
//! The server is a persistent process of the lease (`python3`, one connection at a time,
//! on a port it picks and prints); it answers each request head with `101`, the head it
//! got and `end`, and prints `saw {nonce}` for the `x-conformance-nonce` header of each
//! one. So the check proves what reached the lease: the requests without the headers, or
//! with wrong values, go first and must not be answered `101`; the authorised one's nonce
//! must come back through the endpoint without any secret value, and the refused ones'
//! must not be printed before it.

use std::time::Duration;

use envrt_runtime_core::{Lease, LeasePolicy, Offsets, OutputEvent, RunnerIngressEndpoint, SpawnRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Check, Checked, always};
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[
    Check::new("honesty_runner_ingress", always, honesty)
        .promise("Runner ingress opens exactly when the driver has the group and the snapshot grants runnerWebSocketIngress, else the exact refusal."),
    Check::maybe("ingress_websocket_reaches_the_lease", granted, reaches)
        .promise("An upgrade through the ingress endpoint with its secret headers reaches a server in the lease, which never sees them; one without them, or with wrong values, never reaches it."),
];

fn granted(p: &crate::Profile) -> bool {
    p.has_ingress && p.ephemeral.runner_web_socket_ingress
}

const PATH: &str = "/envrt-conformance";

fn honesty(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let granted = ctx
            .runtime
            .resolve_capabilities(&lease.id)
            .await
            .map_err(|e| format!("resolve_capabilities: {e}"))?
            .is_some_and(|s| s.runner_web_socket_ingress);
        let before = ctx.recorder.calls("runner_ingress");
        let result = ctx.runtime.runner_ingress(&lease.id, 8080, PATH).await;
        if ctx.profile.has_ingress && granted {
            let endpoint = result.map_err(|e| format!("runner_ingress despite the capability: {e}"))?;
            loopback_address(&endpoint)?;
            ensure(!endpoint.secret_headers.is_empty(), || {
                "the endpoint names no secret header: it is not authenticated".into()
            })
        } else {
            let expected = format!(
                "Environment driver \"{}\" does not support runner WebSocket ingress.",
                ctx.key
            );
            match result {
                Ok(_) => Err(format!("expected the refusal {expected:?}, but the endpoint opened")),
                Err(error) => {
                    ensure_eq(error.to_string().as_str(), expected.as_str(), "refusal text")?;
                    ensure_eq(
                        ctx.recorder.calls("runner_ingress"),
                        before,
                        "calls that reached the driver",
                    )
                }
            }
        }
    })
}

/// `host:port` of the endpoint's `ws://{loopback IP}:{port}{PATH}` URL.
fn loopback_address(endpoint: &RunnerIngressEndpoint) -> Result<String, String> {
    let url = &endpoint.websocket_url;
    let wrong = || format!("the endpoint {url:?} is not ws://{{a loopback address}}:{{port}}{PATH}");
    let authority = url
        .strip_prefix("ws://")
        .and_then(|rest| rest.strip_suffix(PATH))
        .ok_or_else(wrong)?;
    let addr: std::net::SocketAddr = authority.parse().map_err(|_| wrong())?;
    ensure(addr.ip().is_loopback(), wrong)?;
    Ok(authority.to_owned())
}

/// The lease's server (see the module docs).
const SERVER: &str = r#"
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(16)
print("listening", s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    f = c.makefile("rb")
    lines = []
    while True:
        line = f.readline(65536)
        if line in (b"\r\n", b"\n", b""): break
        lines.append(line.rstrip(b"\r\n"))
    nonce = [l.split(b":", 1)[1].strip() for l in lines if l.lower().startswith(b"x-conformance-nonce:")]
    print("saw", (nonce or [b"-"])[0].decode(), flush=True)
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" + b"".join(l + b"\n" for l in lines) + b"end\n")
    f.close(); c.shutdown(socket.SHUT_RDWR); c.close()
"#;

const LIMIT: Duration = Duration::from_secs(30);

/// Sends an upgrade for [`PATH`] with `headers` and the nonce, and reads the answer until
/// the endpoint closes (or [`LIMIT`] passed).
async fn ask(addr: &str, headers: &[(String, String)], nonce: &str) -> Result<String, String> {
    let mut head = format!(
        "GET {PATH} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nx-conformance-nonce: {nonce}\r\n"
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect to the endpoint {addr}: {e}"))?;
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| format!("send to the endpoint: {e}"))?;
    let mut got = Vec::new();
    let _ = tokio::time::timeout(LIMIT, stream.read_to_end(&mut got)).await;
    Ok(String::from_utf8_lossy(&got).into_owned())
}

/// Starts the server; its process id and port, or why it cannot run.
async fn serve(ctx: &Ctx, lease: &Lease) -> Result<Result<(String, u16), String>, String> {
    let script = format!("command -v python3 >/dev/null || {{ echo no-python; exit 0; }}; exec python3 -c '{SERVER}'");
    let info = ctx
        .runtime
        .spawn(&lease.id, SpawnRequest::new(["sh", "-c", &script]))
        .await
        .map_err(|e| format!("spawn the server: {e}"))?;
    let id = info.id.to_string();
    let mut output = ctx
        .runtime
        .output(&id, &Offsets::default())
        .await
        .map_err(|e| format!("output: {e}"))?;
    let mut said = String::new();
    loop {
        if said.contains("no-python") {
            return Ok(Err("the lease has no python3 to serve a port".into()));
        }
        if let Some(port) = said
            .lines()
            .find_map(|l| l.strip_prefix("listening "))
            .filter(|_| said.ends_with('\n'))
        {
            let port = port.trim().parse().map_err(|_| format!("the server said {said:?}"))?;
            return Ok(Ok((id, port)));
        }
        match tokio::time::timeout(LIMIT, output.next()).await {
            Ok(Ok(Some(OutputEvent::Chunk(chunk)))) => said.push_str(&String::from_utf8_lossy(&chunk.bytes)),
            other => return Err(format!("the server did not listen: {other:?} after {said:?}")),
        }
    }
}

/// Everything the server printed until `saw {last}`.
async fn printed_until(ctx: &Ctx, id: &str, last: &str) -> Result<String, String> {
    let mut output = ctx
        .runtime
        .output(id, &Offsets::default())
        .await
        .map_err(|e| format!("output: {e}"))?;
    let mut said = String::new();
    let wanted = format!("saw {last}\n");
    while !said.contains(&wanted) {
        match tokio::time::timeout(LIMIT, output.next()).await {
            Ok(Ok(Some(OutputEvent::Chunk(chunk)))) => said.push_str(&String::from_utf8_lossy(&chunk.bytes)),
            other => return Err(format!("the server never saw {last}: {other:?} after {said:?}")),
        }
    }
    Ok(said)
}

fn reaches(ctx: &Ctx) -> Result<Checked, String> {
    if !(ctx.profile.has_processes && ctx.profile.ephemeral.persistent_process_sessions) {
        return Ok(Checked::NotChecked(
            "the driver has no persistent processes to run a server in the lease".into(),
        ));
    }
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let (server, port) = match serve(ctx, &lease).await? {
            Ok(found) => found,
            Err(why) => return Ok(Checked::NotChecked(why)),
        };
        let endpoint = ctx
            .runtime
            .runner_ingress(&lease.id, port, PATH)
            .await
            .map_err(|e| format!("runner_ingress: {e}"))?;
        let addr = loopback_address(&endpoint)?;
        let secrets: Vec<(String, String)> = endpoint
            .secret_headers
            .iter()
            .map(|h| (h.name.clone(), h.value.expose().to_owned()))
            .collect();
        ensure(!secrets.is_empty(), || {
            "the endpoint names no secret header: it is not authenticated".into()
        })?;
        let nonce = |what: &str| format!("{}-{what}", ctx.marker("ingress"));
        let (bare, wrong, good) = (nonce("bare"), nonce("wrong"), nonce("good"));

        // Refused first: nothing of them may reach the lease's server.
        let refused = |answer: &str, what: &str| {
            ensure(!answer.starts_with("HTTP/1.1 101 "), || {
                format!("an upgrade {what} was answered 101: the endpoint does not authenticate")
            })
        };
        refused(&ask(&addr, &[], &bare).await?, "without the secret headers")?;
        let wrong_values: Vec<(String, String)> = secrets
            .iter()
            .map(|(name, value)| (name.clone(), "x".repeat(value.len())))
            .collect();
        refused(&ask(&addr, &wrong_values, &wrong).await?, "with wrong secret values")?;

        let answer = ask(&addr, &secrets, &good).await?;
        ensure(answer.starts_with("HTTP/1.1 101 "), || {
            format!("an upgrade with the secret headers was answered {:?}", head_of(&answer))
        })?;
        ensure(answer.contains(&format!("x-conformance-nonce: {good}\n")), || {
            "an upgrade with the secret headers was answered 101, but the lease's server never saw it (the endpoint does not reach the lease)".into()
        })?;
        for (name, value) in &secrets {
            ensure(!answer.contains(value.as_str()), || {
                format!("the lease's server saw the value of the secret header {name}")
            })?;
        }
        // One connection at a time: what it printed before the good one is all it saw.
        let said = printed_until(ctx, &server, &good).await?;
        for (nonce, what) in [(&bare, "without the secret headers"), (&wrong, "with wrong secret values")] {
            ensure(!said.contains(&format!("saw {nonce}\n")), || {
                format!("an upgrade {what} reached the lease's server")
            })?;
        }
        Ok(Checked::Yes)
    })
}

fn head_of(answer: &str) -> &str {
    answer.lines().next().unwrap_or("nothing")
}
