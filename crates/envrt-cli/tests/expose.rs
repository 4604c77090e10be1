//! `envrt expose LEASE PORT` on the sandbox driver (the reference worker): a server the
//! lease runs as a persistent process is reached through the printed loopback address,
//! and the invocation ends, saying so, when another `envrt` releases the lease. Skips
//! loudly without the worker (fails with `ENVRT_REQUIRE_SANDBOX=1`).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

use common::*;

const SERVER: &str = "import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
s.bind(('127.0.0.1', 8124)); s.listen(4); print('listening', flush=True)\n\
while True:\n    c, _ = s.accept(); c.sendall(b'hello from the lease\\n'); c.close()\n";

#[test]
fn expose_serves_a_lease_port_until_the_lease_is_released() {
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
    // The server says it listens: its output, followed until that line.
    let mut logs = s.command(&["logs", "--follow", &process]).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(logs.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "listening\n");
    let _ = logs.kill();
    let _ = logs.wait();

    let mut expose = s.command(&["expose", &id, "8124"]).spawn().unwrap();
    let mut out = BufReader::new(expose.stdout.take().unwrap());
    let mut address = String::new();
    out.read_line(&mut address).unwrap();
    let addr = address
        .trim()
        .strip_prefix("tcp://")
        .unwrap_or_else(|| panic!("{address:?}"))
        .to_owned();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    conn.set_read_timeout(Some(LIMIT)).unwrap();
    let mut greeting = String::new();
    conn.read_to_string(&mut greeting).unwrap();
    assert_eq!(greeting, "hello from the lease\n");
    conn.flush().unwrap();

    // Another program releases the lease: the invocation ends and says why.
    assert_eq!(s.run(&["lease", "release", &id]).code, Some(0));
    let status = wait_bounded(&mut expose, LIMIT);
    let mut err = String::new();
    expose.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert_eq!(err, format!("envrt: lease {id} ended: its exposed port is closed\n"));
    assert!(
        std::net::TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(5)).is_err(),
        "the endpoint outlived its invocation"
    );
}
