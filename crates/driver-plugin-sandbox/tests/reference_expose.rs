//! Exposed lease ports on the sandbox driver (contract section 10), through the host and
//! the reference worker on real `bwrap`: a server the lease runs (a persistent process,
//! in its supervisor's network namespace: the lease has no network at all) is reached
//! from the host on loopback, on a unix socket, and beyond loopback only with the
//! endpoint's token; the endpoints and their open connections end with the lease.

mod host_common;

use envrt_driver_plugin_sandbox::SandboxOptions;
use envrt_runtime_core::{
    EndpointAddress, EnvironmentRuntime, ExposeAt, Lease, LeaseStatus, Offsets, OutputEvent, SpawnRequest,
};
use host_common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A server on the lease's 127.0.0.1:{port} that greets each connection and then echoes
/// one line; it prints `listening` once bound.
const SERVER: &str = r#"
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16)
print("listening", flush=True)
def serve(c):
    c.sendall(b"hello from the lease\n")
    f = c.makefile("rb"); line = f.readline(); c.sendall(line)
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

const PORT: u16 = 8123;

/// Starts the server and waits until it says it listens.
async fn start_server(runtime: &EnvironmentRuntime, lease: &Lease) {
    let info = runtime
        .spawn(
            &lease.id,
            SpawnRequest::new(["/usr/bin/python3", "-c", SERVER, &PORT.to_string()]),
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

/// Connects to an endpoint, sends `first` (a token line, or nothing), and reads what comes
/// back until the server's greeting line or the end.
async fn greeting(address: &EndpointAddress, first: &[u8]) -> String {
    let mut got = Vec::new();
    match address {
        EndpointAddress::Tcp(addr) => {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(first).await.unwrap();
            read_line(&mut s, &mut got).await;
        }
        EndpointAddress::Unix(path) => {
            let mut s = tokio::net::UnixStream::connect(path).await.unwrap();
            s.write_all(first).await.unwrap();
            read_line(&mut s, &mut got).await;
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

async fn read_line<S: AsyncReadExt + Unpin>(s: &mut S, got: &mut Vec<u8>) {
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\n") {
        match bounded("a line", s.read(&mut byte)).await {
            Ok(1) => got.push(byte[0]),
            _ => return,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_port_is_reached_from_the_host_and_its_endpoints_end_with_the_lease() {
    let root = TempDir::new("expose");
    let Some(manifest) = reference_manifest(&root.join("leases")) else {
        return;
    };
    let agent = std::path::Path::new(reference_worker().unwrap()).with_file_name("envrt-agent");
    assert!(
        agent.is_file(),
        "{} is not built; run `cargo build -p envrt-agent`",
        agent.display()
    );
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    start_server(&runtime, &lease).await;

    // Loopback (the default): no token.
    let local = runtime.expose(&lease.id, PORT, ExposeAt::Loopback).await.unwrap();
    assert_eq!(local.token, None);
    let EndpointAddress::Tcp(addr) = local.address.clone() else {
        panic!("{local:?}")
    };
    assert!(addr.ip().is_loopback(), "{addr}");
    assert_eq!(greeting(&local.address, b"").await, "hello from the lease\n");
    // A whole exchange both ways, kept open across the release below.
    let mut open = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut got = Vec::new();
    read_line(&mut open, &mut got).await;
    assert_eq!(got, b"hello from the lease\n");
    open.write_all(b"ping\n").await.unwrap();
    let mut echo = Vec::new();
    read_line(&mut open, &mut echo).await;
    assert_eq!(echo, b"ping\n");

    // A unix socket, mode 0600.
    let path = root.join("port.sock");
    let unix = runtime
        .expose(&lease.id, PORT, ExposeAt::Unix(path.clone()))
        .await
        .unwrap();
    assert_eq!(unix.address, EndpointAddress::Unix(path.clone()));
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(greeting(&unix.address, b"").await, "hello from the lease\n");
    let err = runtime
        .expose(&lease.id, PORT, ExposeAt::Unix(path.clone()))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Invalid input: cannot expose a port at {}: the path exists",
            path.display()
        )
    );

    // Beyond loopback on request only, and then with a token.
    let wide = runtime
        .expose(&lease.id, PORT, ExposeAt::Listen("0.0.0.0:0".parse().unwrap()))
        .await
        .unwrap();
    let token = wide.token.clone().expect("a token beyond loopback");
    assert_eq!(token.len(), 32);
    let EndpointAddress::Tcp(wide_addr) = wide.address.clone() else {
        panic!("{wide:?}")
    };
    let reach = EndpointAddress::Tcp(std::net::SocketAddr::from(([127, 0, 0, 1], wide_addr.port())));
    assert_eq!(
        greeting(&reach, b"not-the-token\n").await,
        "envrt expose: refused: wrong or missing token\n"
    );
    assert_eq!(
        greeting(&reach, format!("{token}\n").as_bytes()).await,
        "hello from the lease\n"
    );

    // Refusals, each exact.
    let err = runtime.expose(&lease.id, 0, ExposeAt::Loopback).await.unwrap_err();
    assert_eq!(err.to_string(), "Invalid input: port 0 cannot be exposed");
    let nobody = runtime.expose(&lease.id, 1, ExposeAt::Loopback).await.unwrap();
    assert_eq!(
        greeting(&nobody.address, b"").await,
        "envrt expose: cannot connect to 127.0.0.1:1 in the lease: Connection refused (os error 111)\n"
    );

    // The lease ends: the open connection is cut, and no endpoint carries anything more.
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    let mut rest = Vec::new();
    let _ = bounded("the cut", open.read_to_end(&mut rest)).await;
    assert_eq!(rest, b"", "the open connection outlived the lease");
    for endpoint in [&local, &wide] {
        let EndpointAddress::Tcp(addr) = endpoint.address else {
            unreachable!()
        };
        if let Ok(mut s) = tokio::net::TcpStream::connect(addr).await {
            let mut rest = Vec::new();
            let _ = bounded("a closed endpoint", s.read_to_end(&mut rest)).await;
            assert_eq!(rest, b"", "{addr} still carries after the release");
        }
    }
    assert!(!path.exists(), "the unix socket outlived the lease");
    let err = runtime.expose(&lease.id, PORT, ExposeAt::Loopback).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Lease \"{}\" is not active (status: released).", lease.id)
    );
    driver.shutdown().await;
}
