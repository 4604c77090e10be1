//! Where the service listens, and how it stops. A unix socket by default (created mode
//! 0600: only the service's user may connect), TCP when `--listen` says so: plain HTTP on
//! a loopback address only, TLS (rustls) with a certificate and key for any other
//! address. A stop signal (SIGTERM, SIGINT) stops accepting, lets in-flight requests end,
//! and gives up on those still running after the drain bound.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio_rustls::TlsAcceptor;

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where to listen.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// A unix socket at this path.
    Unix(PathBuf),
    /// TCP at this address; TLS with `(cert, key)` PEM files when given.
    Tcp {
        /// The address.
        addr: SocketAddr,
        /// Certificate chain and private key, PEM.
        tls: Option<(PathBuf, PathBuf)>,
    },
}

impl Endpoint {
    /// Checks the endpoint: a TCP address beyond loopback needs TLS.
    pub fn check(&self) -> Result<(), String> {
        match self {
            Endpoint::Tcp { addr, tls: None } if !addr.ip().is_loopback() => Err(format!(
                "envrt serve: --listen {addr} is beyond loopback; give --tls-cert and --tls-key to serve it over TLS"
            )),
            _ => Ok(()),
        }
    }
}

/// A TCP listener that completes a TLS handshake per connection (accepting yields only
/// connections whose handshake ended within ten seconds).
pub struct TlsListener {
    inner: TcpListener,
    acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((stream, addr)) = self.inner.accept().await else {
                tokio::task::yield_now().await;
                continue;
            };
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(stream)).await {
                Ok(Ok(tls)) => return (tls, addr),
                Ok(Err(error)) => tracing::debug!(%addr, %error, "TLS handshake failed"),
                Err(_) => tracing::debug!(%addr, "TLS handshake timed out"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

fn tls_acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| format!("envrt serve: cannot read the certificate \"{}\": {e}", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("envrt serve: cannot read the private key \"{}\": {e}", key.display()))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("envrt serve: TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("envrt serve: TLS: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Binds a unix socket at `path`, mode 0600. A stale socket file (no one answers on it)
/// is replaced; a live one is refused.
fn bind_unix(path: &Path) -> Result<UnixListener, String> {
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(format!(
            "envrt serve: another service is listening on \"{}\"",
            path.display()
        ));
    }
    use std::os::unix::fs::FileTypeExt as _;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(format!(
                "envrt serve: \"{}\" exists and is not a socket",
                path.display()
            ));
        }
        let _ = std::fs::remove_file(path);
    }
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = UnixListener::bind(path);
    nix::sys::stat::umask(old);
    bound.map_err(|e| format!("envrt serve: cannot listen on \"{}\": {e}", path.display()))
}

/// A bound endpoint, ready to serve.
pub enum Bound {
    /// A unix socket (removed when serving ends).
    Unix(UnixListener, PathBuf),
    /// Plain TCP on loopback.
    Tcp(TcpListener),
    /// TLS over TCP.
    Tls(Box<TlsListener>),
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Bound {
    /// Binds `endpoint` (after [`Endpoint::check`]).
    pub async fn bind(endpoint: &Endpoint) -> Result<Bound, String> {
        endpoint.check()?;
        match endpoint {
            Endpoint::Unix(path) => Ok(Bound::Unix(bind_unix(path)?, path.clone())),
            Endpoint::Tcp { addr, tls } => {
                let acceptor = match tls {
                    Some((cert, key)) => Some(tls_acceptor(cert, key)?),
                    None => None,
                };
                let listener = TcpListener::bind(addr)
                    .await
                    .map_err(|e| format!("envrt serve: cannot listen on {addr}: {e}"))?;
                Ok(match acceptor {
                    Some(acceptor) => Bound::Tls(Box::new(TlsListener {
                        inner: listener,
                        acceptor,
                    })),
                    None => Bound::Tcp(listener),
                })
            }
        }
    }

    /// `unix:PATH`, `http://ADDR` or `https://ADDR`: where clients connect.
    pub fn describe(&self) -> String {
        match self {
            Bound::Unix(_, path) => format!("unix:{}", path.display()),
            Bound::Tcp(l) => format!("http://{}", l.local_addr().map(|a| a.to_string()).unwrap_or_default()),
            Bound::Tls(l) => format!(
                "https://{}",
                l.inner.local_addr().map(|a| a.to_string()).unwrap_or_default()
            ),
        }
    }

    /// Serves `app` until `stop` resolves, then drains in-flight requests for at most
    /// `drain`. Returns whether every request ended within the bound.
    pub async fn serve(self, app: Router, stop: impl Future<Output = ()> + Send + 'static, drain: Duration) -> bool {
        let (fired_tx, mut fired_rx) = tokio::sync::watch::channel(false);
        let signal = async move {
            stop.await;
            let _ = fired_tx.send(true);
        };
        let bound = async move {
            let _ = fired_rx.wait_for(|f| *f).await;
            tokio::time::sleep(drain).await;
        };
        let (served, socket) = match self {
            Bound::Unix(l, path) => (
                run(axum::serve(l, app).with_graceful_shutdown(signal), bound).await,
                Some(path),
            ),
            Bound::Tcp(l) => (
                run(axum::serve(l, app).with_graceful_shutdown(signal), bound).await,
                None,
            ),
            Bound::Tls(l) => (
                run(axum::serve(*l, app).with_graceful_shutdown(signal), bound).await,
                None,
            ),
        };
        if let Some(path) = socket {
            let _ = std::fs::remove_file(path);
        }
        served
    }
}

async fn run(server: impl IntoFuture<Output = std::io::Result<()>>, bound: impl Future<Output = ()>) -> bool {
    tokio::select! {
        result = server.into_future() => {
            if let Err(error) = result {
                tracing::warn!(%error, "the service stopped with an error");
            }
            true
        }
        () = bound => {
            tracing::warn!("in-flight requests did not end within the drain bound; stopping anyway");
            false
        }
    }
}

/// Catches SIGTERM and SIGINT from the moment it is called, and resolves on the first: a
/// signal that comes before the returned future is first polled (while a program still
/// starts its pools, say) is kept for it, instead of the default action that ends the
/// process with nothing released. Call it first thing, inside the runtime.
pub fn stop_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let streams = signal(SignalKind::terminate())
        .ok()
        .zip(signal(SignalKind::interrupt()).ok());
    async move {
        let Some((mut term, mut int)) = streams else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}
