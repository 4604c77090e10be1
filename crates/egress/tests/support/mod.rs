//! Test hosts on this machine only: two network namespaces joined by a veth pair (the
//! client side, where the proxy runs with no route anywhere else, and the server side with
//! an HTTP, a TLS and a DNS server), removed again when the fixture drops, even on panic.
//! Tests fail instead of skipping when `ENVRT_REQUIRE_NETWORK=1`.

#![allow(dead_code, unreachable_pub)]

pub mod servers;

use std::fs::File;
use std::future::Future;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The server side's public-looking address (TEST-NET-2, on the veth only).
pub const SRV: &str = "198.51.100.2";
/// The client side's address on the same link.
pub const CLI: &str = "198.51.100.1";
/// The server side's private address (for rebinding and explicit-CIDR checks).
pub const SRV_PRIVATE: &str = "10.200.77.2";
/// The server side's IPv6 address (documentation range, on the veth only).
pub const SRV6: &str = "2001:db8:77::2";

/// Two namespaces and the veth between them.
pub struct Net {
    pub cli: String,
    pub srv: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Net {
    /// The namespaces, or `None` (said loudly) when this machine cannot make them.
    pub fn new() -> Option<Net> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let base = format!("envrt-eg-{}-{n}", std::process::id());
        let net = Net {
            cli: format!("{base}-c"),
            srv: format!("{base}-s"),
        };
        match net.build() {
            Ok(()) => Some(net),
            Err(e) => {
                envrt_test_support::Component::Network.skip_or_fail(
                    format_args!("ENVRT_REQUIRE_NETWORK=1 but no test network: {e}"),
                    format_args!("SKIPPED: no test network namespaces: {e}"),
                );
                None
            }
        }
    }

    fn build(&self) -> Result<(), String> {
        let (c, s) = (self.cli.as_str(), self.srv.as_str());
        ip(&["netns", "add", c])?;
        ip(&["netns", "add", s])?;
        ip(&[
            "link", "add", "eg0", "netns", c, "type", "veth", "peer", "name", "eg1", "netns", s,
        ])?;
        for (ns, dev, mine) in [(c, "eg0", [CLI, "10.200.77.1"]), (s, "eg1", [SRV, SRV_PRIVATE])] {
            for a in mine {
                ip(&["-n", ns, "addr", "add", &format!("{a}/24"), "dev", dev])?;
            }
            let v6 = if ns == s { SRV6 } else { "2001:db8:77::1" };
            ip(&["-n", ns, "addr", "add", &format!("{v6}/64"), "dev", dev, "nodad"])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// Runs `make` on a thread inside namespace `ns` (sockets it creates stay there).
    pub fn in_ns<T: Send + 'static>(ns: &str, make: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{ns}");
        std::thread::spawn(move || {
            let f = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            make()
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    }

    /// Runs a test body on a current-thread runtime inside the client namespace.
    /// The body gets a handle to the server side.
    pub fn run<F, Fut>(&self, body: F)
    where
        F: FnOnce(Srv) -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        let srv = Srv(self.srv.clone());
        Self::in_ns(&self.cli, move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(body(srv));
        });
    }
}

/// The server namespace, for binding servers' sockets there.
pub struct Srv(String);

impl Srv {
    /// A TCP listener bound in the server namespace.
    pub fn tcp(&self, addr: &str) -> std::net::TcpListener {
        let addr = addr.to_string();
        Net::in_ns(&self.0, move || {
            let l = std::net::TcpListener::bind(&addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
            l.set_nonblocking(true).unwrap();
            l
        })
    }

    /// A UDP socket bound in the server namespace.
    pub fn udp(&self, addr: &str) -> std::net::UdpSocket {
        let addr = addr.to_string();
        Net::in_ns(&self.0, move || {
            let u = std::net::UdpSocket::bind(&addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
            u.set_nonblocking(true).unwrap();
            u
        })
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in [&self.cli, &self.srv] {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}
