//! `envrt lease ingress LEASE --port P --path /x` on the sandbox driver (the reference
//! worker): a server the lease runs as a persistent process (spawned by another `envrt`,
//! so by another worker) answers a WebSocket upgrade that reaches it through the printed
//! endpoint with the secret header printed under `--show-secrets`, never without it; the
//! header value is not printed unless asked; the invocation ends, saying so, when another
//! `envrt` releases the lease; a bad path is refused with the facade's text. Skips loudly
//! without the worker (fails with `ENVRT_REQUIRE_SANDBOX=1`).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

use common::*;

/// Answers an upgrade with 101 and the request line it got, then closes.
const SERVER: &str = "import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
s.bind(('127.0.0.1', 8126)); s.listen(4); print('listening', flush=True)\n\
while True:\n    c, _ = s.accept(); f = c.makefile('rb'); line = f.readline()\n    \
while f.readline() not in (b'\\r\\n', b''): pass\n    \
c.sendall(b'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n\\r\\n' + line); c.shutdown(socket.SHUT_RDWR); c.close()\n";

/// Starts `envrt lease ingress` and reads its stdout lines (URL, generation, header).
fn ingress(s: &Site, id: &str, extra: &[&str]) -> (std::process::Child, Vec<String>) {
    let mut args = vec!["lease", "ingress", id, "--port", "8126", "--path", "/runner"];
    args.extend_from_slice(extra);
    let mut child = s.command(&args).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let lines = (0..3)
        .map(|_| {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            line.trim_end().to_owned()
        })
        .collect();
    (child, lines)
}

fn ask(addr: &str, head: &str) -> String {
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(LIMIT)).unwrap();
    conn.write_all(head.as_bytes()).unwrap();
    let mut got = String::new();
    let _ = conn.read_to_string(&mut got);
    got
}

#[test]
fn lease_ingress_serves_an_upgrade_with_the_secret_header_until_the_lease_is_released() {
    let Some(_) = envrt_test_support::sandbox::worker_beside_or_skip(BIN) else {
        return;
    };
    let s = Site::new();
    std::fs::write(
        s.path().join("envrt.toml"),
        "[[environment]]\nid = \"box\"\ndriver = \"sandbox\"\n",
    )
    .unwrap();
    let id = s
        .run(&["lease", "acquire", "--env-id", "box"])
        .stdout_text()
        .trim()
        .to_owned();
    let spawned = s.run(&["spawn", "--lease", &id, "--", "/usr/bin/python3", "-c", SERVER]);
    assert_eq!(spawned.code, Some(0), "{}", spawned.stderr);
    let process = spawned.stdout_text().lines().last().unwrap().to_owned();
    let mut logs = s.command(&["logs", "--follow", &process]).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(logs.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "listening\n");
    let _ = logs.kill();
    let _ = logs.wait();

    let refused = s.run(&["lease", "ingress", &id, "--port", "8126", "--path", "runner"]);
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains(
            "Invalid input: runner ingress path must start with \"/\" and be at most 1024 visible ASCII characters without \"?\" or \"#\", not \"runner\""
        ),
        "{}",
        refused.stderr
    );

    // Without --show-secrets: the header's name only, and stderr says how to get it.
    let (mut hidden, lines) = ingress(&s, &id, &[]);
    assert_eq!(lines[2], "header x-envrt-ingress-token", "{lines:?}");
    let _ = hidden.kill();
    let _ = hidden.wait();
    let mut err = String::new();
    hidden.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(
        err.contains("envrt: the secret header values are not printed; pass --show-secrets to print them"),
        "{err}"
    );

    let (mut shown, lines) = ingress(&s, &id, &["--show-secrets"]);
    let addr = lines[0]
        .strip_prefix("ws://")
        .and_then(|rest| rest.strip_suffix("/runner"))
        .unwrap_or_else(|| panic!("{lines:?}"))
        .to_owned();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    assert!(lines[1].starts_with("generation "), "{lines:?}");
    let header = lines[2]
        .strip_prefix("header ")
        .unwrap_or_else(|| panic!("{lines:?}"))
        .to_owned();
    assert!(header.starts_with("x-envrt-ingress-token: "), "{header}");
    let upgrade = |extra: &str| format!("GET /runner HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n{extra}\r\n");
    let answer = ask(&addr, &upgrade(&format!("{header}\r\n")));
    assert!(answer.starts_with("HTTP/1.1 101 "), "{answer}");
    assert!(answer.ends_with("GET /runner HTTP/1.1\r\n"), "{answer}");
    assert_eq!(
        ask(&addr, &upgrade("")),
        "HTTP/1.1 401 Unauthorized\r\ncontent-type: text/plain\r\ncontent-length: 47\r\nconnection: close\r\n\r\nenvrt ingress: refused: wrong or missing token\n"
    );

    // Another program releases the lease: the invocation ends and says why.
    assert_eq!(s.run(&["lease", "release", &id]).code, Some(0));
    let status = wait_bounded(&mut shown, LIMIT);
    let mut err = String::new();
    shown.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert_eq!(
        err,
        format!("envrt: lease {id} ended: its runner ingress endpoint is closed\n")
    );
    assert!(
        std::net::TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(5)).is_err(),
        "the endpoint outlived its invocation"
    );
}
