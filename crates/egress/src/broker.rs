//! Credential brokering: a CONNECT to a host that carries a credential is not tunnelled but
//! terminated here (TLS with a leaf of the lease's CA for that one name), each request is
//! judged, given the real header value, and sent on over a second TLS connection to the
//! real host, verified against the system's and the configured roots. Responses come back
//! as they are: a redirect is the client's to follow (through the proxy, under the policy,
//! and without the credential unless the new host carries one).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::{HOST, HeaderName, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{Mutex, OwnedSemaphorePermit};

use crate::credential::Brokered;
use crate::handle::{Body, Refused, Target};
use crate::proxy::Shared;
use crate::tls::{LeaseCa, TlsError};

/// The credentials one proxy puts on requests, its lease's CA and the verifying client.
pub struct Broker {
    credentials: Vec<Brokered>,
    ca: LeaseCa,
    upstream: Arc<ClientConfig>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field(
                "hosts",
                &self.credentials.iter().map(|c| (&c.host, c.port)).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// A broker for `credentials`, with a new CA constrained to their hosts, verifying real
    /// hosts against the system's roots and the PEM certificates in `extra_roots`.
    pub fn new(credentials: Vec<Brokered>, extra_roots: Option<&Path>) -> Result<Broker, TlsError> {
        let mut hosts: Vec<String> = credentials.iter().map(|c| c.host.clone()).collect();
        hosts.sort();
        hosts.dedup();
        Ok(Broker {
            ca: LeaseCa::new(&hosts)?,
            upstream: crate::tls::upstream_config(extra_roots)?,
            credentials,
        })
    }

    /// The lease's CA certificate (PEM): what the lease's TLS clients must trust.
    pub fn ca_pem(&self) -> String {
        self.ca.cert_pem()
    }

    /// Whether CONNECTs to `host:port` are terminated here.
    pub(crate) fn brokers(&self, host: &str, port: u16) -> bool {
        self.credentials.iter().any(|c| c.host == host && c.port == port)
    }

    /// Whether any credential names `host` (at any port).
    pub(crate) fn names(&self, host: &str) -> bool {
        self.credentials.iter().any(|c| c.host == host)
    }

    fn for_host<'a>(&'a self, host: &'a str, port: u16) -> impl Iterator<Item = &'a Brokered> + 'a {
        self.credentials
            .iter()
            .filter(move |c| c.host == host && c.port == port)
    }
}

/// The text of a plain-HTTP request to a credentialed host (refused).
pub(crate) fn plain_refusal(host: &str) -> String {
    format!(
        "host \"{host}\" carries a brokered credential, so it is reached only over https (CONNECT); plain http is refused"
    )
}

/// Serves one intercepted CONNECT after its 200: TLS towards the client, then requests.
pub(crate) async fn run<C>(
    client: C,
    upstream: TcpStream,
    host: String,
    port: u16,
    addr: SocketAddr,
    shared: Arc<Shared>,
    permit: Arc<OwnedSemaphorePermit>,
) where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Some(broker) = shared.broker.clone() else { return };
    let limits = &shared.limits;
    let target = Target::Name(host.clone());
    let start = tokio::time::timeout(
        limits.hello_timeout,
        tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), client),
    )
    .await;
    let start = match start {
        Ok(Ok(start)) => start,
        _ => {
            tracing::info!("egress proxy: intercepted tunnel to {addr} refused: no whole ClientHello arrived");
            return;
        }
    };
    let sni = start.client_hello().server_name().map(str::to_ascii_lowercase);
    if let Err(refusal) = crate::tunnel::sni_fits(&target, sni.as_deref()) {
        tracing::info!("egress proxy: intercepted tunnel to {addr} refused: {refusal}");
        return;
    }
    let config = match broker.ca.server_config(&host) {
        Ok(config) => config,
        Err(e) => {
            tracing::warn!("egress proxy: {e}");
            return;
        }
    };
    let tls = match tokio::time::timeout(limits.hello_timeout, start.into_stream(config)).await {
        Ok(Ok(tls)) => tls,
        _ => {
            tracing::info!("egress proxy: the TLS handshake of the intercepted tunnel to {addr} failed");
            return;
        }
    };
    // The real host, verified, before the first request is read.
    let sender = connect_upstream(&shared, &broker, &host, upstream, addr).await;
    let sender = Arc::new(Mutex::new(sender));
    let builder = crate::proxy::server_builder(limits);
    let service = service_fn(move |req| {
        let (shared, broker, sender, host) = (shared.clone(), broker.clone(), sender.clone(), host.clone());
        let _permit = permit.clone();
        async move {
            let answer = request(req, &shared, &broker, &sender, &host, port, addr).await;
            Ok::<_, std::convert::Infallible>(answer.unwrap_or_else(|refused| {
                tracing::info!(
                    status = refused.status().as_u16(),
                    "egress proxy: {}",
                    refused.text().trim_end()
                );
                refused.into_response()
            }))
        }
    });
    if let Err(e) = builder.serve_connection(TokioIo::new(tls), service).await {
        tracing::debug!("egress proxy: intercepted connection ended: {e}");
    }
}

type Sender = Result<hyper::client::conn::http1::SendRequest<Incoming>, String>;

/// TLS to the real host (full verification) and an HTTP/1 client on it; the error is the
/// text each request will be answered with.
async fn connect_upstream(shared: &Shared, broker: &Broker, host: &str, tcp: TcpStream, addr: SocketAddr) -> Sender {
    let name = crate::tls::server_name(host).ok_or_else(|| format!("\"{host}\" is not a TLS server name"))?;
    let connector = tokio_rustls::TlsConnector::from(broker.upstream.clone());
    let tls = match tokio::time::timeout(shared.limits.connect_timeout, connector.connect(name, tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return Err(format!("cannot reach \"{host}\" ({addr}) over verified TLS: {e}")),
        Err(_) => return Err(format!("cannot reach \"{host}\" ({addr}) over verified TLS: timed out")),
    };
    let (sender, conn) = crate::forwarded::client_builder(&shared.limits)
        .handshake::<_, Incoming>(TokioIo::new(tls))
        .await
        .map_err(|e| format!("upstream {addr}: {e}"))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("egress proxy: intercepted upstream connection ended: {e}");
        }
    });
    Ok(sender)
}

/// One request on an intercepted connection.
async fn request(
    mut req: Request<Incoming>,
    shared: &Arc<Shared>,
    broker: &Broker,
    sender: &Mutex<Sender>,
    host: &str,
    port: u16,
    addr: SocketAddr,
) -> Result<Response<Body>, Refused> {
    let target = Target::Name(host.to_owned());
    let policy = shared.policy.borrow().clone();
    target.allowed(&policy, addr).map_err(Refused::policy)?;
    // The request must be for the host the tunnel was opened (and the credential given) for.
    let authority = if port == 443 {
        host.to_owned()
    } else {
        format!("{host}:{port}")
    };
    if let Some(value) = req.headers().get(HOST) {
        let text = value.to_str().unwrap_or("");
        let bare = text.strip_suffix(":443").filter(|_| port == 443).unwrap_or(text);
        if crate::policy::normalize(bare) != authority {
            return Err(Refused::policy(format!(
                "the Host header \"{text}\" does not match the CONNECT host \"{authority}\""
            )));
        }
    }
    if let Some(auth) = req.uri().authority()
        && Target::parse(auth.host()) != target
    {
        return Err(Refused::policy(format!(
            "the request's host \"{auth}\" does not match the CONNECT host \"{authority}\""
        )));
    }
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
    *req.uri_mut() = path.parse().map_err(|_| Refused::bad_request("bad request path"))?;
    crate::handle::strip_hop(req.headers_mut());
    if !req.headers().contains_key(HOST) {
        let value = HeaderValue::from_str(&authority).map_err(|_| Refused::bad_request("bad host"))?;
        req.headers_mut().insert(HOST, value);
    }
    for credential in broker.for_host(host, port) {
        let name = HeaderName::from_bytes(credential.header.as_bytes()).expect("checked when parsed");
        // What the lease put there (a placeholder, or anything) never goes out.
        req.headers_mut().remove(&name);
        let mut value = HeaderValue::from_str(credential.value.expose()).expect("checked when resolved");
        value.set_sensitive(true);
        req.headers_mut().insert(name, value);
    }
    let mut sender = sender.lock().await;
    let sender = sender
        .as_mut()
        .map_err(|why| Refused::new(StatusCode::BAD_GATEWAY, format!("envrt egress: {why}\n")))?;
    sender
        .ready()
        .await
        .map_err(|e| Refused::new(StatusCode::BAD_GATEWAY, format!("envrt egress: upstream {addr}: {e}\n")))?;
    let mut resp = sender
        .send_request(req)
        .await
        .map_err(|e| Refused::new(StatusCode::BAD_GATEWAY, format!("envrt egress: upstream {addr}: {e}\n")))?;
    crate::forwarded::check_head(&resp, &shared.limits, addr)?;
    crate::handle::strip_hop(resp.headers_mut());
    let updates = shared.policy.subscribe();
    let idle = shared.limits.idle_timeout;
    Ok(resp.map(|body| crate::forwarded::cut_on_update(body, updates, target, addr, idle)))
}
