//! The egress proxy (row 13, group `egress`): the `envrt-egress` process a Docker lease's
//! traffic goes through, against a test host on this machine (a network namespace joined
//! by a veth pair, TEST-NET-3 addresses on the link only, `busybox httpd` serving a file
//! from memory and a few lines of `python3` holding connections), measured in the same run
//! as the direct path from the host:
//! - a download through the proxy (plain HTTP, forwarded by hyper) vs straight from the
//!   test host (goal ≥ 0.8×);
//! - the time to a usable tunnel (unix connect, `CONNECT`, the proxy's own connect
//!   upstream, `200`) vs a bare TCP connect to the host (goal ≤ +1 ms at the median);
//! - the proxy's resident memory with 1,000 tunnels open at once (each connected upstream
//!   and waiting for its ClientHello, within the proxy's 10 s bound) vs the same proxy idle.
//!
//! The proxy binary is found beside the bench (`cargo xtask bench` builds it there).
//! Nothing is left behind: the namespace, veth, servers and proxy go when [`Host`] and
//! [`Proxy`] drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::Config;
use crate::measure::{interleave, mibps, percentile_ms, rss_of};
use crate::report::{Figure, Row, Target};

/// The row number.
pub(crate) const NUMBER: u8 = 13;
/// The group key.
pub(crate) const GROUP: &str = "egress";
/// Bytes of the download row.
const DOWNLOAD: u64 = 256 << 20;
/// Tunnels held open at once in the memory row.
const TUNNELS: usize = 1_000;
/// The test host's address and the root namespace's on the same /28.
const HOST: &str = "203.0.113.242";
const GATEWAY: &str = "203.0.113.241";

/// Holds every connection it accepts, reading and dropping what arrives.
const HOLDER: &str = r#"
import resource, selectors, socket, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 9000))
s.listen(4096)
sel = selectors.DefaultSelector()
sel.register(s, selectors.EVENT_READ)
print("ready", flush=True)
while True:
    for key, _ in sel.select():
        if key.fileobj is s:
            c, _ = s.accept()
            c.setblocking(False)
            sel.register(c, selectors.EVENT_READ)
        else:
            try:
                data = key.fileobj.recv(65536)
            except OSError:
                data = b""
            if not data:
                sel.unregister(key.fileobj)
                key.fileobj.close()
"#;

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

/// The test host: its namespace, veth, served directory and servers.
struct Host {
    ns: String,
    veth: String,
    servers: Vec<Child>,
    _www: tempfile::TempDir,
}

impl Host {
    fn new() -> Result<Host, String> {
        let pid = std::process::id();
        let www = tempfile::Builder::new()
            .prefix("envrt-bench-egress-")
            .tempdir_in(if std::path::Path::new("/dev/shm").is_dir() {
                "/dev/shm"
            } else {
                "/tmp"
            })
            .map_err(|e| e.to_string())?;
        let file = std::fs::File::create(www.path().join("big")).map_err(|e| e.to_string())?;
        file.set_len(DOWNLOAD).map_err(|e| e.to_string())?;
        let mut host = Host {
            ns: format!("envrt-bench-eg-{pid}"),
            veth: format!("ebg{}", pid % 100_000),
            servers: Vec::new(),
            _www: www,
        };
        let peer = format!("{}p", host.veth);
        ip(&["netns", "add", &host.ns])?;
        ip(&[
            "link", "add", &host.veth, "type", "veth", "peer", "name", &peer, "netns", &host.ns,
        ])?;
        ip(&["addr", "add", &format!("{GATEWAY}/28"), "dev", &host.veth])?;
        ip(&["link", "set", &host.veth, "up"])?;
        ip(&["-n", &host.ns, "addr", "add", &format!("{HOST}/28"), "dev", &peer])?;
        ip(&["-n", &host.ns, "link", "set", &peer, "up"])?;
        ip(&["-n", &host.ns, "link", "set", "lo", "up"])?;
        let httpd = Command::new("ip")
            .args(["netns", "exec", &host.ns, "busybox", "httpd", "-f", "-p"])
            .arg(format!("{HOST}:80"))
            .arg("-h")
            .arg(host._www.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("busybox httpd: {e}"))?;
        host.servers.push(httpd);
        let mut holder = Command::new("ip")
            .args(["netns", "exec", &host.ns, "python3", "-c", HOLDER, HOST])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("python3: {e}"))?;
        let mut ready = [0u8; 5];
        let started = std::io::Read::read_exact(holder.stdout.as_mut().expect("piped"), &mut ready);
        host.servers.push(holder);
        started.map_err(|e| format!("the connection holder did not start: {e}"))?;
        // busybox httpd answers once it listens: wait for a connect (bounded).
        let deadline = Instant::now() + Duration::from_secs(10);
        let addr: std::net::SocketAddr = format!("{HOST}:80").parse().expect("an address");
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if Instant::now() > deadline {
                return Err("the test host's httpd did not start".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(host)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for server in &mut self.servers {
            let _ = server.kill();
            let _ = server.wait();
        }
        if let Ok(out) = Command::new("ip").args(["netns", "pids", &self.ns]).output() {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        let _ = ip(&["link", "del", &self.veth]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

/// The `envrt-egress` process allowing the test host (raw addresses: no DNS involved).
struct Proxy {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Proxy {
    fn start() -> Result<Proxy, String> {
        let binary = std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("envrt-egress");
        if !binary.is_file() {
            return Err(format!(
                "no {} (cargo build --release -p envrt-egress builds it)",
                binary.display()
            ));
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let policy = dir.path().join("policy.json");
        std::fs::write(&policy, format!(r#"{{"egress":"allow","allow":["{HOST}/32"]}}"#)).map_err(|e| e.to_string())?;
        let socket = dir.path().join("proxy.sock");
        let mut child = Command::new(&binary)
            .arg("--proxy-socket")
            .arg(&socket)
            .arg("--dns-socket")
            .arg(dir.path().join("dns.sock"))
            .arg("--policy")
            .arg(&policy)
            .args(["--upstream", "192.0.2.53:53"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", binary.display()))?;
        let mut line = String::new();
        let read = std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().expect("piped")),
            &mut line,
        );
        let proxy = Proxy {
            child,
            socket,
            _dir: dir,
        };
        match read {
            Ok(_) if line.starts_with("envrt-egress listening") => Ok(proxy),
            _ => Err(format!("the proxy did not start: {line:?}")),
        }
    }

    fn rss_kib(&self) -> f64 {
        rss_of(&self.child.id().to_string())
    }

    /// File descriptors the proxy holds open (two per live tunnel: client and upstream).
    fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .map(|d| d.count())
            .unwrap_or(0)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads `s` to its end; the bytes read.
async fn drain<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Result<u64, String> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        match s.read(&mut buf).await.map_err(|e| e.to_string())? {
            0 => return Ok(n),
            got => n += got as u64,
        }
    }
}

async fn download_direct() -> Result<(), String> {
    let mut s = tokio::net::TcpStream::connect(format!("{HOST}:80"))
        .await
        .map_err(|e| e.to_string())?;
    s.write_all(format!("GET /big HTTP/1.0\r\nHost: {HOST}\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let n = drain(&mut s).await?;
    if n < DOWNLOAD {
        return Err(format!("direct: {n} of {DOWNLOAD} bytes"));
    }
    Ok(())
}

async fn download_proxied(socket: &std::path::Path) -> Result<(), String> {
    let mut s = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| e.to_string())?;
    s.write_all(format!("GET http://{HOST}/big HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let n = drain(&mut s).await?;
    if n < DOWNLOAD {
        return Err(format!("through the proxy: {n} of {DOWNLOAD} bytes"));
    }
    Ok(())
}

/// CONNECT `target` over the proxy's socket, up to the end of its `200` head.
async fn tunnel(socket: &std::path::Path, target: &str) -> Result<tokio::net::UnixStream, String> {
    let mut s = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| e.to_string())?;
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await.map_err(|e| e.to_string())? == 0 {
            return Err("the proxy closed the tunnel before its answer".into());
        }
        head.push(byte[0]);
    }
    if !head.starts_with(b"HTTP/1.1 200") {
        return Err(format!("CONNECT {target}: {}", String::from_utf8_lossy(&head).trim()));
    }
    Ok(s)
}

/// Row 13: the egress proxy's download rate, connect latency and memory under 1,000
/// tunnels.
pub(crate) async fn rows(config: &Config) -> Vec<Row> {
    let names = [
        format!("egress: {} MiB download via the proxy", DOWNLOAD >> 20),
        "egress: connect via the proxy (p50)".to_owned(),
        format!("egress: proxy RSS with {TUNNELS} tunnels open"),
    ];
    let missing = |why: String| {
        names
            .iter()
            .map(|n| Row::missing(GROUP, NUMBER, n.clone(), why.clone()))
            .collect::<Vec<_>>()
    };
    let host = match Host::new() {
        Ok(h) => h,
        Err(e) => return missing(format!("no test host: {e}")),
    };
    let proxy = match Proxy::start() {
        Ok(p) => p,
        Err(e) => return missing(e),
    };
    let mut rows = Vec::new();
    let socket = proxy.socket.clone();
    let measured = interleave(2, 1, config.reps(), |i| {
        let socket = socket.clone();
        async move {
            match i {
                0 => download_proxied(&socket).await,
                _ => download_direct().await,
            }
        }
    })
    .await;
    rows.push(match measured {
        Ok(m) => {
            let rate = |i: usize| mibps(DOWNLOAD, Duration::from_secs_f64(m.p(i, 50.0) / 1e3));
            Row::new(GROUP, NUMBER, names[0].clone(), Figure::mibps(rate(0)))
                .baseline("direct from the test host", Figure::mibps(rate(1)))
                .target(Target::RatioAtLeast(0, 0.8))
                .note("plain HTTP forwarded by the proxy (hyper client); median of the runs")
        }
        Err(e) => Row::missing(GROUP, NUMBER, names[0].clone(), format!("error: {e}")),
    });

    let rounds = if config.quick { 300 } else { 1000 };
    let target = format!("{HOST}:80");
    let mut samples = [Vec::with_capacity(rounds), Vec::with_capacity(rounds)];
    let mut failed = None;
    for _ in 0..rounds {
        let start = Instant::now();
        match tunnel(&proxy.socket, &target).await {
            Ok(_) => samples[0].push(start.elapsed()),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
        let start = Instant::now();
        match tokio::net::TcpStream::connect(&target).await {
            Ok(s) => {
                samples[1].push(start.elapsed());
                drop(s);
            }
            Err(e) => {
                failed = Some(e.to_string());
                break;
            }
        }
    }
    rows.push(match failed {
        None => Row::new(
            GROUP,
            NUMBER,
            names[1].clone(),
            Figure::ms(percentile_ms(&samples[0], 50.0)),
        )
        .baseline(
            "bare TCP connect to the host",
            Figure::ms(percentile_ms(&samples[1], 50.0)),
        )
        .target(Target::PlusAtMost(0, 1.0))
        .note("unix connect + CONNECT + the proxy's upstream connect + 200, vs a TCP connect"),
        Some(e) => Row::missing(GROUP, NUMBER, names[1].clone(), format!("error: {e}")),
    });

    let idle = proxy.rss_kib();
    let holder = format!("{HOST}:9000");
    let mut open = Vec::with_capacity(TUNNELS);
    let mut failed = None;
    for _ in 0..TUNNELS {
        match tunnel(&proxy.socket, &holder).await {
            Ok(s) => open.push(s),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    // Every tunnel is open while the proxy holds both of its sockets (a refused ClientHello
    // closes them).
    let loaded = proxy.rss_kib();
    let fds = proxy.open_fds();
    if failed.is_none() && fds < 2 * TUNNELS {
        failed = Some(format!("the proxy holds {fds} descriptors, fewer than two per tunnel"));
    }
    drop(open);
    rows.push(match failed {
        None => Row::new(GROUP, NUMBER, names[2].clone(), Figure::kib(loaded))
            .baseline("the same proxy idle", Figure::kib(idle))
            .target(Target::AtMost(256.0 * 1024.0))
            .note(format!(
                "{:.0} KiB per tunnel waiting for its ClientHello (a pumping tunnel adds two 64 KiB buffers); at most 1024 connections",
                (loaded - idle) / TUNNELS as f64
            )),
        Some(e) => Row::missing(GROUP, NUMBER, names[2].clone(), format!("error: {e}")),
    });
    drop(proxy);
    drop(host);
    rows
}
