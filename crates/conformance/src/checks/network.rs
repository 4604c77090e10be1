//! Network honesty: a driver that says its leases have no network (boundary isolated,
//! `egress` level `no network`) must give a command no way out. A listener the kit opens
//! on this host (every address) must see no connection from a command that tries its
//! port on loopback and on the host's own address; the listener's queue, not the
//! command's word, is the evidence. Drivers whose leases share a host network are not
//! looked at here (their level says so), and neither are those that declare nothing.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, UdpSocket};

use envrt_runtime_core::ExecuteRequest;
use envrt_runtime_core::LeasePolicy;
use envrt_runtime_core::network::NetworkLevel;

use super::{Check, Checked, has_execute};
use crate::context::{Ctx, ensure};

pub(super) const CHECKS: &[Check] = &[
    Check::maybe("network_isolated_has_no_route", has_execute, isolated).promise(
        "A lease whose driver declares no network reaches no listener of the host, on loopback or the host's address.",
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

/// What the script prints when the lease has no TCP client to try with.
const NO_CLIENT: &str = "no-client";

/// A shell script trying a TCP connection to each of `targets` with the first client the
/// lease has (bash's `/dev/tcp`, python3, nc), printing `reached ADDR` for each that
/// answered, or [`NO_CLIENT`].
fn script(targets: &[SocketAddr]) -> String {
    let mut s = String::from(
        "if command -v bash >/dev/null; then try() { bash -c \"exec 3<>/dev/tcp/$1/$2\"; }; \
         elif command -v python3 >/dev/null; then try() { python3 -c 'import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 5)' \"$1\" \"$2\"; }; \
         elif command -v nc >/dev/null; then try() { nc -w 5 \"$1\" \"$2\" </dev/null; }; \
         else echo no-client; exit 0; fi; ",
    );
    for t in targets {
        let (ip, port) = (t.ip(), t.port());
        s.push_str(&format!("if try {ip} {port} 2>/dev/null; then echo reached {ip}; fi; "));
    }
    s.push_str("true");
    s
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
    let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(|e| format!("listen: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let mut targets = vec![SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)];
    targets.extend(host_address().map(|ip| SocketAddr::new(ip, port)));
    let stdout = ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let result = ctx
            .exec(&lease, ExecuteRequest::new("sh", ["-c", &script(&targets)]))
            .await?;
        Ok(String::from_utf8_lossy(&result.stdout).into_owned())
    })?;
    if stdout.trim() == NO_CLIENT {
        return Ok(Checked::NotChecked(
            "the lease has no TCP client to try with (bash, python3 or nc)".into(),
        ));
    }
    // A completed connect waits in the queue: accepting after the command ended sees it.
    let mut reached = Vec::new();
    while let Ok((_, peer)) = listener.accept() {
        reached.push(peer.to_string());
    }
    ensure(reached.is_empty() && stdout.is_empty(), || {
        format!(
            "the driver declares no network, yet the lease reached the host's listener on port {port} (from {}; the command said {:?})",
            reached.join(", "),
            stdout.trim()
        )
    })?;
    Ok(Checked::Yes)
}
