//! `envrt token` and `envrt serve` end to end: a token is printed once and stored as a
//! hash, revoked once; a non-loopback `--listen` without TLS is refused; a SIGKILLed
//! service leaves only what `envrt gc` reconciles (its pool's leases), its clients'
//! leases survive into the next start, and SIGTERM stops it cleanly.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, ChildStderr, Stdio};
use std::time::{Duration, Instant};

use common::Site;

fn create_token(s: &Site, tenant: &str) -> (String, String) {
    let out = s.run(&["token", "create", "--tenant", tenant]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let text = out.stdout_text();
    let lines: Vec<&str> = text.lines().collect();
    let id = lines[0].strip_prefix("id: ").unwrap().to_owned();
    (id, lines.last().unwrap().to_string())
}

#[test]
fn a_token_is_shown_once_listed_without_its_secret_and_revoked_once() {
    let s = Site::new();
    let (id, token) = create_token(&s, "acme");
    assert!(token.starts_with(&format!("envrt_{id}_")), "{token}");
    let list = s.run(&["token", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["tenant"], "acme");
    assert_eq!(listed[0]["revokedAt"], serde_json::Value::Null);
    let secret = token.rsplit('_').next().unwrap();
    assert!(!list.stdout_text().contains(secret));
    let db = std::fs::read(s.state().join("leases.db")).unwrap();
    assert!(
        !db.windows(secret.len()).any(|w| w == secret.as_bytes()),
        "the store holds the secret"
    );
    let out = s.run(&["token", "revoke", &id]);
    assert_eq!((out.code, out.stdout_text()), (Some(0), format!("revoked {id}\n")));
    let again = s.run(&["token", "revoke", &id]);
    assert_eq!(again.code, Some(2));
    assert_eq!(
        again.stderr,
        format!("envrt: no live token \"{id}\" (envrt token list shows them)\n")
    );
    let bad = s.run(&["token", "create", "--tenant", "acme", "--ops", "leases:read,nope"]);
    assert_eq!(bad.code, Some(2));
    assert!(
        bad.stderr.starts_with("envrt: unknown operation \"nope\" (one of: "),
        "{}",
        bad.stderr
    );
}

#[test]
fn a_listen_address_beyond_loopback_needs_tls() {
    let s = Site::new();
    let out = s.run(&["serve", "--listen", "0.0.0.0:0"]);
    assert_eq!(out.code, Some(2));
    assert_eq!(
        out.stderr,
        "envrt serve: --listen 0.0.0.0:0 is beyond loopback; give --tls-cert and --tls-key to serve it over TLS\n"
    );
}

/// Starts `envrt serve --socket SOCKET` and waits for its "listening" line.
fn start(s: &Site, socket: &Path) -> (Child, BufReader<ChildStderr>) {
    let mut child = s
        .command(&["serve", "--socket", socket.to_str().unwrap()])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert_eq!(line, format!("envrt serve: listening on unix:{}\n", socket.display()));
    (child, stderr)
}

/// One HTTP/1.1 request over the socket; the status and the body.
fn http(socket: &Path, method: &str, path: &str, token: &str, body: &str) -> (u16, serde_json::Value) {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: serve\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer.split_once("\r\n\r\n").unwrap().1;
    (status, serde_json::from_str(body).unwrap_or(serde_json::Value::Null))
}

#[test]
fn a_sigkilled_service_leaves_only_what_gc_reconciles_and_its_leases_outlive_it() {
    let s = Site::new();
    std::fs::write(
        s.path().join("envrt.toml"),
        "[[environment]]\nid = \"warm\"\ndriver = \"local\"\n[environment.pool]\nsize = 1\n",
    )
    .unwrap();
    let (_, token) = create_token(&s, "acme");
    let socket = s.path().join("serve.sock");
    let (mut child, _stderr) = start(&s, &socket);
    let (status, lease) = http(&socket, "POST", "/v1/leases", &token, r#"{"environmentId":"warm"}"#);
    assert_eq!(status, 201, "{lease}");
    let id = lease["id"].as_str().unwrap().to_owned();
    // Wait (bounded) for the pool's ready lease, so the kill leaves one behind.
    let until = Instant::now() + Duration::from_secs(60);
    let pooled = loop {
        let pooled: Vec<_> = s.leases_json().into_iter().filter(|l| l["id"] != id.as_str()).collect();
        if !pooled.is_empty() {
            break pooled;
        }
        assert!(Instant::now() < until, "the pool never filled");
        std::thread::sleep(Duration::from_millis(20));
    };
    let pid = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    let gc = s.run(&["gc"]);
    assert_eq!(gc.code, Some(0), "{}", gc.stderr);
    let text = gc.stdout_text();
    let pooled_id = pooled[0]["id"].as_str().unwrap();
    assert!(
        text.contains(&format!("released lease {pooled_id} (its holder, pid {pid}, is gone)")),
        "{text}"
    );
    assert!(text.ends_with("gc: 1 released, 0 failed\n"), "{text}");
    // The client's lease is not the service's to lose: it is still active, and usable
    // through the next start (which replaces the stale socket). It is tenant acme's, so
    // the CLI (tenant `local`, the configuration's) does not list it.
    let (mut child, mut stderr) = start(&s, &socket);
    let (status, shown) = http(&socket, "GET", &format!("/v1/leases/{id}"), &token, "");
    assert_eq!((status, shown["status"].clone()), (200, serde_json::json!("active")));
    let (status, result) = http(
        &socket,
        "POST",
        &format!("/v1/leases/{id}/execute"),
        &token,
        r#"{"command":"echo","args":["again"]}"#,
    );
    assert_eq!((status, result["stdout"].clone()), (200, serde_json::json!("again\n")));
    let (status, released) = http(&socket, "POST", &format!("/v1/leases/{id}/release"), &token, "");
    assert_eq!(
        (status, released["status"].clone()),
        (200, serde_json::json!("released"))
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let code = common::wait_bounded(&mut child, Duration::from_secs(60));
    assert_eq!(code.code(), Some(0));
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(rest.ends_with("envrt serve: stopped\n"), "{rest}");
    assert!(rest.contains("\"audit\":\"execute\""), "{rest}");
    assert!(
        !rest.contains(token.rsplit('_').next().unwrap()),
        "a log line holds the token"
    );
    assert!(!socket.exists(), "the socket was left behind");
}
