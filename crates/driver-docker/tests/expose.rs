//! Exposed lease ports on Docker (contract section 10): a server in a `network = "none"`
//! container is reached from the host through the lease's supervisor, and its endpoint and
//! open connections end with the lease. Needs Docker; fails instead of skipping with
//! `ENVRT_REQUIRE_DOCKER=1`.

mod common;

use envrt_runtime_core::{EndpointAddress, ExposeAt, LeaseStatus, Offsets, OutputEvent, SpawnRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PORT: u16 = 8125;

/// One HTTP/1.0 GET through the endpoint at `addr`: the whole answer.
async fn get(addr: std::net::SocketAddr) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) => panic!("{e} after {:?}", String::from_utf8_lossy(&answer)),
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_port_is_reached_from_the_host_and_its_endpoint_ends_with_the_lease() {
    let Some(h) = common::harness_with(|config| {
        config.agent = Some(envrt_test_support::docker::static_agent());
    })
    .await
    else {
        return;
    };
    let lease = h.default_lease().await;
    // BusyBox httpd returns once it listens (it goes to the background); the line follows.
    let script = format!(
        "mkdir -p /tmp/www && echo 'hello from the container' > /tmp/www/index.html && \
         httpd -p 127.0.0.1:{PORT} -h /tmp/www && echo listening && exec sleep 1000"
    );
    let info = h
        .runtime
        .spawn(&lease.id, SpawnRequest::new(["sh", "-c", &script]))
        .await
        .unwrap();
    let mut output = h
        .runtime
        .output(&info.id.to_string(), &Offsets::default())
        .await
        .unwrap();
    let mut said = Vec::new();
    while !said.ends_with(b"listening\n") {
        match output.next().await.unwrap() {
            Some(OutputEvent::Chunk(chunk)) => said.extend_from_slice(&chunk.bytes),
            other => panic!("the server ended: {other:?}: {}", String::from_utf8_lossy(&said)),
        }
    }

    let endpoint = h.runtime.expose(&lease.id, PORT, ExposeAt::Loopback).await.unwrap();
    let EndpointAddress::Tcp(addr) = endpoint.address else {
        panic!("{endpoint:?}")
    };
    let answer = get(addr).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.ends_with("hello from the container\n"), "{answer}");
    // Nothing listens on another port: the supervisor's refusal, relayed.
    let nobody = h.runtime.expose(&lease.id, 1, ExposeAt::Loopback).await.unwrap();
    let EndpointAddress::Tcp(nobody) = nobody.address else {
        unreachable!()
    };
    let mut s = tokio::net::TcpStream::connect(nobody).await.unwrap();
    let mut refusal = String::new();
    s.read_to_string(&mut refusal).await.unwrap();
    assert_eq!(
        refusal,
        "envrt expose: cannot connect to 127.0.0.1:1 in the lease: Connection refused (os error 111)\n"
    );

    // An open connection (a request not yet ended) is cut by the release.
    let mut open = tokio::net::TcpStream::connect(addr).await.unwrap();
    open.write_all(b"GET / HTTP/1.0\r\n").await.unwrap();
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    let mut rest = Vec::new();
    let _ = open.read_to_end(&mut rest).await;
    assert_eq!(rest, b"", "the open connection outlived the lease");
    if let Ok(mut s) = tokio::net::TcpStream::connect(addr).await {
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest).await;
        assert_eq!(rest, b"", "the endpoint still carries after the release");
    }
    h.finish().await;
}
