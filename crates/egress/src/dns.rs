//! The DNS stub a lease resolves through: it answers A and AAAA for names the policy allows
//! from the proxy's own resolution (addresses in denied ranges dropped), and answers
//! REFUSED for every other name without sending anything anywhere. Other record types of an
//! allowed name get an empty NOERROR answer, also without a query upstream.

use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket, UnixListener};
use tokio::sync::Semaphore;

use crate::policy::normalize;
use crate::proxy::Shared;
use crate::resolve::ResolveError;

/// The largest query read (UDP datagram or TCP message); larger ones are dropped.
pub const MAX_QUERY: usize = 4096;
/// The TTL of every answer, short so that a policy update is not outlived by caches.
pub const ANSWER_TTL: u32 = 5;

/// The DNS stub of one [`crate::EgressProxy`]; cloning gives another handle.
#[derive(Clone)]
pub struct DnsStub {
    shared: Arc<Shared>,
    in_flight: Arc<Semaphore>,
}

impl DnsStub {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let in_flight = Arc::new(Semaphore::new(shared.limits.max_dns_in_flight));
        Self { shared, in_flight }
    }

    /// Answers queries arriving on `socket` until receiving fails. Queries over the
    /// in-flight bound are dropped (the client retries).
    pub async fn serve_udp(&self, socket: UdpSocket) -> std::io::Result<()> {
        let socket = Arc::new(socket);
        let mut buf = vec![0u8; MAX_QUERY];
        loop {
            let (n, peer) = socket.recv_from(&mut buf).await?;
            let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
                continue;
            };
            let (stub, socket, query) = (self.clone(), socket.clone(), buf[..n].to_vec());
            tokio::spawn(async move {
                if let Some(answer) = stub.answer(&query).await {
                    let _ = socket.send_to(&answer, peer).await;
                }
                drop(permit);
            });
        }
    }

    /// Answers length-prefixed queries on TCP connections to `listener` until accepting
    /// fails; connections over the in-flight bound are closed at once.
    pub async fn serve_tcp(&self, listener: TcpListener) -> std::io::Result<()> {
        loop {
            let (stream, _) = listener.accept().await?;
            let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
                continue;
            };
            let stub = self.clone();
            tokio::spawn(async move {
                stub.serve_stream(stream).await;
                drop(permit);
            });
        }
    }

    /// Answers length-prefixed queries (DNS-over-TCP framing) on connections to the unix
    /// socket `listener` until accepting fails: how a lease with no network reaches the
    /// stub through a socket bound into it. Bounded as [`serve_tcp`](Self::serve_tcp).
    pub async fn serve_unix(&self, listener: UnixListener) -> std::io::Result<()> {
        loop {
            let (stream, _) = listener.accept().await?;
            let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
                continue;
            };
            let stub = self.clone();
            tokio::spawn(async move {
                stub.serve_stream(stream).await;
                drop(permit);
            });
        }
    }

    async fn serve_stream<S: AsyncRead + AsyncWrite + Unpin>(&self, mut stream: S) {
        let idle = self.shared.limits.header_timeout;
        loop {
            let mut len = [0u8; 2];
            match tokio::time::timeout(idle, stream.read_exact(&mut len)).await {
                Ok(Ok(_)) => {}
                _ => return,
            }
            let len = usize::from(u16::from_be_bytes(len));
            if len > MAX_QUERY {
                return;
            }
            let mut query = vec![0u8; len];
            match tokio::time::timeout(idle, stream.read_exact(&mut query)).await {
                Ok(Ok(_)) => {}
                _ => return,
            }
            let Some(answer) = self.answer(&query).await else {
                return;
            };
            let Ok(alen) = u16::try_from(answer.len()) else { return };
            if stream.write_all(&alen.to_be_bytes()).await.is_err() || stream.write_all(&answer).await.is_err() {
                return;
            }
        }
    }

    /// The wire answer to one wire query, or `None` for bytes that are no DNS query.
    pub async fn answer(&self, query: &[u8]) -> Option<Vec<u8>> {
        let query = Message::from_vec(query).ok()?;
        if query.message_type() != MessageType::Query {
            return None;
        }
        let mut resp = Message::new();
        resp.set_id(query.id())
            .set_message_type(MessageType::Response)
            .set_op_code(query.op_code())
            .set_recursion_desired(query.recursion_desired())
            .set_recursion_available(true);
        let code = self.fill(&query, &mut resp).await;
        resp.set_response_code(code);
        resp.to_vec().ok()
    }

    async fn fill(&self, query: &Message, resp: &mut Message) -> ResponseCode {
        if query.op_code() != OpCode::Query || query.queries().len() != 1 {
            return ResponseCode::FormErr;
        }
        let q = query.queries()[0].clone();
        resp.add_query(q.clone());
        if q.query_class() != DNSClass::IN {
            return ResponseCode::Refused;
        }
        let name = normalize(&q.name().to_ascii());
        let policy = self.shared.policy.borrow().clone();
        if let Err(r) = policy.check_name(&name, None) {
            tracing::info!("egress DNS stub: {name:?} refused: {r}");
            return ResponseCode::Refused;
        }
        let wanted = q.query_type();
        if wanted != RecordType::A && wanted != RecordType::AAAA {
            return ResponseCode::NoError;
        }
        let addrs = match self.shared.resolver.resolve(&name).await {
            Ok(a) => a,
            Err(ResolveError::NoAddress(_)) => return ResponseCode::NXDomain,
            Err(e) => {
                tracing::info!("egress DNS stub: {e}");
                return ResponseCode::ServFail;
            }
        };
        let allowed: Vec<IpAddr> = addrs
            .into_iter()
            .filter(|ip| policy.check_resolved(*ip, None).is_ok())
            .collect();
        if allowed.is_empty() {
            tracing::info!("egress DNS stub: {name:?} resolves only to denied addresses");
            return ResponseCode::Refused;
        }
        for ip in allowed {
            let rdata = match (ip.to_canonical(), wanted) {
                (IpAddr::V4(v4), RecordType::A) => RData::A(A(v4)),
                (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(v6)),
                _ => continue,
            };
            resp.add_answer(Record::from_rdata(q.name().clone(), ANSWER_TTL, rdata));
        }
        ResponseCode::NoError
    }
}
