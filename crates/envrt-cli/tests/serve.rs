//! `envrt token` and `envrt serve` end to end: a token is printed once and stored as a
//! hash, revoked once; a non-loopback `--listen` without TLS is refused; a SIGKILLed
//! service leaves only what `envrt gc` reconciles (its pool's leases), its clients'
//! leases survive into the next start, and SIGTERM stops it cleanly; and one Docker smoke
//! test (a container lease through the service; skips loudly without an engine, fails
//! with `ENVRT_REQUIRE_DOCKER=1`).

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

/// The Docker test image, as the other Docker tests take it.
fn docker_image() -> String {
    std::env::var("ENVRT_TEST_IMAGE").unwrap_or_else(|_| "envrt-test:latest".into())
}

/// Removes every container labelled with this state dir when the test ends.
struct Containers(std::path::PathBuf);

impl Drop for Containers {
    fn drop(&mut self) {
        let filter = format!("label=envrt.cli-state={}", self.0.display());
        let Ok(out) = std::process::Command::new("docker")
            .args(["ps", "-aq", "--no-trunc", "--filter", &filter])
            .output()
        else {
            return;
        };
        for id in String::from_utf8_lossy(&out.stdout).lines() {
            let _ = std::process::Command::new("docker")
                .args(["rm", "-f", "-v", id])
                .output();
        }
    }
}

#[test]
fn a_docker_lease_through_the_service_runs_and_syncs_in_a_container() {
    let ready = std::process::Command::new("docker")
        .args(["image", "inspect", &docker_image()])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        assert!(
            std::env::var("ENVRT_REQUIRE_DOCKER").map_or(true, |v| v != "1"),
            "ENVRT_REQUIRE_DOCKER=1 but no engine or no image {}",
            docker_image()
        );
        eprintln!("SKIPPED: no Docker engine or no image {}", docker_image());
        return;
    }
    let s = Site::new();
    std::fs::write(
        s.path().join("envrt.toml"),
        format!(
            "[[environment]]\nid = \"ctr\"\ndriver = \"docker\"\n[environment.config]\nimage = \"{}\"\n",
            docker_image()
        ),
    )
    .unwrap();
    let _containers = Containers(std::path::absolute(s.state()).unwrap());
    let (_, token) = create_token(&s, "acme");
    let socket = s.path().join("serve.sock");
    let (mut child, _stderr) = start(&s, &socket);
    let (status, lease) = http(&socket, "POST", "/v1/leases", &token, r#"{"environmentId":"ctr"}"#);
    assert_eq!(status, 201, "{lease}");
    let id = lease["id"].as_str().unwrap().to_owned();
    assert_eq!(lease["provider"], "docker");
    let run = |cmd: &str| {
        let body = serde_json::json!({ "command": "sh", "args": ["-c", cmd] }).to_string();
        http(&socket, "POST", &format!("/v1/leases/{id}/execute"), &token, &body)
    };
    let (status, result) = run("test -f /.dockerenv && echo in-a-container");
    assert_eq!(
        (status, result["stdout"].clone()),
        (200, serde_json::json!("in-a-container\n"))
    );
    // A tar in, through the container, and back out.
    let source = s.path().join("src");
    std::fs::create_dir(&source).unwrap();
    std::fs::write(source.join("f.txt"), "through docker").unwrap();
    let tar = std::process::Command::new("tar")
        .args(["-C", source.to_str().unwrap(), "-cf", "-", "."])
        .output()
        .unwrap()
        .stdout;
    let mut stream = UnixStream::connect(&socket).unwrap();
    write!(
        stream,
        "PUT /v1/leases/{id}/files?path=in HTTP/1.1\r\nHost: serve\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        tar.len()
    )
    .unwrap();
    stream.write_all(&tar).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (_, result) = run("cat in/f.txt");
    assert_eq!(result["stdout"], "through docker");
    let (status, released) = http(&socket, "POST", &format!("/v1/leases/{id}/release"), &token, "");
    assert_eq!(
        (status, released["status"].clone()),
        (200, serde_json::json!("released"))
    );
    child.kill().unwrap();
    child.wait().unwrap();
}
