//! Network honesty: a driver that says its leases have no network (boundary isolated,
//! `egress` level `no network`) must give a command no way out. A listener the kit opens
//! on this host (every address, IPv6 and IPv4) must see no connection, and a UDP socket no
//! datagram, from a command that tries them on IPv4 and IPv6 loopback and on the host's
//! own address; the sockets' queues, not the command's word, are the evidence. Drivers whose leases share a host network are not
//! looked at here (their level says so), and neither are those that declare nothing.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};

use envrt_runtime_core::ExecuteRequest;
use envrt_runtime_core::LeasePolicy;
use envrt_runtime_core::network::NetworkLevel;

use super::{Check, Checked, has_execute};
use crate::context::{Ctx, ensure};

pub(super) const CHECKS: &[Check] = &[
    Check::maybe("network_isolated_has_no_route", has_execute, isolated).promise(
        "A lease whose driver declares no network reaches no TCP or UDP socket of the host, on loopback or its address.",
    ),
];

/// The host's own non-loopback IPv4 address, when it has a route to pick one with (a UDP
/// connect sends nothing).
fn host_address() -> Option<IpAddr> {
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    socket.connect(("192.0.2.1", 9)).ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// What the script prints when the lease has no client to try with.
const NO_CLIENT: &str = "no-client";

/// A shell script trying a TCP connection to each of `tcp` and sending a UDP datagram to
/// each of `udp` with the first client the lease has (bash's `/dev/tcp` and `/dev/udp`,
/// python3, nc), printing `reached ADDR` for each connection that was answered, or
/// [`NO_CLIENT`].
fn script(tcp: &[SocketAddr], udp: &[SocketAddr]) -> String {
    let mut s = String::from(
        "if command -v bash >/dev/null; then try() { bash -c \"exec 3<>/dev/tcp/$1/$2\"; }; \
         send() { bash -c \"printf x >/dev/udp/$1/$2\"; }; \
         elif command -v python3 >/dev/null; then \
         try() { python3 -c 'import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 5)' \"$1\" \"$2\"; }; \
         send() { python3 -c 'import socket,sys; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (sys.argv[1], int(sys.argv[2])))' \"$1\" \"$2\"; }; \
         elif command -v nc >/dev/null; then try() { nc -w 5 \"$1\" \"$2\" </dev/null; }; \
         send() { printf x | nc -u -w 1 \"$1\" \"$2\"; }; \
         else echo no-client; exit 0; fi; ",
    );
    for t in tcp {
        let (ip, port) = (t.ip(), t.port());
        s.push_str(&format!("if try {ip} {port} 2>/dev/null; then echo reached {ip}; fi; "));
    }
    for t in udp {
        s.push_str(&format!("send {} {} 2>/dev/null; ", t.ip(), t.port()));
    }
    s.push_str("true");
    s
}

/// A socket on every address: IPv6 and IPv4 together where the host has IPv6, else IPv4.
fn bind_any<T>(bind: impl Fn(SocketAddr) -> std::io::Result<T>) -> Result<(T, bool), String> {
    match bind(SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), 0)) {
        Ok(socket) => Ok((socket, true)),
        Err(_) => bind(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0))
            .map(|socket| (socket, false))
            .map_err(|e| format!("bind: {e}")),
    }
}

fn isolated(ctx: &Ctx) -> Result<Checked, String> {
    let level = ctx.block_on(async {
        let environment = ctx
            .runtime
            .environment(&ctx.environment_id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("environment {} is gone", ctx.environment_id))?;
        ctx.runtime.network_level(&environment).map_err(|e| e.to_string())
    })?;
    if level != NetworkLevel::NoNetwork {
        return Ok(Checked::NotChecked(format!("the driver's leases get {level}")));
    }
    let (listener, v6) = bind_any(TcpListener::bind)?;
    let (datagrams, _) = bind_any(UdpSocket::bind)?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    datagrams.set_nonblocking(true).map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let udp_port = datagrams.local_addr().map_err(|e| e.to_string())?.port();
    let mut hosts: Vec<IpAddr> = vec![Ipv4Addr::LOCALHOST.into()];
    hosts.extend(v6.then_some(IpAddr::from(Ipv6Addr::LOCALHOST)));
    hosts.extend(host_address());
    let tcp: Vec<SocketAddr> = hosts.iter().map(|ip| SocketAddr::new(*ip, port)).collect();
    let udp: Vec<SocketAddr> = hosts.iter().map(|ip| SocketAddr::new(*ip, udp_port)).collect();
    let stdout = ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let result = ctx
            .exec(&lease, ExecuteRequest::new("sh", ["-c", &script(&tcp, &udp)]))
            .await?;
        Ok(String::from_utf8_lossy(&result.stdout).into_owned())
    })?;
    if stdout.trim() == NO_CLIENT {
        return Ok(Checked::NotChecked(
            "the lease has no TCP client to try with (bash, python3 or nc)".into(),
        ));
    }
    // A completed connect waits in the queue, and a datagram delivered on this host in the
    // socket's buffer: looking after the command ended sees both.
    let mut reached = Vec::new();
    while let Ok((_, peer)) = listener.accept() {
        reached.push(format!("tcp from {peer}"));
    }
    let mut buf = [0u8; 64];
    while let Ok((_, peer)) = datagrams.recv_from(&mut buf) {
        reached.push(format!("udp from {peer}"));
    }
    ensure(reached.is_empty() && stdout.is_empty(), || {
        format!(
            "the driver declares no network, yet the lease reached the host's listeners on tcp port {port} / udp port {udp_port} ({}; the command said {:?})",
            reached.join(", "),
            stdout.trim()
        )
    })?;
    Ok(Checked::Yes)
}
