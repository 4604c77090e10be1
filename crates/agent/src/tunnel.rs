//! The `connect` verb's tunnels: a host connection turned into a TCP stream to a port on
//! the lease's loopback (exposed lease ports). Bounded: [`MAX_TUNNELS`] at once per agent
//! (more are refused with their exact text), [`CONNECT_BOUND`] to connect.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::net::{TcpStream, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::proto::MAX_TUNNELS;
use crate::refuse;

/// How long a tunnel's connection to the lease's port may take.
pub const CONNECT_BOUND: Duration = Duration::from_secs(10);

fn slots() -> Arc<Semaphore> {
    static SLOTS: OnceLock<Arc<Semaphore>> = OnceLock::new();
    Arc::clone(SLOTS.get_or_init(|| Arc::new(Semaphore::new(MAX_TUNNELS))))
}

/// Connects to `127.0.0.1:{port}`, holding one of the agent's tunnel slots.
pub(crate) async fn open(port: u16) -> Result<(TcpStream, OwnedSemaphorePermit), String> {
    let slot = slots().try_acquire_owned().map_err(|_| refuse::too_many_tunnels())?;
    match tokio::time::timeout(CONNECT_BOUND, TcpStream::connect(("127.0.0.1", port))).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok((stream, slot))
        }
        Ok(Err(error)) => Err(refuse::cannot_connect(port, &error)),
        Err(_) => Err(refuse::cannot_connect(port, &"timed out")),
    }
}

/// Carries bytes both ways until either side closes; the slot is freed then.
pub(crate) async fn carry(mut host: UnixStream, mut upstream: TcpStream, slot: OwnedSemaphorePermit) {
    let _ = tokio::io::copy_bidirectional(&mut host, &mut upstream).await;
    drop(slot);
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use crate::client::{Client, ClientError, tunnel};
    use crate::table::{Agent, Config};

    #[tokio::test]
    async fn a_tunnel_carries_a_lease_port_and_refusals_are_exact() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        tokio::spawn(crate::server::serve(Agent::new(Config::default()), listener));
        // A server on the lease's loopback that greets and echoes.
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = server.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = server.accept().await.unwrap();
            s.write_all(b"hello ").await.unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf).await.unwrap();
        });
        let mut stream = tunnel(&socket, port).await.unwrap();
        stream.write_all(b"world").await.unwrap();
        let mut got = [0u8; 11];
        stream.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello world");
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"", "the tunnel ends when the lease's side closes");

        // A port nobody listens on (the one just freed: the listener was dropped).
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        match tunnel(&socket, closed).await {
            Err(ClientError::Refused(text)) => assert_eq!(
                text,
                format!("cannot connect to 127.0.0.1:{closed} in the lease: Connection refused (os error 111)")
            ),
            other => panic!("{other:?}"),
        }
        // Not on a connection already in use for other requests.
        let client = Client::connect(&socket).await.unwrap();
        client.list().await.unwrap();
        match client.request(crate::proto::Op::Connect { port }).await {
            Err(ClientError::Refused(text)) => assert_eq!(
                text,
                "connect must be the only request on its connection, right after hello"
            ),
            other => panic!("{other:?}"),
        }
    }
}
