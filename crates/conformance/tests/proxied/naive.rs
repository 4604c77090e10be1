//! A naive egress proxy, the fault model of the bypass checks: it judges each request by
//! the policy, but by a name the client chose (the TLS server name of a CONNECT, the `Host`
//! header of a plain request), or it follows redirects itself. One request per client
//! connection; names resolved through the test host's DNS server; refusals are `403`.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};

use envrt_egress::Resolver;
use envrt_runtime_core::network::Policy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::ProxyFault;

pub(crate) struct Naive {
    policy: RwLock<Arc<Policy>>,
    resolver: Resolver,
    fault: ProxyFault,
}

/// Reads until the end of a request or response head (at most 16 KiB); the head, and what
/// came after it.
async fn read_head(io: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while buf.len() < 16 * 1024 {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Some((String::from_utf8_lossy(&buf).into_owned(), rest));
        }
        let n = io.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    None
}

/// The value of header `name` in `head`.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n")
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
}

/// `host[:port]` split, `default` when no port is given.
fn host_port(authority: &str, default: u16) -> (String, u16) {
    match authority.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => (host.to_owned(), port.parse().unwrap_or(default)),
        _ => (authority.to_owned(), default),
    }
}

/// The server name of a TLS ClientHello record, when `hello` holds one whole.
fn server_name(hello: &[u8]) -> Option<String> {
    let at = |i: usize| hello.get(i).copied().map(usize::from);
    let be16 = |i: usize| Some(at(i)? << 8 | at(i + 1)?);
    if at(0)? != 0x16 || at(5)? != 1 {
        return None;
    }
    // Record (5) and handshake (4) heads, version (2), random (32), then the session id,
    // cipher suites and compression methods, each after its length.
    let mut i = 5 + 4 + 2 + 32;
    i += 1 + at(i)?;
    i += 2 + be16(i)?;
    i += 1 + at(i)?;
    let end = i + 2 + be16(i)?;
    i += 2;
    while i + 4 <= end {
        let (kind, len) = (be16(i)?, be16(i + 2)?);
        if kind == 0 {
            let name_len = be16(i + 4 + 3)?;
            let start = i + 4 + 5;
            return hello
                .get(start..start + name_len)
                .map(|n| String::from_utf8_lossy(n).into_owned());
        }
        i += 4 + len;
    }
    None
}

impl Naive {
    pub(crate) fn new(policy: Policy, resolver: Resolver, fault: ProxyFault) -> Self {
        Naive {
            policy: RwLock::new(Arc::new(policy)),
            resolver,
            fault,
        }
    }

    /// Replaces the policy for new connections.
    pub(crate) fn update(&self, policy: Policy) {
        *self.policy.write().unwrap() = Arc::new(policy);
    }

    fn allows(&self, host: &str, port: u16) -> bool {
        let policy = self.policy.read().unwrap().clone();
        match host.trim_matches(['[', ']']).parse::<IpAddr>() {
            Ok(ip) => policy.check_ip(ip, port).is_ok(),
            Err(_) => policy.check_name(host, Some(port)).is_ok(),
        }
    }

    async fn connect(&self, host: &str, port: u16) -> Option<TcpStream> {
        let ip = match host.trim_matches(['[', ']']).parse::<IpAddr>() {
            Ok(ip) => ip,
            Err(_) => *self.resolver.resolve(host).await.ok()?.first()?,
        };
        TcpStream::connect(SocketAddr::new(ip, port)).await.ok()
    }

    /// Serves one client connection.
    pub(crate) async fn serve(self: Arc<Self>, mut io: TcpStream) {
        let Some((head, rest)) = read_head(&mut io).await else {
            return;
        };
        let mut words = head.split(' ');
        let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        if method == "CONNECT" {
            self.tunnel(io, target, rest).await;
            return;
        }
        if let Some(url) = target.strip_prefix("http://") {
            let (authority, path) = url.split_at(url.find('/').unwrap_or(url.len()));
            let path = if path.is_empty() { "/" } else { path };
            let sent_host = header(&head, "Host").unwrap_or(authority).to_owned();
            let answer = self.fetch(authority, path, &sent_host).await;
            let _ = io.write_all(&answer).await;
        }
        let _ = io.shutdown().await;
    }

    async fn tunnel(&self, mut io: TcpStream, target: &str, mut hello: Vec<u8>) {
        let (host, port) = host_port(target, 443);
        let _ = io.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await;
        let mut chunk = [0u8; 16 * 1024];
        if let Ok(n) = io.read(&mut chunk).await {
            hello.extend_from_slice(&chunk[..n]);
        }
        let judged = match self.fault {
            ProxyFault::TrustsSni => server_name(&hello).unwrap_or_else(|| host.clone()),
            _ => host.clone(),
        };
        if !self.allows(&judged, port) {
            return;
        }
        let Some(mut upstream) = self.connect(&host, port).await else {
            return;
        };
        if upstream.write_all(&hello).await.is_ok() {
            let _ = tokio::io::copy_bidirectional(&mut io, &mut upstream).await;
        }
    }

    /// The response to `GET path` on `authority` sent with `Host: sent_host`.
    async fn fetch(&self, authority: &str, path: &str, sent_host: &str) -> Vec<u8> {
        let (host, port) = host_port(authority, 80);
        let judged = match self.fault {
            ProxyFault::TrustsHostHeader => host_port(sent_host, 80).0,
            _ => host.clone(),
        };
        if !self.allows(&judged, port) {
            return refused(&judged);
        }
        let mut answer = self.get(&host, port, path, sent_host).await;
        if self.fault == ProxyFault::FollowsRedirects
            && let Some(next) = redirect(&answer)
            && let Some(url) = next.strip_prefix("http://")
        {
            let (authority, path) = url.split_at(url.find('/').unwrap_or(url.len()));
            let (host, port) = host_port(authority, 80);
            answer = self
                .get(&host, port, if path.is_empty() { "/" } else { path }, authority)
                .await;
        }
        answer
    }

    async fn get(&self, host: &str, port: u16, path: &str, sent_host: &str) -> Vec<u8> {
        let Some(mut upstream) = self.connect(host, port).await else {
            return b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec();
        };
        let request = format!("GET {path} HTTP/1.1\r\nHost: {sent_host}\r\nConnection: close\r\n\r\n");
        let mut answer = Vec::new();
        if upstream.write_all(request.as_bytes()).await.is_ok() {
            let _ = upstream.take(1 << 20).read_to_end(&mut answer).await;
        }
        answer
    }
}

fn refused(host: &str) -> Vec<u8> {
    let body = format!("envrt egress: refused: host \"{host}\" is not in the allow list\n");
    format!(
        "HTTP/1.1 403 Forbidden\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The `Location` of a 30x response.
fn redirect(answer: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(answer);
    let (head, _) = text.split_once("\r\n\r\n")?;
    if !head.split(' ').nth(1)?.starts_with("30") {
        return None;
    }
    header(head, "Location").map(str::to_owned)
}
