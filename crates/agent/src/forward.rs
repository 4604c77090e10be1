//! Forwarders inside a lease that has no route out: a TCP listener on the lease's loopback
//! whose connections are relayed to a unix socket the host bound into the lease (the egress
//! proxy), and a UDP DNS listener whose queries are relayed, framed as DNS over TCP (a
//! two-byte length before each message), to another (the DNS stub). `--forward
//! tcp:127.0.0.1:3128=/run/envrt/egress.sock` and `--forward
//! dns:127.0.0.1:53=/run/envrt/dns.sock`.
//!
//! They give the command nothing it does not already have: it can reach both sockets
//! itself. Bounds: [`MAX_TCP`] relayed connections and [`MAX_DNS`] queries in flight (more
//! are refused at once: a closed connection, a dropped query the client retries), a query
//! or answer of at most [`MAX_DNS_MESSAGE`] bytes, [`DNS_WAIT`] for an answer.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket, UnixStream};
use tokio::sync::Semaphore;

/// Relayed TCP connections at once.
pub const MAX_TCP: usize = 1024;
/// DNS queries in flight at once.
pub const MAX_DNS: usize = 256;
/// The largest DNS query or answer relayed.
pub const MAX_DNS_MESSAGE: usize = 4096;
/// How long a DNS query waits for its answer.
pub const DNS_WAIT: Duration = Duration::from_secs(10);

/// One forwarder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forward {
    /// TCP connections to `listen` relayed to the unix socket `to`.
    Tcp {
        /// Where to listen in the lease.
        listen: SocketAddr,
        /// The unix socket each connection is relayed to.
        to: PathBuf,
    },
    /// UDP DNS queries to `listen` relayed, length-prefixed, to the unix socket `to`.
    Dns {
        /// Where to listen in the lease.
        listen: SocketAddr,
        /// The unix socket the queries go to.
        to: PathBuf,
    },
}

impl Forward {
    /// Parses `tcp:ADDR:PORT=PATH` or `dns:ADDR:PORT=PATH`; the error is the exact text.
    pub fn parse(text: &str) -> Result<Forward, String> {
        let bad = || format!("--forward takes tcp:ADDR:PORT=PATH or dns:ADDR:PORT=PATH, not {text:?}");
        let (kind, rest) = text.split_once(':').ok_or_else(bad)?;
        let (listen, to) = rest.split_once('=').ok_or_else(bad)?;
        let listen: SocketAddr = listen.parse().map_err(|_| bad())?;
        if to.is_empty() {
            return Err(bad());
        }
        let to = PathBuf::from(to);
        match kind {
            "tcp" => Ok(Forward::Tcp { listen, to }),
            "dns" => Ok(Forward::Dns { listen, to }),
            _ => Err(bad()),
        }
    }

    /// Binds the listener now (so a port in use fails the start) and answers the task that
    /// serves it.
    pub async fn bind(&self) -> Result<tokio::task::JoinHandle<()>, String> {
        match self.clone() {
            Forward::Tcp { listen, to } => {
                let listener = TcpListener::bind(listen)
                    .await
                    .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
                Ok(tokio::spawn(relay_tcp(listener, to)))
            }
            Forward::Dns { listen, to } => {
                let socket = UdpSocket::bind(listen)
                    .await
                    .map_err(|e| format!("cannot listen on {listen}/udp: {e}"))?;
                Ok(tokio::spawn(relay_dns(socket, to)))
            }
        }
    }
}

async fn relay_tcp(listener: TcpListener, to: PathBuf) {
    let slots = Arc::new(Semaphore::new(MAX_TCP));
    loop {
        let Ok((mut client, _)) = listener.accept().await else {
            continue;
        };
        // Over the bound: the connection is closed at once.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let to = to.clone();
        tokio::spawn(async move {
            if let Ok(mut upstream) = UnixStream::connect(&to).await {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            }
            drop(slot);
        });
    }
}

async fn relay_dns(socket: UdpSocket, to: PathBuf) {
    let socket = Arc::new(socket);
    let slots = Arc::new(Semaphore::new(MAX_DNS));
    let mut buf = vec![0u8; MAX_DNS_MESSAGE];
    loop {
        let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let (socket, to, query) = (socket.clone(), to.clone(), buf[..n].to_vec());
        tokio::spawn(async move {
            if let Ok(Ok(Some(answer))) = tokio::time::timeout(DNS_WAIT, ask(&to, &query)).await {
                let _ = socket.send_to(&answer, peer).await;
            }
            drop(slot);
        });
    }
}

/// One query over a fresh stream connection: its answer, `None` when the far side gave
/// none or one over the bound.
async fn ask(to: &PathBuf, query: &[u8]) -> std::io::Result<Option<Vec<u8>>> {
    let Ok(len) = u16::try_from(query.len()) else {
        return Ok(None);
    };
    let mut stream = UnixStream::connect(to).await?;
    stream.write_all(&len.to_be_bytes()).await?;
    stream.write_all(query).await?;
    let mut len = [0u8; 2];
    if stream.read_exact(&mut len).await.is_err() {
        return Ok(None);
    }
    let len = usize::from(u16::from_be_bytes(len));
    if len > MAX_DNS_MESSAGE {
        return Ok(None);
    }
    let mut answer = vec![0u8; len];
    stream.read_exact(&mut answer).await?;
    Ok(Some(answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwards_are_parsed_and_a_bad_one_is_named() {
        assert_eq!(
            Forward::parse("tcp:127.0.0.1:3128=/run/envrt/egress.sock"),
            Ok(Forward::Tcp {
                listen: "127.0.0.1:3128".parse().unwrap(),
                to: "/run/envrt/egress.sock".into()
            })
        );
        assert_eq!(
            Forward::parse("dns:[::1]:53=/d.sock"),
            Ok(Forward::Dns {
                listen: "[::1]:53".parse().unwrap(),
                to: "/d.sock".into()
            })
        );
        for bad in [
            "udp:127.0.0.1:53=/x",
            "tcp:127.0.0.1=/x",
            "tcp:127.0.0.1:1=",
            "tcp127.0.0.1:1=/x",
        ] {
            assert_eq!(
                Forward::parse(bad),
                Err(format!(
                    "--forward takes tcp:ADDR:PORT=PATH or dns:ADDR:PORT=PATH, not {bad:?}"
                ))
            );
        }
    }

    #[tokio::test]
    async fn a_tcp_connection_and_a_dns_query_reach_their_unix_sockets() {
        let dir = tempfile::tempdir().unwrap();
        let (tcp_sock, dns_sock) = (dir.path().join("p.sock"), dir.path().join("d.sock"));
        // The far sides: an echo that says hello first, and a DNS "stub" that answers each
        // framed query with the query reversed.
        let echo = tokio::net::UnixListener::bind(&tcp_sock).unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            s.write_all(b"hello ").await.unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf).await.unwrap();
        });
        let stub = tokio::net::UnixListener::bind(&dns_sock).unwrap();
        tokio::spawn(async move {
            let (mut s, _) = stub.accept().await.unwrap();
            let mut len = [0u8; 2];
            s.read_exact(&mut len).await.unwrap();
            let mut q = vec![0u8; usize::from(u16::from_be_bytes(len))];
            s.read_exact(&mut q).await.unwrap();
            q.reverse();
            s.write_all(&len).await.unwrap();
            s.write_all(&q).await.unwrap();
        });
        // The relays on ports the system picks (`bind` cannot say which it got).
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(relay_tcp(listener, tcp_sock));
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        client.write_all(b"world").await.unwrap();
        let mut got = [0u8; 11];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello world");

        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        tokio::spawn(relay_dns(socket, dns_sock));
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        client.send_to(b"abc", addr).await.unwrap();
        let mut buf = [0u8; 16];
        let (n, _) = tokio::time::timeout(Duration::from_secs(10), client.recv_from(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[..n], b"cba");
    }
}
