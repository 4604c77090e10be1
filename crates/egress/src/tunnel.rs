//! A CONNECT tunnel after the 200: the TLS ClientHello is read (bounded) and its SNI checked
//! against the CONNECT host before one byte goes upstream; then bytes are pumped both ways
//! until either side closes, the tunnel idles too long, or a new policy denies it.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use crate::handle::Target;
use crate::proxy::Shared;

/// A fatal TLS alert `access_denied` (49), sent to a client whose ClientHello is refused.
const ACCESS_DENIED: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 49];

/// Why a ClientHello is refused (logged; the client gets the alert and a close).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HelloRefusal {
    /// The first bytes are not a TLS ClientHello rustls accepts.
    #[error("the tunnel does not start with a TLS ClientHello ({0})")]
    NotTls(String),
    /// Over the byte bound.
    #[error("the ClientHello is longer than {0} bytes")]
    TooLong(usize),
    /// The client closed or idled before a whole ClientHello.
    #[error("no whole ClientHello arrived")]
    Incomplete,
    /// SNI names another host than CONNECT did.
    #[error("{}", mismatch_text(sni.as_deref(), host))]
    Mismatch {
        /// What the ClientHello names (None: no SNI).
        sni: Option<String>,
        /// What CONNECT named.
        host: String,
    },
}

fn mismatch_text(sni: Option<&str>, host: &str) -> String {
    match sni {
        Some(s) => format!("the TLS server name \"{s}\" does not match the CONNECT host \"{host}\""),
        None => format!("the ClientHello names no server, but CONNECT named \"{host}\""),
    }
}

/// Reads one ClientHello from `client` (at most `max` bytes), returning the bytes read and
/// the server name it carries.
pub(crate) async fn read_hello<R: AsyncRead + Unpin>(
    client: &mut R,
    max: usize,
) -> Result<(Vec<u8>, Option<String>), HelloRefusal> {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut seen = Vec::new();
    let mut chunk = vec![0u8; 4096];
    loop {
        let n = client.read(&mut chunk).await.map_err(|_| HelloRefusal::Incomplete)?;
        if n == 0 {
            return Err(HelloRefusal::Incomplete);
        }
        if seen.len() + n > max {
            return Err(HelloRefusal::TooLong(max));
        }
        seen.extend_from_slice(&chunk[..n]);
        let mut rest = &chunk[..n];
        while !rest.is_empty() {
            acceptor
                .read_tls(&mut rest)
                .map_err(|e| HelloRefusal::NotTls(e.to_string()))?;
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let sni = accepted.client_hello().server_name().map(str::to_ascii_lowercase);
                return Ok((seen, sni));
            }
            Ok(None) => continue,
            Err((e, _)) => return Err(HelloRefusal::NotTls(e.to_string())),
        }
    }
}

/// Whether the ClientHello's server name fits the CONNECT target: a name must be named
/// exactly; a raw address must come with no server name.
pub(crate) fn sni_fits(target: &Target, sni: Option<&str>) -> Result<(), HelloRefusal> {
    let ok = match (target, sni) {
        (Target::Name(n), Some(s)) => crate::policy::normalize(s) == *n,
        (Target::Ip(_), None) => true,
        _ => false,
    };
    if ok {
        return Ok(());
    }
    let host = match target {
        Target::Name(n) => n.clone(),
        Target::Ip(ip) => ip.to_string(),
    };
    Err(HelloRefusal::Mismatch {
        sni: sni.map(str::to_string),
        host,
    })
}

pub(crate) async fn run<C>(
    mut client: C,
    mut upstream: TcpStream,
    target: Target,
    addr: SocketAddr,
    shared: Arc<Shared>,
    _permit: Arc<OwnedSemaphorePermit>,
) where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let limits = &shared.limits;
    let hello = tokio::time::timeout(limits.hello_timeout, read_hello(&mut client, limits.max_hello_bytes))
        .await
        .unwrap_or(Err(HelloRefusal::Incomplete))
        .and_then(|(bytes, sni)| sni_fits(&target, sni.as_deref()).map(|()| bytes));
    let bytes = match hello {
        Ok(bytes) => bytes,
        Err(refusal) => {
            tracing::info!("egress proxy: tunnel to {addr} refused: {refusal}");
            let _ = client.write_all(&ACCESS_DENIED).await;
            let _ = client.shutdown().await;
            return;
        }
    };
    if upstream.write_all(&bytes).await.is_err() {
        return;
    }
    let mut policy = shared.policy.subscribe();
    let idle = limits.idle_timeout;
    let (mut ur, mut uw) = upstream.split();
    let mut up_buf = vec![0u8; 64 * 1024];
    let mut down_buf = vec![0u8; 64 * 1024];
    let (mut client_open, mut upstream_open) = (true, true);
    while client_open || upstream_open {
        tokio::select! {
            r = client.read(&mut up_buf), if client_open => match r {
                Ok(0) | Err(_) => { client_open = false; let _ = uw.shutdown().await; }
                Ok(n) => if uw.write_all(&up_buf[..n]).await.is_err() { return; },
            },
            r = ur.read(&mut down_buf), if upstream_open => match r {
                Ok(0) | Err(_) => { upstream_open = false; let _ = client.shutdown().await; }
                Ok(n) => if client.write_all(&down_buf[..n]).await.is_err() { return; },
            },
            changed = policy.changed() => {
                if changed.is_err() { return; }
                let now = policy.borrow_and_update().clone();
                if let Err(r) = target.allowed(&now, addr) {
                    tracing::info!("egress proxy: tunnel to {addr} cut by a policy update: {r}");
                    return;
                }
            },
            () = tokio::time::sleep(idle) => {
                tracing::info!("egress proxy: tunnel to {addr} idle for {idle:?}, closed");
                return;
            },
        }
    }
}

#[cfg(test)]
#[path = "tunnel_tests.rs"]
mod tests;
