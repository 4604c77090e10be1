//! One proxied request: CONNECT (checked, resolved, connected, then tunnelled) or a plain
//! HTTP request with an absolute URI (checked, resolved, forwarded with hyper's client).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::header::{HOST, HeaderName};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use crate::policy::{Policy, Refusal, normalize};
use crate::proxy::Shared;

pub(crate) type Body = BoxBody<Bytes, hyper::Error>;

/// What a client asked to reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// A host name (normalized).
    Name(String),
    /// A raw address.
    Ip(IpAddr),
}

impl Target {
    pub(crate) fn parse(host: &str) -> Self {
        let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        match bare.parse::<IpAddr>() {
            Ok(ip) => Target::Ip(ip),
            Err(_) => Target::Name(normalize(host)),
        }
    }

    /// Whether `policy` still allows a connection to this target at `addr`.
    pub(crate) fn allowed(&self, policy: &Policy, addr: SocketAddr) -> Result<(), Refusal> {
        match self {
            Target::Name(n) => {
                policy.check_name(n, Some(addr.port()))?;
                policy.check_resolved(addr.ip(), Some(addr.port()))
            }
            Target::Ip(ip) => policy.check_ip(*ip, addr.port()),
        }
    }
}

/// A request the proxy does not carry out: status and the exact body text.
pub(crate) struct Refused(StatusCode, String);

impl Refused {
    pub(crate) fn policy(r: impl std::fmt::Display) -> Self {
        Refused(StatusCode::FORBIDDEN, format!("envrt egress: refused: {r}\n"))
    }
    pub(crate) fn new(status: StatusCode, text: String) -> Self {
        Refused(status, text)
    }
    pub(crate) fn status(&self) -> StatusCode {
        self.0
    }
    pub(crate) fn text(&self) -> &str {
        &self.1
    }
    pub(crate) fn bad_request(what: &str) -> Self {
        Refused(StatusCode::BAD_REQUEST, format!("envrt egress: bad request: {what}\n"))
    }
    fn bad_gateway(what: impl std::fmt::Display) -> Self {
        Refused(StatusCode::BAD_GATEWAY, format!("envrt egress: {what}\n"))
    }
    pub(crate) fn into_response(self) -> Response<Body> {
        let mut resp = Response::new(full(self.1));
        *resp.status_mut() = self.0;
        resp.headers_mut()
            .insert(hyper::header::CONTENT_TYPE, "text/plain".parse().expect("literal"));
        resp
    }
}

fn full(text: String) -> Body {
    Full::new(Bytes::from(text)).map_err(|never| match never {}).boxed()
}

pub(crate) async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    permit: Arc<OwnedSemaphorePermit>,
) -> Response<Body> {
    let result = if req.method() == Method::CONNECT {
        connect(req, shared, permit).await
    } else {
        forward(req, shared).await
    };
    result.unwrap_or_else(|refused| {
        tracing::info!(status = refused.0.as_u16(), "egress proxy: {}", refused.1.trim_end());
        refused.into_response()
    })
}

/// Decides and resolves: the one address the connection goes to (never resolved again).
pub(crate) async fn decide(shared: &Shared, target: &Target, port: u16) -> Result<SocketAddr, Refused> {
    let policy = shared.policy.borrow().clone();
    match target {
        Target::Ip(ip) => {
            policy.check_ip(*ip, port).map_err(Refused::policy)?;
            Ok(SocketAddr::new(*ip, port))
        }
        Target::Name(name) => {
            policy.check_name(name, Some(port)).map_err(Refused::policy)?;
            let addrs = shared.resolver.resolve(name).await.map_err(Refused::bad_gateway)?;
            let mut first_refusal = None;
            for ip in addrs {
                match policy.check_resolved(ip, Some(port)) {
                    Ok(()) => return Ok(SocketAddr::new(ip, port)),
                    Err(r) => {
                        first_refusal.get_or_insert(r);
                    }
                }
            }
            let why = first_refusal.map(|r| r.to_string()).unwrap_or_default();
            Err(Refused::policy(format!(
                "host \"{name}\" resolves only to denied addresses ({why})"
            )))
        }
    }
}

async fn dial(shared: &Shared, addr: SocketAddr) -> Result<TcpStream, Refused> {
    match tokio::time::timeout(shared.limits.connect_timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(e)) => Err(Refused::bad_gateway(format!("cannot connect to {addr}: {e}"))),
        Err(_) => Err(Refused::bad_gateway(format!("cannot connect to {addr}: timed out"))),
    }
}

async fn connect(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    permit: Arc<OwnedSemaphorePermit>,
) -> Result<Response<Body>, Refused> {
    let Some(auth) = req.uri().authority().cloned() else {
        return Err(Refused::bad_request("CONNECT needs host:port"));
    };
    let Some(port) = auth.port_u16() else {
        return Err(Refused::bad_request("CONNECT needs host:port"));
    };
    let target = Target::parse(auth.host());
    let addr = decide(&shared, &target, port).await?;
    let upstream = dial(&shared, addr).await?;
    // A host that carries a credential is terminated here (`broker`); every other stays a
    // plain tunnel whose bytes the proxy never reads past the ClientHello.
    let brokered = match (&target, &shared.broker) {
        (Target::Name(name), Some(broker)) if broker.brokers(name, port) => Some(name.clone()),
        _ => None,
    };
    tokio::spawn(async move {
        match hyper::upgrade::on(req).await {
            Ok(upgraded) => match brokered {
                Some(host) => {
                    crate::broker::run(TokioIo::new(upgraded), upstream, host, port, addr, shared, permit).await;
                }
                None => crate::tunnel::run(TokioIo::new(upgraded), upstream, target, addr, shared, permit).await,
            },
            Err(e) => tracing::debug!("egress proxy: CONNECT upgrade failed: {e}"),
        }
    });
    Ok(Response::new(full(String::new())))
}

pub(crate) fn strip_hop(headers: &mut hyper::HeaderMap) {
    for h in crate::hop::HOP {
        headers.remove(HeaderName::from_static(h));
    }
}

async fn forward(mut req: Request<Incoming>, shared: Arc<Shared>) -> Result<Response<Body>, Refused> {
    let uri = req.uri().clone();
    if uri.scheme_str() != Some("http") {
        return Err(Refused::bad_request(
            "a proxied request needs an absolute http:// URI (use CONNECT for https)",
        ));
    }
    let Some(auth) = uri.authority().cloned() else {
        return Err(Refused::bad_request("the request URI has no host"));
    };
    let port = auth.port_u16().unwrap_or(80);
    let target = Target::parse(auth.host());
    if let (Target::Name(name), Some(broker)) = (&target, &shared.broker)
        && broker.names(name)
    {
        return Err(Refused::policy(crate::broker::plain_refusal(name)));
    }
    if let Some(host) = req.headers().get(HOST) {
        let text = host.to_str().unwrap_or("");
        let (h, p) = match text.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(':') && p.bytes().all(|b| b.is_ascii_digit()) => (h, p.parse::<u16>().ok()),
            _ => (text, Some(80)),
        };
        if Target::parse(h) != target || p != Some(port) {
            return Err(Refused::policy(format!(
                "the Host header \"{text}\" does not match the request's host \"{auth}\""
            )));
        }
    }
    let addr = decide(&shared, &target, port).await?;
    let stream = dial(&shared, addr).await?;
    let (mut sender, conn) = crate::forwarded::client_builder(&shared.limits)
        .handshake::<_, Incoming>(TokioIo::new(stream))
        .await
        .map_err(|e| Refused::bad_gateway(format!("upstream {addr}: {e}")))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("egress proxy: upstream connection ended: {e}");
        }
    });
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    *req.uri_mut() = path.parse().expect("a path from a parsed URI");
    strip_hop(req.headers_mut());
    if !req.headers().contains_key(HOST) {
        let host = auth.as_str().parse().map_err(|_| Refused::bad_request("bad host"))?;
        req.headers_mut().insert(HOST, host);
    }
    let mut resp = sender
        .send_request(req)
        .await
        .map_err(|e| Refused::bad_gateway(format!("upstream {addr}: {e}")))?;
    crate::forwarded::check_head(&resp, &shared.limits, addr)?;
    strip_hop(resp.headers_mut());
    let policy = shared.policy.subscribe();
    let idle = shared.limits.idle_timeout;
    Ok(resp.map(|body| crate::forwarded::cut_on_update(body, policy, target, addr, idle)))
}
