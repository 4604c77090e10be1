//! Name resolution through a configured upstream DNS server (UDP, hickory-proto's wire
//! format), never through `/etc/resolv.conf`: the proxy decides which names are resolved.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::net::UdpSocket;

/// At most this many addresses are kept from one answer.
pub const MAX_ADDRESSES: usize = 16;
/// The largest UDP answer read.
const MAX_ANSWER: usize = 4096;

/// A resolution that failed; texts pinned by tests.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The upstream says the name has no A or AAAA record (or does not exist).
    #[error("host \"{0}\" does not resolve")]
    NoAddress(String),
    /// The upstream gave no usable answer in time.
    #[error("resolving \"{name}\" failed: {reason}")]
    Failed {
        /// The name.
        name: String,
        /// What went wrong.
        reason: String,
    },
}

/// Resolves names through one upstream DNS server.
#[derive(Clone, Debug)]
pub struct Resolver {
    upstream: SocketAddr,
    timeout: Duration,
}

impl Resolver {
    /// A resolver asking `upstream`, waiting at most `timeout` for each answer.
    pub fn new(upstream: SocketAddr, timeout: Duration) -> Self {
        Self { upstream, timeout }
    }

    /// The upstream server.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// The A and AAAA addresses of `name` (A first), at most [`MAX_ADDRESSES`].
    pub async fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, ResolveError> {
        let failed = |reason: String| ResolveError::Failed {
            name: name.to_string(),
            reason,
        };
        let fqdn = Name::from_ascii(format!("{}.", name.trim_end_matches('.')))
            .map_err(|e| failed(format!("not a DNS name: {e}")))?;
        let (a, aaaa) = tokio::join!(self.query(&fqdn, RecordType::A), self.query(&fqdn, RecordType::AAAA));
        let (a, aaaa) = match (a, aaaa) {
            (Err(e), _) | (_, Err(e)) => return Err(failed(e)),
            (Ok(a), Ok(b)) => (a, b),
        };
        let mut all: Vec<IpAddr> = a.into_iter().chain(aaaa).collect();
        all.truncate(MAX_ADDRESSES);
        if all.is_empty() {
            return Err(ResolveError::NoAddress(name.to_string()));
        }
        Ok(all)
    }

    async fn query(&self, name: &Name, rtype: RecordType) -> Result<Vec<IpAddr>, String> {
        let bind: SocketAddr = if self.upstream.is_ipv4() {
            "0.0.0.0:0".parse().expect("literal")
        } else {
            "[::]:0".parse().expect("literal")
        };
        let sock = UdpSocket::bind(bind).await.map_err(|e| e.to_string())?;
        sock.connect(self.upstream).await.map_err(|e| e.to_string())?;
        let id = random_id();
        let mut msg = Message::new();
        msg.set_id(id)
            .set_message_type(MessageType::Query)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(true)
            .add_query(Query::query(name.clone(), rtype));
        let wire = msg.to_vec().map_err(|e| e.to_string())?;
        sock.send(&wire).await.map_err(|e| e.to_string())?;
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut buf = vec![0u8; MAX_ANSWER];
        loop {
            let n = match tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
                Err(_) => return Err(format!("no answer from {} in time", self.upstream)),
                Ok(r) => r.map_err(|e| e.to_string())?,
            };
            let Ok(answer) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            if answer.id() != id || answer.message_type() != MessageType::Response {
                continue;
            }
            if answer.queries().first().map(Query::name) != Some(name) {
                continue;
            }
            return match answer.response_code() {
                ResponseCode::NoError | ResponseCode::NXDomain => Ok(addresses(&answer)),
                code => Err(format!("the upstream answered {code}")),
            };
        }
    }
}

fn addresses(answer: &Message) -> Vec<IpAddr> {
    answer
        .answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(a) => Some(IpAddr::V6(a.0)),
            _ => None,
        })
        .collect()
}

fn random_id() -> u16 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish() as u16
}
