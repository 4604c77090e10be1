//! The egress proxy: accept loops (unix socket, loopback TCP), the connection bound, the
//! live policy, and the hyper HTTP/1 server each connection is served by.

use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::policy::Policy;
use crate::resolve::Resolver;

/// Every bound the proxy and the DNS stub hold to.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Client connections open at once (tunnels included); more are answered 503.
    pub max_connections: usize,
    /// Headers in one request or upstream response.
    pub max_headers: usize,
    /// Bytes of one request's or response's head (the read buffer of a lease's
    /// connection; an upstream response's head is counted by the proxy).
    pub max_head_bytes: usize,
    /// The read buffer of an upstream connection a request is forwarded on: the largest
    /// piece of a response body read and passed on at once (hyper grows it only while
    /// reads fill it; at most this much per connection, so at most
    /// `max_connections × body_buffer_bytes` in all).
    pub body_buffer_bytes: usize,
    /// Time a client has to send a request head.
    pub header_timeout: Duration,
    /// Time a tunnel may pass no byte in either direction before it is closed.
    pub idle_timeout: Duration,
    /// Time a CONNECT client has to send its TLS ClientHello.
    pub hello_timeout: Duration,
    /// Bytes a ClientHello may take.
    pub max_hello_bytes: usize,
    /// Time a connection to an upstream host may take.
    pub connect_timeout: Duration,
    /// DNS stub: queries answered at once (UDP) and TCP connections open at once.
    pub max_dns_in_flight: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_headers: 64,
            max_head_bytes: 16 * 1024,
            body_buffer_bytes: 512 * 1024,
            header_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
            hello_timeout: Duration::from_secs(10),
            max_hello_bytes: 32 * 1024,
            connect_timeout: Duration::from_secs(10),
            max_dns_in_flight: 256,
        }
    }
}

/// The body of the answer to a connection over [`Limits::max_connections`].
pub fn too_many_connections_text(limit: usize) -> String {
    format!("envrt egress: too many connections (the limit is {limit})\n")
}

pub(crate) struct Shared {
    pub(crate) policy: watch::Sender<Arc<Policy>>,
    pub(crate) resolver: Resolver,
    pub(crate) limits: Limits,
    pub(crate) broker: Option<Arc<crate::broker::Broker>>,
    conns: Arc<Semaphore>,
}

/// One egress proxy: a policy (replaceable while it runs), a resolver and its bounds.
/// Cloning gives another handle to the same proxy.
#[derive(Clone)]
pub struct EgressProxy {
    shared: Arc<Shared>,
}

impl EgressProxy {
    /// A proxy enforcing `policy`, resolving through `resolver`.
    pub fn new(policy: Policy, resolver: Resolver, limits: Limits) -> Self {
        Self::build(policy, resolver, limits, None)
    }

    /// A proxy that also brokers credentials (see `broker`): CONNECTs to a credentialed
    /// host are terminated with the broker's CA and re-originated with the header set.
    pub fn with_broker(policy: Policy, resolver: Resolver, limits: Limits, broker: crate::broker::Broker) -> Self {
        Self::build(policy, resolver, limits, Some(Arc::new(broker)))
    }

    fn build(policy: Policy, resolver: Resolver, limits: Limits, broker: Option<Arc<crate::broker::Broker>>) -> Self {
        let (policy, _) = watch::channel(Arc::new(policy));
        let conns = Arc::new(Semaphore::new(limits.max_connections));
        Self {
            shared: Arc::new(Shared {
                policy,
                resolver,
                limits,
                broker,
                conns,
            }),
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        self.shared.policy.borrow().clone()
    }

    /// Replaces the policy: new connections and DNS answers see it at once, and every open
    /// tunnel the new policy denies is closed.
    pub fn update_policy(&self, policy: Policy) {
        self.shared.policy.send_replace(Arc::new(policy));
    }

    /// The DNS stub answering under this proxy's policy and resolver.
    pub fn dns_stub(&self) -> crate::dns::DnsStub {
        crate::dns::DnsStub::new(self.shared.clone())
    }

    /// Serves clients connecting to `listener` until accepting fails.
    pub async fn serve_tcp(&self, listener: TcpListener) -> std::io::Result<()> {
        loop {
            let (io, _) = listener.accept().await?;
            self.admit(io);
        }
    }

    /// Serves clients connecting to the unix socket `listener` until accepting fails.
    pub async fn serve_unix(&self, listener: UnixListener) -> std::io::Result<()> {
        loop {
            let (io, _) = listener.accept().await?;
            self.admit(io);
        }
    }

    /// Serves one client connection on this task to its end (the fuzz targets' way in:
    /// see the `fuzzing` module). Not API.
    #[doc(hidden)]
    pub async fn serve_io<I>(&self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let shared = self.shared.clone();
        match shared.conns.clone().try_acquire_owned() {
            Ok(permit) => serve_connection(io, shared, Arc::new(permit)).await,
            Err(_) => refuse_overflow(io, shared.limits.max_connections).await,
        }
    }

    /// Serves one client connection (its own task), or answers 503 when over the bound.
    fn admit<I>(&self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let shared = self.shared.clone();
        match shared.conns.clone().try_acquire_owned() {
            Ok(permit) => {
                tokio::spawn(serve_connection(io, shared, Arc::new(permit)));
            }
            Err(_) => {
                tokio::spawn(refuse_overflow(io, shared.limits.max_connections));
            }
        }
    }
}

/// A fixed answer (no request is read) to a connection over the bound, then close.
async fn refuse_overflow<I: AsyncRead + AsyncWrite + Unpin>(mut io: I, limit: usize) {
    let body = too_many_connections_text(limit);
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        io.write_all(head.as_bytes()).await?;
        io.write_all(body.as_bytes()).await?;
        io.shutdown().await?;
        // Read (and drop) what the client sent, at most 64 KiB, so that closing with unread
        // bytes does not reset the connection before the client reads the answer.
        let mut sink = [0u8; 4096];
        let mut left = 64 * 1024usize;
        while left > 0 {
            match io.read(&mut sink).await? {
                0 => break,
                n => left = left.saturating_sub(n),
            }
        }
        Ok::<(), std::io::Error>(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), write).await;
}

/// The HTTP/1.1 server side of a lease's connection, under the proxy's limits (also what an
/// intercepted, credentialed tunnel is served with).
pub(crate) fn server_builder(limits: &Limits) -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_headers(limits.max_headers)
        .max_buf_size(limits.max_head_bytes.max(8192))
        .keep_alive(true);
    builder
}

async fn serve_connection<I>(io: I, shared: Arc<Shared>, permit: Arc<OwnedSemaphorePermit>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = &shared.limits;
    let builder = server_builder(limits);
    let svc_shared = shared.clone();
    let service = service_fn(move |req| {
        let shared = svc_shared.clone();
        let permit = permit.clone();
        async move { Ok::<_, std::convert::Infallible>(crate::handle::handle(req, shared, permit).await) }
    });
    if let Err(e) = builder
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades()
        .await
    {
        tracing::debug!("egress proxy connection ended: {e}");
    }
}
