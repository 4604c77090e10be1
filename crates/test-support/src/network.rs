//! A test host on this machine for the drivers' egress tests: a network namespace joined to
//! the root namespace by a veth pair, with an HTTP server (`busybox httpd`) and a DNS server
//! that answers from a fixed map and writes down every name it is asked (a few lines of
//! `python3`), both run inside the namespace with `ip netns exec`. Addresses are
//! documentation ranges (198.51.100.0/24) on the veth only, and the whole range is a
//! blackhole route in the root namespace, so no test packet can leave the machine even
//! when a host is gone; everything else is removed when the fixture drops.
//! The built `envrt-egress` binary is here too. Standard library only, as the crate is.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::Component;

/// The DNS server: answers A queries from `names.txt` (`name address` lines), REFUSED
/// never, NXDOMAIN for unknown names; appends each asked name to `asked.txt`.
const DNS_SERVER: &str = r#"
import socket, struct, sys
addr, folder = sys.argv[1], sys.argv[2]
names = {}
for line in open(folder + "/names.txt"):
    if line.strip():
        n, a = line.split()
        names[n] = a
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((addr, 53))
print("ready", flush=True)
while True:
    q, peer = s.recvfrom(4096)
    i, labels = 12, []
    while q[i] != 0:
        labels.append(q[i + 1:i + 1 + q[i]].decode("ascii", "replace"))
        i += 1 + q[i]
    name = ".".join(labels).lower()
    qtype = struct.unpack(">H", q[i + 1:i + 3])[0]
    with open(folder + "/asked.txt", "a") as log:
        log.write(name + "\n")
    question = q[12:i + 5]
    ident = q[:2]
    if name in names and qtype == 1:
        answer = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + socket.inet_aton(names[name])
        head = ident + struct.pack(">HHHHH", 0x8180, 1, 1, 0, 0)
    elif name in names:
        answer = b""
        head = ident + struct.pack(">HHHHH", 0x8180, 1, 0, 0, 0)
    else:
        answer = b""
        head = ident + struct.pack(">HHHHH", 0x8183, 1, 0, 0, 0)
    s.sendto(head + question + answer, peer)
"#;

/// In [`TestHost::new`]'s names: the test host's own address.
pub const HOST: &str = "HOST";

/// One test host: its namespace, its veth, its servers.
pub struct TestHost {
    pub(crate) ns: String,
    veth: String,
    /// The host's address (its HTTP server listens on ports 80 and 8080, its DNS server on
    /// 53). Over HTTP it serves the body at `/` and a redirect to `http://other.test/` at
    /// `/cgi-bin/redirect`.
    pub address: String,
    /// The root namespace's address on the same link.
    pub gateway: String,
    pub(crate) folder: PathBuf,
    pub(crate) servers: Vec<Child>,
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

/// A CGI program for `busybox httpd`: `/cgi-bin/redirect` answers `302 Found` with
/// `Location: http://other.test/` (a redirect to another host, for the redirect checks).
const REDIRECT_CGI: &str = "#!/bin/sh\nprintf 'Status: 302 Found\\r\\nLocation: http://other.test/\\r\\n\\r\\n'\n";

fn write_redirect(www: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let dir = www.join("cgi-bin");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let program = dir.join("redirect");
    std::fs::write(&program, REDIRECT_CGI).map_err(|e| e.to_string())?;
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())
}

impl TestHost {
    /// A host on the first free subnet `198.51.100.{16·k}/28` (at most 16 at once on the
    /// machine, 16 per process), serving `names` (`(name, address)`, where the address [`HOST`] stands for
    /// the host's own) from its DNS server and `body` at `/` over HTTP; `None`, said loudly, where this machine cannot make one (fails instead
    /// with `ENVRT_REQUIRE_NETWORK=1`).
    pub fn new(names: &[(&str, &str)], body: &str) -> Option<TestHost> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        match TestHost::build(n, names, body) {
            Ok(host) => Some(host),
            Err(e) => {
                Component::Network.skip_or_fail(
                    format_args!("ENVRT_REQUIRE_NETWORK=1 but no test host: {e}"),
                    format_args!("SKIPPED: no test host network namespace: {e}"),
                );
                None
            }
        }
    }

    fn build(n: usize, names: &[(&str, &str)], body: &str) -> Result<TestHost, String> {
        if n >= 16 {
            return Err("at most 16 test hosts per process".into());
        }
        // Test processes run at once (the suite's binaries, helpers' runs): the subnet is
        // chosen under a lock among those no live host holds, after the hosts of processes
        // that died without their destructor (an exit, a SIGKILL) are removed.
        let lock = HostsLock::take()?;
        remove_stale_hosts();
        let slot = free_slot()?;
        let pid = std::process::id();
        let base = 16 * slot;
        let mut host = TestHost {
            ns: format!("envrt-th-{pid}-{n}"),
            veth: format!("eth{}x{n}", pid % 100_000),
            address: format!("198.51.100.{}", base + 2),
            gateway: format!("198.51.100.{}", base + 1),
            folder: std::env::temp_dir().join(format!("envrt-test-host-{pid}-{n}")),
            servers: Vec::new(),
        };
        let _ = std::fs::remove_dir_all(&host.folder);
        std::fs::create_dir_all(host.folder.join("www")).map_err(|e| e.to_string())?;
        std::fs::write(host.folder.join("www/index.html"), body).map_err(|e| e.to_string())?;
        write_redirect(&host.folder.join("www"))?;
        let map: String = names
            .iter()
            .map(|(name, a)| format!("{name} {}\n", if *a == HOST { host.address.as_str() } else { a }))
            .collect();
        std::fs::write(host.folder.join("names.txt"), map).map_err(|e| e.to_string())?;
        std::fs::write(host.folder.join("asked.txt"), "").map_err(|e| e.to_string())?;
        std::fs::write(host.folder.join("dns.py"), DNS_SERVER).map_err(|e| e.to_string())?;
        // Nothing of the test range ever leaves the machine: a name a faulty proxy resolves
        // to a host that is gone hits this, not the default route.
        ip(&["route", "replace", "blackhole", "198.51.100.0/24"])?;
        ip(&["netns", "add", &host.ns])?;
        let peer = format!("{}p", host.veth);
        ip(&[
            "link", "add", &host.veth, "type", "veth", "peer", "name", &peer, "netns", &host.ns,
        ])?;
        ip(&["addr", "add", &format!("{}/28", host.gateway), "dev", &host.veth])?;
        ip(&["link", "set", &host.veth, "up"])?;
        ip(&[
            "-n",
            &host.ns,
            "addr",
            "add",
            &format!("{}/28", host.address),
            "dev",
            &peer,
        ])?;
        ip(&["-n", &host.ns, "link", "set", &peer, "up"])?;
        ip(&["-n", &host.ns, "link", "set", "lo", "up"])?;
        for port in ["80", "8080"] {
            let httpd = Command::new("ip")
                .args(["netns", "exec", &host.ns, "busybox", "httpd", "-f", "-p"])
                .arg(format!("{}:{port}", host.address))
                .arg("-h")
                .arg(host.folder.join("www"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("busybox httpd: {e}"))?;
            host.servers.push(httpd);
        }
        let mut dns = Command::new("ip")
            .args(["netns", "exec", &host.ns, "python3", "-c", DNS_SERVER, &host.address])
            .arg(&host.folder)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("python3: {e}"))?;
        let mut ready = [0u8; 5];
        std::io::Read::read_exact(dns.stdout.as_mut().expect("piped"), &mut ready)
            .map_err(|e| format!("the DNS server did not start: {e}"))?;
        host.servers.push(dns);
        host.wait_for_http()?;
        drop(lock);
        Ok(host)
    }

    fn wait_for_http(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let target: std::net::SocketAddr = format!("{}:80", self.address).parse().map_err(|_| "bad address")?;
        while std::net::TcpStream::connect_timeout(&target, Duration::from_millis(200)).is_err() {
            if Instant::now() > deadline {
                return Err("the HTTP server did not start".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The host's network namespace (for `ip netns exec`, to serve from it).
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// Takes the host's end of its link down (`false`) or up again (`true`): while it is
    /// down, every packet between the host and this machine is lost, but the addresses and
    /// routes stay and no socket on either side is told, as when a network flaps.
    pub fn set_link(&self, up: bool) -> Result<(), String> {
        let peer = format!("{}p", self.veth);
        ip(&["-n", &self.ns, "link", "set", &peer, if up { "up" } else { "down" }])
    }

    /// Every name the DNS server was asked, in order.
    pub fn asked(&self) -> Vec<String> {
        std::fs::read_to_string(self.folder.join("asked.txt"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The DNS server's address.
    pub fn dns(&self) -> std::net::SocketAddr {
        format!("{}:53", self.address).parse().expect("an address")
    }
}

/// The machine-wide lock under which a test host picks its subnet: an exclusive `flock`,
/// which the kernel lets go of when its holder dies.
struct HostsLock {
    /// Held open: closing it (at drop or death) lets go of the lock.
    _file: std::fs::File,
}

impl HostsLock {
    fn take() -> Result<HostsLock, String> {
        let path = std::env::temp_dir().join("envrt-test-hosts.lock");
        let file = std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("the test hosts' lock {}: {e}", path.display()))?;
        file.lock()
            .map_err(|e| format!("the test hosts' lock {}: {e}", path.display()))?;
        Ok(HostsLock { _file: file })
    }
}

/// Removes the test hosts (namespace, servers, veth pair, folder) of processes that are
/// gone: a test binary that ends with `process::exit` or is killed runs no destructor.
fn remove_stale_hosts() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(ns) = line.split_whitespace().next() else {
            continue;
        };
        let Some(rest) = ns.strip_prefix("envrt-th-") else {
            continue;
        };
        let Some((pid, _)) = rest.split_once('-') else { continue };
        if pid.parse::<u32>().is_err() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
            for inside in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", inside]).status();
            }
        }
        // The namespace's end takes its veth peer, and the pair with it.
        let _ = ip(&["netns", "del", ns]);
        let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("envrt-test-host-{rest}")));
    }
}

/// The first of the 16 test subnets whose gateway address no interface holds.
fn free_slot() -> Result<usize, String> {
    let out = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    let held = String::from_utf8_lossy(&out.stdout).into_owned();
    (0..16)
        .find(|slot| !held.contains(&format!(" 198.51.100.{}/28", 16 * slot + 1)))
        .ok_or_else(|| "all 16 test subnets (198.51.100.0/24) are in use".into())
}

impl Drop for TestHost {
    fn drop(&mut self) {
        for server in &mut self.servers {
            let _ = server.kill();
            let _ = server.wait();
        }
        // `ip netns exec` forks: end whatever still runs in the namespace.
        if let Ok(out) = Command::new("ip").args(["netns", "pids", &self.ns]).output() {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        let _ = ip(&["link", "del", &self.veth]);
        let _ = ip(&["netns", "del", &self.ns]);
        let _ = std::fs::remove_dir_all(&self.folder);
    }
}

/// The target directory this build uses (`CARGO_TARGET_DIR`, else the workspace's).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
    }
}

/// The `envrt-egress` binary, built here by `cargo build` (a no-op once built). Panics when
/// the build fails.
pub fn egress_binary() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .args(["build", "-p", "envrt-egress", "--bin", "envrt-egress"])
        .current_dir(&root)
        .status()
        .expect("run cargo build");
    assert!(status.success(), "the build of envrt-egress failed");
    target_dir().join("debug/envrt-egress")
}
