//! The egress proxy and DNS stub against real hosts on this machine: servers in a network
//! namespace of their own, the proxy in another with no route but the veth between them
//! (so nothing a faulty proxy tries can leave the machine). Needs root for `ip netns`;
//! fails instead of skipping with `ENVRT_REQUIRE_NETWORK=1`.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use envrt_egress::{Egress, EgressProxy, Limits, Policy, Resolver};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};
use support::servers::{self, Dns, Tls};
use support::{Net, SRV, SRV_PRIVATE, SRV6, Srv};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Everything a test talks to.
struct World {
    proxy: EgressProxy,
    addr: SocketAddr,
    dns: Dns,
    tls: Tls,
}

const HOSTS: &[(&str, &str)] = &[
    ("web.test", SRV),
    ("tls.test", SRV),
    ("other.test", SRV),
    ("rebind.test", SRV_PRIVATE),
    ("meta.test", "169.254.169.254"),
    ("web6.test", SRV6),
];

fn allow(entries: &[&str]) -> Policy {
    Policy::new(Egress::Allow, entries).unwrap()
}

/// The servers (HTTP on :80 and :8080 and on the private address, TLS on :443, DNS on
/// :53) and a proxy on the client side's loopback.
async fn world(srv: &Srv, policy: Policy, limits: Limits) -> World {
    servers::http_server(srv.tcp(&format!("{SRV}:80")));
    servers::http_server(srv.tcp(&format!("{SRV}:8080")));
    servers::http_server(srv.tcp(&format!("{SRV_PRIVATE}:80")));
    servers::http_server(srv.tcp(&format!("[{SRV6}]:80")));
    let tls = servers::tls_server(srv.tcp(&format!("{SRV}:443")), &["tls.test", "other.test"]);
    let dns = servers::dns_server(srv.udp(&format!("{SRV}:53")), HOSTS);
    let resolver = Resolver::new(format!("{SRV}:53").parse().unwrap(), Duration::from_secs(5));
    let proxy = EgressProxy::new(policy, resolver, limits);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let p = proxy.clone();
    tokio::spawn(async move { p.serve_tcp(listener).await });
    World { proxy, addr, dns, tls }
}

fn refused(text: &str) -> String {
    format!("envrt egress: refused: {text}\n")
}

fn default_policy() -> Policy {
    allow(&["web.test", "tls.test:443", "rebind.test"])
}

macro_rules! net_test {
    ($name:ident, |$srv:ident| $body:expr) => {
        #[test]
        fn $name() {
            let Some(net) = Net::new() else { return };
            net.run(|$srv| async move { $body });
        }
    };
}

net_test!(an_allowed_name_is_reachable_over_http_and_https, |srv| {
    let w = world(&srv, default_policy(), Limits::default()).await;
    let a = servers::get(w.addr, "http://web.test/", "web.test").await;
    assert_eq!((a.status, a.body.as_str()), (200, "hello from web.test"));
    let (s, a) = servers::connect(w.addr, "tls.test:443").await;
    assert_eq!(a.status, 200, "{a:?}");
    let name = rustls::pki_types::ServerName::try_from("tls.test").unwrap();
    let mut tls = servers::tls_client(&w.tls.cert).connect(name, s).await.unwrap();
    let a = servers::get_on(&mut tls, "tls.test", "/").await;
    assert_eq!((a.status, a.body.as_str()), (200, "hello from tls.test"));
    assert_eq!(w.tls.handshakes.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Resolved once (one A and one AAAA query), not again at connect time.
    assert_eq!(w.dns.count("tls.test"), 2, "{:?}", w.dns.names());
    // A redirect to a host the policy denies is handed back, never followed by the proxy.
    let mut s = tokio::net::TcpStream::connect(w.addr).await.unwrap();
    let a = servers::get_on(&mut s, "web.test", "http://web.test/redirect").await;
    assert_eq!(a.status, 302);
    assert_eq!(w.dns.count("other.test"), 0, "{:?}", w.dns.names());
});

net_test!(an_unlisted_name_is_refused_and_never_resolved, |srv| {
    let w = world(&srv, default_policy(), Limits::default()).await;
    let a = servers::get(w.addr, "http://other.test/", "other.test").await;
    assert_eq!(
        (a.status, a.body),
        (403, refused("host \"other.test\" is not in the allow list"))
    );
    let (_, a) = servers::connect(w.addr, "other.test:443").await;
    assert_eq!(
        (a.status, a.body),
        (403, refused("host \"other.test\" is not in the allow list"))
    );
    assert_eq!(w.dns.count("other.test"), 0, "{:?}", w.dns.names());
});

net_test!(a_raw_address_outside_the_list_is_refused, |srv| {
    let w = world(&srv, default_policy(), Limits::default()).await;
    let (_, a) = servers::connect(w.addr, &format!("{SRV}:443")).await;
    assert_eq!(
        (a.status, a.body),
        (403, refused(&format!("address {SRV} is not in the allow list")))
    );
    let a = servers::get(w.addr, &format!("http://{SRV}/"), SRV).await;
    assert_eq!(
        (a.status, a.body),
        (403, refused(&format!("address {SRV} is not in the allow list")))
    );
    // Listed, the same address is reachable: the refusal was the policy's.
    w.proxy.update_policy(allow(&["198.51.100.0/24:80"]));
    let a = servers::get(w.addr, &format!("http://{SRV}/"), SRV).await;
    assert_eq!((a.status, a.body), (200, format!("hello from {SRV}")));
});

net_test!(a_port_not_listed_is_refused, |srv| {
    let w = world(&srv, default_policy(), Limits::default()).await;
    let (_, a) = servers::connect(w.addr, "tls.test:8080").await;
    assert_eq!(
        (a.status, a.body),
        (403, refused("port 8080 is not allowed for host \"tls.test\""))
    );
    w.proxy.update_policy(allow(&["web.test:80"]));
    let a = servers::get(w.addr, "http://web.test:8080/", "web.test:8080").await;
    assert_eq!(
        (a.status, a.body),
        (403, refused("port 8080 is not allowed for host \"web.test\""))
    );
});

net_test!(a_tls_server_name_other_than_the_connect_host_is_refused, |srv| {
    let w = world(&srv, allow(&["tls.test:443"]), Limits::default()).await;
    let (s, a) = servers::connect(w.addr, "tls.test:443").await;
    assert_eq!(a.status, 200);
    let other = rustls::pki_types::ServerName::try_from("other.test").unwrap();
    let e = servers::tls_client(&w.tls.cert).connect(other, s).await.unwrap_err();
    assert!(e.to_string().contains("AccessDenied"), "{e}");
    assert_eq!(w.tls.handshakes.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Not TLS at all through the tunnel: closed without a byte upstream.
    let (mut s, a) = servers::connect(w.addr, "tls.test:443").await;
    assert_eq!(a.status, 200);
    s.write_all(b"GET / HTTP/1.1\r\nHost: tls.test\r\n\r\n").await.unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).await.unwrap();
    assert_eq!(
        got,
        [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 49],
        "a TLS access_denied alert"
    );
});

net_test!(a_plain_request_whose_host_header_differs_is_refused, |srv| {
    let w = world(&srv, default_policy(), Limits::default()).await;
    let a = servers::get(w.addr, "http://web.test/", "other.test").await;
    assert_eq!(
        (a.status, a.body),
        (
            403,
            refused("the Host header \"other.test\" does not match the request's host \"web.test\"")
        )
    );
});

net_test!(an_allowed_name_rebinding_to_a_private_address_is_refused, |srv| {
    let w = world(&srv, default_policy(), Limits::default()).await;
    let text = refused(&format!(
        "host \"rebind.test\" resolves only to denied addresses (address {SRV_PRIVATE} is in the private range 10.0.0.0/8)"
    ));
    let a = servers::get(w.addr, "http://rebind.test/", "rebind.test").await;
    assert_eq!((a.status, a.body), (403, text.clone()));
    let (_, a) = servers::connect(w.addr, "rebind.test:80").await;
    assert_eq!((a.status, a.body), (403, text));
    // A CIDR inside the private range names it explicitly: then it is reachable.
    w.proxy.update_policy(allow(&["rebind.test", "10.200.77.0/24"]));
    let a = servers::get(w.addr, "http://rebind.test/", "rebind.test").await;
    assert_eq!((a.status, a.body.as_str()), (200, "hello from rebind.test"));
});

net_test!(the_metadata_address_is_refused_under_open, |srv| {
    let w = world(&srv, Policy::new(Egress::Open, &[]).unwrap(), Limits::default()).await;
    let text = refused("address 169.254.169.254 is in the cloud metadata range 169.254.169.254/32");
    let a = servers::get(w.addr, "http://169.254.169.254/latest/meta-data/", "169.254.169.254").await;
    assert_eq!((a.status, a.body), (403, text.clone()));
    let (_, a) = servers::connect(w.addr, "169.254.169.254:80").await;
    assert_eq!((a.status, a.body), (403, text.clone()));
    let (_, a) = servers::connect(w.addr, "[::ffff:169.254.169.254]:80").await;
    assert_eq!((a.status, a.body), (403, text));
    let a = servers::get(w.addr, "http://meta.test/", "meta.test").await;
    assert_eq!(
        (a.status, a.body),
        (
            403,
            refused(
                "host \"meta.test\" resolves only to denied addresses (address 169.254.169.254 is in the cloud metadata range 169.254.169.254/32)"
            )
        )
    );
    // Open still reaches a public-looking name.
    let a = servers::get(w.addr, "http://other.test/", "other.test").await;
    assert_eq!((a.status, a.body.as_str()), (200, "hello from other.test"));
});

async fn ask_udp(stub: SocketAddr, name: &str, rtype: RecordType) -> Message {
    let u = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    u.send_to(&servers::dns_query(name, rtype), stub).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = u.recv(&mut buf).await.unwrap();
    Message::from_vec(&buf[..n]).unwrap()
}

async fn ask_tcp(stub: SocketAddr, name: &str) -> Message {
    let mut s = tokio::net::TcpStream::connect(stub).await.unwrap();
    let q = servers::dns_query(name, RecordType::A);
    s.write_all(&(q.len() as u16).to_be_bytes()).await.unwrap();
    s.write_all(&q).await.unwrap();
    let mut len = [0u8; 2];
    s.read_exact(&mut len).await.unwrap();
    let mut a = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut a).await.unwrap();
    Message::from_vec(&a).unwrap()
}

fn a_records(m: &Message) -> Vec<String> {
    m.answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::A(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect()
}

net_test!(the_dns_stub_answers_allowed_names_and_never_forwards_others, |srv| {
    let w = world(&srv, default_policy(), Limits::default()).await;
    let stub = w.proxy.dns_stub();
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (uaddr, taddr) = (udp.local_addr().unwrap(), tcp.local_addr().unwrap());
    let s2 = stub.clone();
    tokio::spawn(async move { stub.serve_udp(udp).await });
    tokio::spawn(async move { s2.serve_tcp(tcp).await });
    let m = ask_udp(uaddr, "web.test", RecordType::A).await;
    assert_eq!(
        (m.response_code(), a_records(&m)),
        (ResponseCode::NoError, vec![SRV.to_string()])
    );
    let m = ask_tcp(taddr, "tls.test").await;
    assert_eq!(
        (m.response_code(), a_records(&m)),
        (ResponseCode::NoError, vec![SRV.to_string()])
    );
    for name in ["secret-0123abcd.exfil.test", "other.test"] {
        let m = ask_udp(uaddr, name, RecordType::A).await;
        assert_eq!(m.response_code(), ResponseCode::Refused, "{name}");
        let m = ask_tcp(taddr, name).await;
        assert_eq!(m.response_code(), ResponseCode::Refused, "{name}");
    }
    let m = ask_udp(uaddr, "web.test", RecordType::TXT).await;
    assert_eq!((m.response_code(), m.answers().len()), (ResponseCode::NoError, 0));
    // Rebinding: the allowed name's only address is private, so it is refused.
    let m = ask_udp(uaddr, "rebind.test", RecordType::A).await;
    assert_eq!(m.response_code(), ResponseCode::Refused);
    let mut asked = w.dns.names();
    asked.sort();
    asked.dedup();
    assert_eq!(
        asked,
        ["rebind.test", "tls.test", "web.test"],
        "only allowed names went upstream"
    );
});

net_test!(a_live_update_cuts_an_open_tunnel_it_denies, |srv| {
    let w = world(&srv, allow(&["tls.test:443", "web.test"]), Limits::default()).await;
    let (s, a) = servers::connect(w.addr, "tls.test:443").await;
    assert_eq!(a.status, 200);
    let name = rustls::pki_types::ServerName::try_from("tls.test").unwrap();
    let mut tls = servers::tls_client(&w.tls.cert).connect(name, s).await.unwrap();
    assert_eq!(servers::get_on(&mut tls, "tls.test", "/").await.status, 200);
    // An update that still allows it leaves it open.
    w.proxy.update_policy(allow(&["tls.test", "web.test"]));
    assert_eq!(servers::get_on(&mut tls, "tls.test", "/").await.status, 200);
    w.proxy.update_policy(allow(&["web.test"]));
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), tls.read_to_end(&mut rest)).await;
    let read = read.expect("the tunnel was not cut");
    assert!(read.is_err() || rest.is_empty(), "{read:?} {rest:?}");
    // New connections see the new policy at once.
    let (_, a) = servers::connect(w.addr, "tls.test:443").await;
    assert_eq!(
        (a.status, a.body),
        (403, refused("host \"tls.test\" is not in the allow list"))
    );
});

net_test!(connections_over_the_bound_get_the_exact_text, |srv| {
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let w = world(&srv, default_policy(), limits).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = tokio::net::TcpStream::connect(w.addr).await.unwrap();
        // A whole answer proves the proxy admitted (and now holds) the connection.
        assert_eq!(
            servers::get_on(&mut s, "web.test", "http://web.test/").await.status,
            200
        );
        held.push(s);
    }
    let mut s = tokio::net::TcpStream::connect(w.addr).await.unwrap();
    let a = servers::read_answer(&mut s).await;
    assert_eq!((a.status, a.body), (503, envrt_egress::too_many_connections_text(2)));
    // A client that sent its request first still reads the whole answer.
    let mut s = tokio::net::TcpStream::connect(w.addr).await.unwrap();
    s.write_all(b"GET http://web.test/ HTTP/1.1\r\nHost: web.test\r\n\r\n")
        .await
        .unwrap();
    let a = servers::read_answer(&mut s).await;
    assert_eq!((a.status, a.body), (503, envrt_egress::too_many_connections_text(2)));
    assert_eq!(
        envrt_egress::too_many_connections_text(2),
        "envrt egress: too many connections (the limit is 2)\n"
    );
});

net_test!(header_count_and_header_time_are_bounded, |srv| {
    let limits = Limits {
        max_headers: 8,
        header_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let w = world(&srv, default_policy(), limits).await;
    let mut s = tokio::net::TcpStream::connect(w.addr).await.unwrap();
    let extra: String = (0..20).map(|i| format!("x-h{i}: v\r\n")).collect();
    s.write_all(format!("GET http://web.test/ HTTP/1.1\r\nHost: web.test\r\n{extra}\r\n").as_bytes())
        .await
        .unwrap();
    assert_eq!(servers::read_answer(&mut s).await.status, 431);
    // One header longer than the head bound.
    let mut s = tokio::net::TcpStream::connect(w.addr).await.unwrap();
    let long = "v".repeat(20 * 1024);
    let req = format!("GET http://web.test/ HTTP/1.1\r\nHost: web.test\r\nx-long: {long}\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    assert_eq!(servers::read_answer(&mut s).await.status, 431);
    // A client that sends nothing is closed by the proxy (the read ends, no timing asserted).
    let mut idle = tokio::net::TcpStream::connect(w.addr).await.unwrap();
    let mut got = Vec::new();
    let end = tokio::time::timeout(Duration::from_secs(60), idle.read_to_end(&mut got)).await;
    assert!(end.is_ok(), "the proxy kept a silent client past its header timeout");
});

net_test!(
    an_upstream_head_over_the_bound_is_refused_and_a_large_body_passes_whole,
    |srv| {
        let w = world(&srv, default_policy(), Limits::default()).await;
        let a = servers::get(w.addr, "http://web.test/head/1000", "web.test").await;
        assert_eq!((a.status, a.body.as_str()), (200, "padded"));
        let a = servers::get(w.addr, "http://web.test/head/20000", "web.test").await;
        let text = format!("envrt egress: upstream {SRV}:80: the response head is larger than 16384 bytes\n");
        assert_eq!((a.status, a.body), (502, text));
        // A body many times the proxy's read buffer arrives whole.
        let mut s = tokio::net::TcpStream::connect(w.addr).await.unwrap();
        let n = 8 * 1024 * 1024;
        let req = format!("GET http://web.test/bytes/{n} HTTP/1.1\r\nHost: web.test\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        assert_eq!(drain(&mut s).await, n);
    }
);

net_test!(the_proxy_serves_a_unix_socket, |srv| {
    let w = world(&srv, default_policy(), Limits::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("egress.sock");
    let l = tokio::net::UnixListener::bind(&path).unwrap();
    let p = w.proxy.clone();
    tokio::spawn(async move { p.serve_unix(l).await });
    let mut s = tokio::net::UnixStream::connect(&path).await.unwrap();
    let a = servers::get_on(&mut s, "web.test", "http://web.test/").await;
    assert_eq!((a.status, a.body.as_str()), (200, "hello from web.test"));
    let a = servers::get_on(&mut s, "other.test", "http://other.test/").await;
    assert_eq!(
        (a.status, a.body),
        (403, refused("host \"other.test\" is not in the allow list"))
    );
});

net_test!(a_silent_tunnel_and_a_missing_client_hello_are_closed, |srv| {
    let limits = Limits {
        idle_timeout: Duration::from_secs(1),
        hello_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let w = world(&srv, default_policy(), limits).await;
    // No ClientHello: the proxy gives up and closes (with the alert).
    let (mut s, a) = servers::connect(w.addr, "tls.test:443").await;
    assert_eq!(a.status, 200);
    let mut got = Vec::new();
    let end = tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut got)).await;
    assert_eq!(end.expect("not closed").unwrap(), 7, "{got:?}");
    // An established tunnel that then passes nothing is closed too.
    let (s, _) = servers::connect(w.addr, "tls.test:443").await;
    let name = rustls::pki_types::ServerName::try_from("tls.test").unwrap();
    let mut tls = servers::tls_client(&w.tls.cert).connect(name, s).await.unwrap();
    let mut rest = Vec::new();
    let end = tokio::time::timeout(Duration::from_secs(60), tls.read_to_end(&mut rest)).await;
    assert!(end.is_ok(), "an idle tunnel stayed open");
});

/// Reads one response on `s` to its end, returning the body's byte count.
async fn drain<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> usize {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).await.unwrap(), 1);
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0;
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return total,
            Ok(n) => total += n,
        }
    }
}

/// Runs `serve` forever on its own thread and runtime inside namespace `ns` (a by-hand
/// measurement only: the thread ends with the test process).
fn spawn_in<T: Send + 'static, Fut: std::future::Future<Output = ()> + 'static>(
    ns: String,
    serve: impl FnOnce(std::sync::mpsc::Sender<T>) -> Fut + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let f = std::fs::File::open(format!("/var/run/netns/{ns}")).unwrap();
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(serve(tx));
    });
    rx.recv().unwrap()
}

/// Not a test of speed (nothing is asserted about time): prints MiB/s of a 128 MiB download
/// direct and through the proxy, plain HTTP and TLS, with the servers, the proxy and the
/// client each on a thread of its own. Run with `--ignored --nocapture`.
#[test]
#[ignore = "a measurement, run by hand"]
fn measure_a_download_direct_and_through_the_proxy() {
    let Some(net) = Net::new() else { return };
    let cert = spawn_in(net.srv.clone(), |tx| async move {
        let l = |a: String| {
            let l = std::net::TcpListener::bind(&a).unwrap();
            l.set_nonblocking(true).unwrap();
            l
        };
        servers::http_server(l(format!("{SRV}:80")));
        let tls = servers::tls_server(l(format!("{SRV}:443")), &["tls.test"]);
        let _dns = servers::dns_server(
            {
                let u = std::net::UdpSocket::bind(format!("{SRV}:53")).unwrap();
                u.set_nonblocking(true).unwrap();
                u
            },
            HOSTS,
        );
        tx.send(tls.cert).unwrap();
        std::future::pending::<()>().await;
    });
    let proxy_addr = spawn_in(net.cli.clone(), |tx| async move {
        let resolver = Resolver::new(format!("{SRV}:53").parse().unwrap(), Duration::from_secs(5));
        let proxy = EgressProxy::new(allow(&["web.test", "tls.test:443"]), resolver, Limits::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        tx.send(listener.local_addr().unwrap()).unwrap();
        let _ = proxy.serve_tcp(listener).await;
    });
    net.run(move |_| async move {
        const N: usize = 128 * 1024 * 1024;
        let path = format!("/bytes/{N}");
        let mib = |n: usize, t: std::time::Instant| n as f64 / 1048576.0 / t.elapsed().as_secs_f64();
        let name = rustls::pki_types::ServerName::try_from("tls.test").unwrap();
        let client = servers::tls_client(&cert);
        for round in 0..3 {
            let t = std::time::Instant::now();
            let mut s = tokio::net::TcpStream::connect(format!("{SRV}:80")).await.unwrap();
            let req = format!("GET {path} HTTP/1.1\r\nHost: web.test\r\nConnection: close\r\n\r\n");
            s.write_all(req.as_bytes()).await.unwrap();
            assert_eq!(drain(&mut s).await, N);
            let direct = mib(N, t);
            let t = std::time::Instant::now();
            let mut s = tokio::net::TcpStream::connect(proxy_addr).await.unwrap();
            let req = format!("GET http://web.test{path} HTTP/1.1\r\nHost: web.test\r\nConnection: close\r\n\r\n");
            s.write_all(req.as_bytes()).await.unwrap();
            assert_eq!(drain(&mut s).await, N);
            let proxied = mib(N, t);
            let req = format!("GET {path} HTTP/1.1\r\nHost: tls.test\r\nConnection: close\r\n\r\n");
            let t = std::time::Instant::now();
            let s = tokio::net::TcpStream::connect(format!("{SRV}:443")).await.unwrap();
            let mut tls = client.connect(name.clone(), s).await.unwrap();
            tls.write_all(req.as_bytes()).await.unwrap();
            assert_eq!(drain(&mut tls).await, N);
            let tls_direct = mib(N, t);
            let t = std::time::Instant::now();
            let (s, _) = servers::connect(proxy_addr, "tls.test:443").await;
            let mut tls = client.connect(name.clone(), s).await.unwrap();
            tls.write_all(req.as_bytes()).await.unwrap();
            assert_eq!(drain(&mut tls).await, N);
            let tls_proxied = mib(N, t);
            println!(
                "round {round}: http direct {direct:.0} MiB/s, via proxy {proxied:.0} MiB/s ({:.2}x); \
                 https direct {tls_direct:.0} MiB/s, via CONNECT {tls_proxied:.0} MiB/s ({:.2}x)",
                proxied / direct,
                tls_proxied / tls_direct
            );
        }
    });
}

net_test!(a_live_update_cuts_a_plain_response_it_denies, |srv| {
    let w = world(&srv, default_policy(), Limits::default()).await;
    const N: usize = 1024 * 1024 * 1024;
    let mut s = tokio::net::TcpStream::connect(w.addr).await.unwrap();
    let req = format!("GET http://web.test/bytes/{N} HTTP/1.1\r\nHost: web.test\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut first = vec![0u8; 64 * 1024];
    let mut got = s.read(&mut first).await.unwrap();
    assert!(got > 0);
    w.proxy.update_policy(allow(&["tls.test:443"]));
    let mut buf = vec![0u8; 256 * 1024];
    let cut = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got += n,
            }
        }
    })
    .await;
    assert!(cut.is_ok(), "the response was not cut");
    assert!(got < N / 2, "{got} of {N} bytes arrived after the cut");
});

net_test!(ipv6_targets_follow_the_same_rules, |srv| {
    let w = world(&srv, allow(&["web6.test", "[2001:db8:77::/64]:80"]), Limits::default()).await;
    // A name with only an AAAA record is reached at the address the proxy resolved.
    let a = servers::get(w.addr, "http://web6.test/", "web6.test").await;
    assert_eq!((a.status, a.body.as_str()), (200, "hello from web6.test"));
    let url = format!("http://[{SRV6}]/");
    let a = servers::get(w.addr, &url, &format!("[{SRV6}]")).await;
    assert_eq!((a.status, a.body), (200, format!("hello from [{SRV6}]")));
    let (_, a) = servers::connect(w.addr, &format!("[{SRV6}]:443")).await;
    assert_eq!(
        (a.status, a.body),
        (403, refused(&format!("port 443 is not allowed for host \"{SRV6}\"")))
    );
    let (_, a) = servers::connect(w.addr, "[2001:db8:78::2]:80").await;
    assert_eq!(
        (a.status, a.body),
        (403, refused("address 2001:db8:78::2 is not in the allow list"))
    );
    w.proxy.update_policy(Policy::new(Egress::Open, &[]).unwrap());
    for (target, text) in [
        ("[fd00::1]:443", "address fd00::1 is in the unique-local range fc00::/7"),
        ("[fe80::1]:443", "address fe80::1 is in the link-local range fe80::/10"),
        ("[::1]:443", "address ::1 is in the loopback range ::1/128"),
        (
            "[fd00:ec2::254]:80",
            "address fd00:ec2::254 is in the cloud metadata range fd00:ec2::254/128",
        ),
    ] {
        let (_, a) = servers::connect(w.addr, target).await;
        assert_eq!((a.status, a.body), (403, refused(text)), "{target}");
    }
});
