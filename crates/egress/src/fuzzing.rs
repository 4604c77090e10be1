//! Entry points of the egress fuzz targets in the repository's `fuzz/` directory (and of
//! the stable test that replays their corpora): the policy's entries, a client's request
//! head, a DNS query. Not API.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, ResponseCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{Egress, EgressProxy, Host, Limits, Policy, Resolver};

/// A proxy under a policy that allows nothing, whose resolver is never asked.
fn closed_proxy() -> EgressProxy {
    let upstream = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9);
    EgressProxy::new(
        Policy::none(),
        Resolver::new(upstream, Duration::from_secs(1)),
        Limits::default(),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// `fuzz_targets/egress_policy`: the first byte picks `egress`, each further line is an
/// allow entry. An accepted policy's entries, written back as text, parse to the same
/// rules; each exact name it allows is allowed (at its port), and `none` allows nothing.
pub fn egress_policy(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let egress = match which % 3 {
        0 => Egress::None,
        1 => Egress::Allow,
        _ => Egress::Open,
    };
    let entries: Vec<&str> = if text.is_empty() {
        Vec::new()
    } else {
        text.split('\n').collect()
    };
    let policy = match Policy::new(egress, &entries) {
        Ok(policy) => policy,
        Err(e) => return assert!(!e.to_string().is_empty()),
    };
    let shown: Vec<String> = policy.allow().iter().map(ToString::to_string).collect();
    let shown: Vec<&str> = shown.iter().map(String::as_str).collect();
    let again = Policy::new(egress, &shown).unwrap_or_else(|e| panic!("{shown:?} written back is refused: {e}"));
    assert_eq!(again.allow(), policy.allow());
    for rule in policy.allow() {
        if let Host::Name(name) = &rule.host {
            let verdict = policy.check_name(name, rule.port);
            match egress {
                Egress::None => assert!(verdict.is_err()),
                _ => assert!(verdict.is_ok(), "{rule} allowed but {name} refused: {verdict:?}"),
            }
        }
    }
    for entry in &entries {
        let _ = policy.check_name(entry, None);
        if let Ok(ip) = entry.parse::<IpAddr>() {
            let _ = policy.check_ip(ip, 443);
        }
    }
}

/// `fuzz_targets/egress_head`: the bytes as a client's side of one connection to a proxy
/// that allows nothing. The proxy ends the connection, and whatever it answered is a
/// refusal (a 4xx or 5xx status): no request is carried out.
pub fn egress_head(data: &[u8]) {
    let proxy = closed_proxy();
    let (client, server) = tokio::io::duplex(64 * 1024);
    let answer = runtime().block_on(async move {
        let client_side = async move {
            let (mut read, mut write) = tokio::io::split(client);
            let send = async {
                let _ = write.write_all(data).await;
                let _ = write.shutdown().await;
            };
            let mut answer = Vec::new();
            let receive = read.read_to_end(&mut answer);
            let (_, received) = tokio::join!(send, receive);
            received.map(|_| answer)
        };
        let (answer, ()) = tokio::join!(client_side, proxy.serve_io(server));
        answer.expect("reading the proxy's answer")
    });
    if answer.is_empty() {
        return;
    }
    let status = answer
        .strip_prefix(b"HTTP/1.1 ")
        // hyper answers an HTTP/1.0 request in HTTP/1.0
        .or_else(|| answer.strip_prefix(b"HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .unwrap_or_else(|| panic!("not an HTTP answer: {:?}", String::from_utf8_lossy(&answer)));
    assert!(
        matches!(status[0], b'4' | b'5'),
        "a request was answered {}",
        String::from_utf8_lossy(status)
    );
}

/// `fuzz_targets/egress_dns`: the bytes as a query to the DNS stub of a proxy that allows
/// nothing. A query is answered (with its id, as a response, and no address); anything
/// else gets no answer.
pub fn egress_dns(data: &[u8]) {
    let stub = closed_proxy().dns_stub();
    let answer = runtime().block_on(stub.answer(data));
    let query = Message::from_vec(data)
        .ok()
        .filter(|q| q.message_type() == MessageType::Query);
    let Some(query) = query else {
        return assert!(answer.is_none(), "bytes that are no query were answered");
    };
    let Some(answer) = answer else {
        // a query whose answer cannot be written (hickory refuses to encode it)
        return;
    };
    let answer = Message::from_vec(&answer).expect("the stub's answer parses");
    assert_eq!(answer.id(), query.id());
    assert_eq!(answer.message_type(), MessageType::Response);
    assert!(
        answer.answers().is_empty(),
        "an address under a policy that allows nothing"
    );
    assert!(
        matches!(answer.response_code(), ResponseCode::FormErr | ResponseCode::Refused),
        "{:?}",
        answer.response_code()
    );
}
