//! Exposed lease ports (contract section 10): `expose(lease, port, at)` listens on the host
//! and carries every connection it accepts to `127.0.0.1:{port}` inside the lease, through
//! the driver's [`ExposePorts`] group (the lease's supervisor's `connect` verb on Docker
//! and the sandbox).
//!
//! - **Where.** [`ExposeAt::Loopback`] (the default: `127.0.0.1`, a port the system picks),
//!   [`ExposeAt::Unix`] (a socket made at that path, mode 0600, removed when the endpoint
//!   closes; an existing path is refused), or [`ExposeAt::Listen`] (an address of the
//!   caller's choice: beyond loopback only on this explicit request, and then every
//!   connection must first send the endpoint's token and a newline, within
//!   [`TOKEN_WAIT`], or it is answered `envrt expose: refused: wrong or missing token` and
//!   closed).
//! - **Bounds.** [`MAX_ENDPOINTS`] per lease (more refused), [`MAX_CONNECTIONS`] at once per
//!   endpoint (more answered `envrt expose: too many connections (the limit is N)` and
//!   closed).
//! - **The end.** Every endpoint of a lease closes, with its open connections, when the
//!   lease is released or destroyed through this runtime, when [`EnvironmentRuntime::close_exposed`]
//!   is called, and when a connection finds the lease no longer active or expired.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Semaphore, watch};

use crate::driver::{EnvironmentDriver, LeaseContext};
use crate::error::{DriverError, RuntimeError};
use crate::model::{LeaseStatus, Timestamp};
use crate::store::LeaseStore;

use super::EnvironmentRuntime;
use super::gate::{Operation, gate};

/// Endpoints one lease may have open at once.
pub const MAX_ENDPOINTS: usize = 16;
/// Connections one endpoint carries at once.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a connection to a token endpoint has to send its token.
pub const TOKEN_WAIT: Duration = Duration::from_secs(10);

/// Where an exposed port listens on the host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ExposeAt {
    /// `127.0.0.1`, on a port the system picks.
    #[default]
    Loopback,
    /// A unix socket made at this path.
    Unix(PathBuf),
    /// This address; one beyond loopback gets a per-endpoint token.
    Listen(SocketAddr),
}

/// Where an endpoint listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndpointAddress {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A unix socket.
    Unix(PathBuf),
}

impl std::fmt::Display for EndpointAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EndpointAddress::Tcp(addr) => write!(f, "tcp://{addr}"),
            EndpointAddress::Unix(path) => write!(f, "unix://{}", path.display()),
        }
    }
}

/// An open endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExposedEndpoint {
    /// The lease.
    pub lease_id: String,
    /// The port inside the lease.
    pub port: u16,
    /// Where it listens.
    pub address: EndpointAddress,
    /// What a connection must send first (the token, then `\n`), for an endpoint beyond
    /// loopback; `None` otherwise.
    pub token: Option<String>,
}

/// One open endpoint: its closing signal, and its unix socket's path (removed at once
/// when it closes).
struct Open {
    closer: watch::Sender<bool>,
    socket: Option<PathBuf>,
}

impl Open {
    fn close(self) {
        let _ = self.closer.send(true);
        if let Some(path) = self.socket {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The open endpoints, by lease (an endpoint stays counted until its lease's endpoints
/// close).
#[derive(Default)]
pub(super) struct Exposed {
    open: Mutex<HashMap<String, Vec<Open>>>,
}

impl Exposed {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Open>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes every endpoint.
    pub(super) fn close_all(&self) {
        for open in self.lock().drain().flat_map(|(_, open)| open) {
            open.close();
        }
    }

    /// Closes every endpoint of `lease`.
    pub(super) fn close(&self, lease: &str) {
        for open in self.lock().remove(lease).unwrap_or_default() {
            open.close();
        }
    }
}

fn invalid(message: String) -> RuntimeError {
    RuntimeError::Driver(DriverError::InvalidInput { message })
}

/// A bound listener of either kind.
enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

/// A host connection of either kind.
enum Conn {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

impl Listener {
    async fn accept(&self) -> std::io::Result<Conn> {
        match self {
            Listener::Tcp(l) => l.accept().await.map(|(s, _)| {
                let _ = s.set_nodelay(true);
                Conn::Tcp(s)
            }),
            Listener::Unix(l) => l.accept().await.map(|(s, _)| Conn::Unix(s)),
        }
    }
}

async fn bind(at: &ExposeAt) -> Result<(Listener, EndpointAddress, bool), RuntimeError> {
    match at {
        ExposeAt::Loopback => bind_tcp(SocketAddr::from(([127, 0, 0, 1], 0))).await,
        ExposeAt::Listen(addr) => bind_tcp(*addr).await,
        ExposeAt::Unix(path) => {
            if std::fs::symlink_metadata(path).is_ok() {
                return Err(invalid(format!(
                    "cannot expose a port at {}: the path exists",
                    path.display()
                )));
            }
            let listener = tokio::net::UnixListener::bind(path)
                .map_err(|e| invalid(format!("cannot expose a port at {}: {e}", path.display())))?;
            use std::os::unix::fs::PermissionsExt;
            let listener = Listener::Unix(listener);
            if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
                let _ = std::fs::remove_file(path);
                return Err(invalid(format!("cannot expose a port at {}: {e}", path.display())));
            }
            Ok((listener, EndpointAddress::Unix(path.clone()), false))
        }
    }
}

async fn bind_tcp(addr: SocketAddr) -> Result<(Listener, EndpointAddress, bool), RuntimeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| invalid(format!("cannot expose a port at {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| invalid(format!("cannot expose a port at {addr}: {e}")))?;
    Ok((
        Listener::Tcp(listener),
        EndpointAddress::Tcp(bound),
        !addr.ip().is_loopback(),
    ))
}

/// What every connection of one endpoint needs.
struct Endpoint {
    driver: Arc<dyn EnvironmentDriver>,
    store: Arc<dyn LeaseStore>,
    context: LeaseContext,
    port: u16,
    token: Option<String>,
    slots: Arc<Semaphore>,
}

impl EnvironmentRuntime {
    /// Exposes `port` inside the lease on the host (see the module docs). Refused: a lease
    /// whose driver lacks the group (`Environment driver "{key}" does not support exposed
    /// lease ports.`), an inactive or expired lease, port 0 (`Invalid input: port 0 cannot
    /// be exposed`), more than [`MAX_ENDPOINTS`] endpoints (`Invalid input: lease "{id}"
    /// already has 16 exposed ports`), and an address that cannot be bound.
    pub async fn expose(&self, lease_id: &str, port: u16, at: ExposeAt) -> Result<ExposedEndpoint, RuntimeError> {
        self.traced("expose", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            gate(&resolved, Operation::Expose, |d| d.as_expose(), |_| true).await?;
            if port == 0 {
                return Err(invalid("port 0 cannot be exposed".to_owned()));
            }
            let open = self.exposed.lock().get(lease_id).map_or(0, Vec::len);
            if open >= MAX_ENDPOINTS {
                return Err(invalid(format!(
                    "lease \"{lease_id}\" already has {MAX_ENDPOINTS} exposed ports"
                )));
            }
            let (listener, address, needs_token) = bind(&at).await?;
            let token = needs_token.then(|| uuid::Uuid::new_v4().simple().to_string());
            let (closer, closed) = watch::channel(false);
            let socket = match &address {
                EndpointAddress::Unix(path) => Some(path.clone()),
                EndpointAddress::Tcp(_) => None,
            };
            self.exposed
                .lock()
                .entry(lease_id.to_owned())
                .or_default()
                .push(Open { closer, socket });
            let endpoint = Arc::new(Endpoint {
                driver: Arc::clone(&resolved.driver),
                store: Arc::clone(&self.store),
                context: resolved.context.clone(),
                port,
                token: token.clone(),
                slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
            });
            tokio::spawn(serve(listener, endpoint, closed));
            Ok(ExposedEndpoint {
                lease_id: lease_id.to_owned(),
                port,
                address,
                token,
            })
        })
        .await
    }

    /// Closes every exposed port of the lease (release and destroy do it too).
    pub fn close_exposed(&self, lease_id: &str) {
        self.exposed.close(lease_id);
    }
}

/// Accepts until the endpoint closes; the listener (and a unix socket's file) goes then.
async fn serve(listener: Listener, endpoint: Arc<Endpoint>, mut closed: watch::Receiver<bool>) {
    loop {
        let conn = tokio::select! {
            _ = closed.wait_for(|c| *c) => return,
            conn = listener.accept() => conn,
        };
        let Ok(mut conn) = conn else { continue };
        let Ok(slot) = Arc::clone(&endpoint.slots).try_acquire_owned() else {
            let text = format!("envrt expose: too many connections (the limit is {MAX_CONNECTIONS})\n");
            tokio::spawn(async move { conn.refuse(&text).await });
            continue;
        };
        let (endpoint, mut closed) = (Arc::clone(&endpoint), closed.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = closed.wait_for(|c| *c) => {}
                () = carry(&mut conn, &endpoint) => {}
            }
            drop(slot);
        });
    }
}

impl Conn {
    async fn refuse(&mut self, text: &str) {
        let _ = match self {
            Conn::Tcp(s) => s.write_all(text.as_bytes()).await,
            Conn::Unix(s) => s.write_all(text.as_bytes()).await,
        };
    }

    async fn read_line(&mut self, buf: &mut [u8]) -> Option<usize> {
        let mut n = 0;
        while n < buf.len() {
            let got = match self {
                Conn::Tcp(s) => s.read(&mut buf[n..n + 1]).await,
                Conn::Unix(s) => s.read(&mut buf[n..n + 1]).await,
            };
            match got {
                Ok(1) if buf[n] == b'\n' => return Some(n),
                Ok(1) => n += 1,
                _ => return None,
            }
        }
        None
    }
}

/// One connection: the token (when the endpoint has one), the lease still active, then
/// the driver's stream, carried both ways.
async fn carry(conn: &mut Conn, endpoint: &Endpoint) {
    if let Some(token) = &endpoint.token {
        let mut buf = [0u8; 64];
        let got = tokio::time::timeout(TOKEN_WAIT, conn.read_line(&mut buf)).await;
        let ok = matches!(got, Ok(Some(n)) if constant_eq(&buf[..n], token.as_bytes()));
        if !ok {
            conn.refuse("envrt expose: refused: wrong or missing token\n").await;
            return;
        }
    }
    let lease = &endpoint.context.lease.id;
    let active = match endpoint.store.get_lease(lease).await {
        Ok(Some(l)) => l.status == LeaseStatus::Active && l.expires_at.is_none_or(|at| at > Timestamp::now()),
        _ => false,
    };
    if !active {
        conn.refuse(&format!("envrt expose: lease \"{lease}\" is not active\n"))
            .await;
        return;
    }
    let Some(group) = endpoint.driver.as_expose() else {
        return;
    };
    let stream = match group.connect_port(&endpoint.context, endpoint.port).await {
        Ok(stream) => stream,
        Err(error) => {
            conn.refuse(&format!("envrt expose: {error}\n")).await;
            return;
        }
    };
    let Ok(()) = stream.set_nonblocking(true) else { return };
    let Ok(mut upstream) = tokio::net::UnixStream::from_std(stream) else {
        return;
    };
    let _ = match conn {
        Conn::Tcp(s) => tokio::io::copy_bidirectional(s, &mut upstream).await,
        Conn::Unix(s) => tokio::io::copy_bidirectional(s, &mut upstream).await,
    };
}

/// Compares without stopping at the first difference.
fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
