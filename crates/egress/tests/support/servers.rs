//! The test hosts' servers (HTTP, TLS, DNS, each counting what reaches it) and the clients
//! the tests speak to the proxy with.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

type Body = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

/// `/bytes/N` streams N bytes; `/head/N` answers with a header of N bytes; anything else
/// answers `hello from HOST`.
async fn service(req: Request<hyper::body::Incoming>) -> Result<Response<Body>, std::convert::Infallible> {
    if let Some(n) = req
        .uri()
        .path()
        .strip_prefix("/bytes/")
        .and_then(|n| n.parse::<usize>().ok())
    {
        let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
        let chunks = n / chunk.len();
        let stream = futures::stream::iter((0..chunks).map(move |_| Ok(Frame::data(chunk.clone()))));
        let mut resp = Response::new(StreamBody::new(stream).boxed());
        resp.headers_mut().insert("content-length", (chunks * 64 * 1024).into());
        return Ok(resp);
    }
    if let Some(n) = req
        .uri()
        .path()
        .strip_prefix("/head/")
        .and_then(|n| n.parse::<usize>().ok())
    {
        let mut resp = Response::new(Full::new(Bytes::from_static(b"padded")).boxed());
        resp.headers_mut().insert("x-pad", "p".repeat(n).parse().unwrap());
        return Ok(resp);
    }
    if req.uri().path() == "/redirect" {
        let mut resp = Response::new(Full::new(Bytes::new()).boxed());
        *resp.status_mut() = hyper::StatusCode::FOUND;
        resp.headers_mut()
            .insert("location", "http://other.test/".parse().unwrap());
        return Ok(resp);
    }
    let host = req
        .headers()
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string();
    Ok(Response::new(
        Full::new(Bytes::from(format!("hello from {host}"))).boxed(),
    ))
}

async fn serve_http<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(io: I) {
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), hyper::service::service_fn(service))
        .await;
}

/// Serves plain HTTP on `l`.
pub fn http_server(l: std::net::TcpListener) {
    let l = tokio::net::TcpListener::from_std(l).unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(serve_http(s));
        }
    });
}

/// A TLS server's certificate (for the client to trust) and its handshake count.
pub struct Tls {
    pub cert: rustls::pki_types::CertificateDer<'static>,
    pub handshakes: Arc<AtomicUsize>,
}

/// Serves HTTP over TLS on `l`, with a self-signed certificate for `names`.
pub fn tls_server(l: std::net::TcpListener, names: &[&str]) -> Tls {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let key = rcgen::generate_simple_self_signed(names).unwrap();
    let cert = key.cert.der().clone();
    let pkey = rustls::pki_types::PrivateKeyDer::Pkcs8(key.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], pkey)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let handshakes = Arc::new(AtomicUsize::new(0));
    let count = handshakes.clone();
    let l = tokio::net::TcpListener::from_std(l).unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let (acceptor, count) = (acceptor.clone(), count.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(s).await {
                    count.fetch_add(1, Ordering::SeqCst);
                    serve_http(tls).await;
                }
            });
        }
    });
    Tls { cert, handshakes }
}

/// A DNS server answering A queries from a fixed map; it records every name asked.
pub struct Dns {
    pub asked: Arc<Mutex<Vec<String>>>,
}

impl Dns {
    /// How many queries for `name` arrived.
    pub fn count(&self, name: &str) -> usize {
        self.asked.lock().unwrap().iter().filter(|n| n.as_str() == name).count()
    }
    /// Every name asked.
    pub fn names(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

pub fn dns_server(u: std::net::UdpSocket, map: &[(&str, &str)]) -> Dns {
    let map: HashMap<String, IpAddr> = map.iter().map(|(n, a)| (n.to_string(), a.parse().unwrap())).collect();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    let u = tokio::net::UdpSocket::from_std(u).unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, peer)) = u.recv_from(&mut buf).await {
            let Ok(q) = Message::from_vec(&buf[..n]) else { continue };
            let Some(query) = q.queries().first().cloned() else {
                continue;
            };
            let name = query.name().to_ascii().trim_end_matches('.').to_string();
            log.lock().unwrap().push(name.clone());
            let mut r = Message::new();
            r.set_id(q.id())
                .set_message_type(MessageType::Response)
                .set_op_code(OpCode::Query);
            r.add_query(query.clone());
            match map.get(&name) {
                Some(IpAddr::V4(v4)) if query.query_type() == RecordType::A => {
                    r.add_answer(Record::from_rdata(query.name().clone(), 60, RData::A(A(*v4))));
                }
                Some(IpAddr::V6(v6)) if query.query_type() == RecordType::AAAA => {
                    r.add_answer(Record::from_rdata(query.name().clone(), 60, RData::AAAA(AAAA(*v6))));
                }
                Some(_) => {}
                None => {
                    r.set_response_code(ResponseCode::NXDomain);
                }
            }
            let _ = u.send_to(&r.to_vec().unwrap(), peer).await;
        }
    });
    Dns { asked }
}

/// A DNS query's wire form.
pub fn dns_query(name: &str, rtype: RecordType) -> Vec<u8> {
    let mut m = Message::new();
    m.set_id(4242)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query);
    m.set_recursion_desired(true);
    m.add_query(Query::query(Name::from_ascii(format!("{name}.")).unwrap(), rtype));
    m.to_vec().unwrap()
}

/// An HTTP response as the test reads it.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// Reads a response head and (content-length) body from `s`.
pub async fn read_answer<S: AsyncRead + Unpin>(s: &mut S) -> Answer {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut b).await.unwrap();
        assert_eq!(
            n,
            1,
            "the connection closed inside a response head: {:?}",
            String::from_utf8_lossy(&head)
        );
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let status = head[9..12].parse().unwrap();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.unwrap();
    Answer {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// A plain proxied GET of `url` with the `Host` header `host`.
pub async fn get(proxy: SocketAddr, url: &str, host: &str) -> Answer {
    let mut s = tokio::net::TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("GET {url} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    read_answer(&mut s).await
}

/// CONNECT `target` through the proxy: the stream and the proxy's answer.
pub async fn connect(proxy: SocketAddr, target: &str) -> (tokio::net::TcpStream, Answer) {
    let mut s = tokio::net::TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let a = read_answer(&mut s).await;
    (s, a)
}

/// A TLS client trusting only `cert`.
pub fn tls_client(cert: &rustls::pki_types::CertificateDer<'static>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// One GET over an established (TLS) stream, keeping it open.
pub async fn get_on<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, host: &str, path: &str) -> Answer {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    read_answer(s).await
}
