//! The host side of a lease's egress, shared by every driver that runs one (Docker and
//! the sandbox; contract section 10): finding the `envrt-egress` binary and the upstream
//! DNS server, writing a lease's policy file, starting the lease's proxy on the host,
//! updating it (SIGHUP) and stopping it, and the variables that point a lease's programs
//! at it. What differs between drivers (where the sockets appear in the lease and who runs
//! the forwarder there) stays in each driver.
//!
//! A lease's egress lives in one host directory of the driver's (`lease_dir`): the policy
//! `egress.json` (0600), the proxy's `egress.pid` and `egress.log`, and the sockets
//! directory the driver names (`proxy.sock`, `dns.sock`).

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use envrt_driver_api::DriverError;
use envrt_driver_api::network::Policy;
use tokio::io::AsyncBufReadExt;

pub mod credentials;

/// The egress binary's name.
pub const EGRESS_BINARY: &str = "envrt-egress";
/// The variable naming the egress binary.
pub const EGRESS_VAR: &str = "ENVRT_EGRESS";
/// The proxy address the lease's programs are pointed at.
pub const PROXY_ADDRESS: &str = "127.0.0.1:3128";
/// The DNS address the lease's resolver names.
pub const DNS_ADDRESS: &str = "127.0.0.1:53";
/// The proxy socket's name in the sockets directory.
pub const PROXY_SOCKET: &str = "proxy.sock";
/// The DNS socket's name in the sockets directory.
pub const DNS_SOCKET: &str = "dns.sock";
/// How long a starting proxy has to say it listens.
const START_BOUND: Duration = Duration::from_secs(10);

/// What a driver needs to run a lease's egress: the proxy binary and the upstream DNS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressSetup {
    /// The `envrt-egress` binary.
    pub binary: PathBuf,
    /// The DNS server the proxy resolves names through.
    pub upstream: SocketAddr,
}

/// The first `nameserver` of a resolv.conf text, port 53.
pub fn first_nameserver(text: &str) -> Option<SocketAddr> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next()? == "nameserver")
            .then(|| words.next()?.parse::<std::net::IpAddr>().ok())
            .flatten()
            .map(|ip| SocketAddr::new(ip, 53))
    })
}

/// The egress set-up, or why there is none: the binary (`configured`, else found as the
/// supervisor is: [`EGRESS_VAR`], beside the running executable, `PATH`) and the upstream
/// (`upstream`, else the host's first nameserver); `section` names the driver's `envrt.toml`
/// section in the refusal.
pub fn resolve_setup(
    configured: Option<&Path>,
    upstream: Option<SocketAddr>,
    section: &str,
) -> Result<EgressSetup, String> {
    let binary = match configured {
        Some(path) if envrt_driver_api::descriptor::is_executable(path) => path.to_owned(),
        Some(path) => {
            return Err(format!(
                "the egress proxy \"{}\" is not an executable file",
                path.display()
            ));
        }
        None => crate::locate_named(EGRESS_BINARY, EGRESS_VAR)?,
    };
    let upstream = match upstream {
        Some(upstream) => upstream,
        None => std::fs::read_to_string("/etc/resolv.conf")
            .ok()
            .as_deref()
            .and_then(first_nameserver)
            .ok_or_else(|| {
                format!(
                    "no upstream DNS server: set [{section}] egress_dns, or give the host a nameserver in /etc/resolv.conf"
                )
            })?,
    };
    Ok(EgressSetup { binary, upstream })
}

/// The variables that point a lease's programs at its proxy: `http_proxy`, `https_proxy`
/// and their upper-case forms (`http://127.0.0.1:3128`), `no_proxy` and `NO_PROXY`
/// (`localhost,127.0.0.1,::1`), since tools read different ones.
pub fn proxy_env() -> Vec<(String, String)> {
    let proxy = format!("http://{PROXY_ADDRESS}");
    let mut env: Vec<(String, String)> = ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"]
        .iter()
        .map(|name| ((*name).to_owned(), proxy.clone()))
        .collect();
    env.extend(
        ["no_proxy", "NO_PROXY"]
            .iter()
            .map(|name| ((*name).to_owned(), "localhost,127.0.0.1,::1".to_owned())),
    );
    env
}

/// The lease's policy file in its directory, the proxy's `--policy`.
const POLICY_FILE: &str = "egress.json";

/// Writes `policy` as the lease's policy file, atomically (another name, then a rename).
pub fn write_policy(lease_dir: &Path, policy: &Policy) -> Result<(), DriverError> {
    let json = serde_json::to_vec(policy).map_err(|e| DriverError::other(format!("cannot encode the policy: {e}")))?;
    let next = lease_dir.join(format!("{POLICY_FILE}.next"));
    std::fs::write(&next, json).map_err(|e| DriverError::io(format!("cannot write {}", next.display()), e))?;
    std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| DriverError::io(format!("cannot write {}", next.display()), e))?;
    let path = lease_dir.join(POLICY_FILE);
    std::fs::rename(&next, &path).map_err(|e| DriverError::io(format!("cannot write {}", path.display()), e))
}

/// The pid of the lease's running proxy: recorded, alive, and serving `sockets`.
pub fn running_proxy(lease_dir: &Path, sockets: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(lease_dir.join("egress.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let socket = sockets.join(PROXY_SOCKET);
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    cmdline
        .split(|b| *b == 0)
        .any(|arg| arg == socket.as_os_str().as_encoded_bytes())
        .then_some(pid)
}

/// What a proxy that brokers credentials is started with: its extra options and the
/// secrets it reads on its stdin (never on its command line, never in a file).
pub struct ProxyCredentials {
    /// `--credentials-stdin` and the options that go with it.
    pub args: Vec<std::ffi::OsString>,
    /// The credentials, JSON, written to the proxy's stdin and then closed.
    pub stdin: Vec<u8>,
}

impl std::fmt::Debug for ProxyCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyCredentials")
            .field("args", &self.args)
            .field("stdin", &format_args!("{} bytes", self.stdin.len()))
            .finish()
    }
}

/// Starts the lease's proxy on the host (sockets in `sockets`, policy and records in
/// `lease_dir`) and waits until it listens. It runs in a session of its own, so it
/// outlives the program that started it and gets none of its terminal's signals.
pub async fn start_proxy(
    setup: &EgressSetup,
    lease: &str,
    lease_dir: &Path,
    sockets: &Path,
    credentials: Option<&ProxyCredentials>,
) -> Result<(), DriverError> {
    let log = lease_dir.join("egress.log");
    let log_file =
        std::fs::File::create(&log).map_err(|e| DriverError::io(format!("cannot create {}", log.display()), e))?;
    let mut command = tokio::process::Command::new(&setup.binary);
    command
        .arg("--proxy-socket")
        .arg(sockets.join(PROXY_SOCKET))
        .arg("--dns-socket")
        .arg(sockets.join(DNS_SOCKET))
        .arg("--policy")
        .arg(lease_dir.join(POLICY_FILE))
        .arg("--upstream")
        .arg(setup.upstream.to_string())
        .env_clear()
        .stdin(match credentials {
            Some(_) => std::process::Stdio::piped(),
            None => std::process::Stdio::null(),
        })
        .stdout(std::process::Stdio::piped())
        .stderr(log_file)
        .process_group(0);
    if let Some(credentials) = credentials {
        command.args(&credentials.args);
    }
    let mut child = command
        .spawn()
        .map_err(|e| DriverError::io(format!("cannot start {}", setup.binary.display()), e))?;
    // The secrets go over stdin (never argv, never a file), then end of file.
    if let (Some(credentials), Some(mut stdin)) = (credentials, child.stdin.take()) {
        use tokio::io::AsyncWriteExt;
        let written = tokio::time::timeout(START_BOUND, stdin.write_all(&credentials.stdin)).await;
        drop(stdin);
        if !matches!(written, Ok(Ok(()))) {
            let _ = child.start_kill();
            return Err(DriverError::other(format!(
                "the egress proxy of lease {lease} did not take its credentials"
            )));
        }
    }
    let mut line = String::new();
    let stdout = child.stdout.take().expect("piped");
    let said = tokio::time::timeout(START_BOUND, tokio::io::BufReader::new(stdout).read_line(&mut line)).await;
    let expected = format!("envrt-egress listening on {}", sockets.join(PROXY_SOCKET).display());
    if matches!(said, Ok(Ok(_))) && line.trim_end() == expected {
        let pid = child.id().unwrap_or(0);
        return std::fs::write(lease_dir.join("egress.pid"), pid.to_string())
            .map_err(|e| DriverError::io("cannot record the egress proxy's pid", e));
    }
    let _ = child.start_kill();
    let why = std::fs::read_to_string(&log).unwrap_or_default();
    Err(DriverError::other(format!(
        "the egress proxy of lease {lease} did not start: {}",
        why.trim()
    )))
}

/// Stops the lease's proxy, if one runs (its pid checked against its command line first).
pub fn stop_proxy(lease_dir: &Path, sockets: &Path) {
    if let Some(pid) = running_proxy(lease_dir, sockets)
        && let Some(pid) = rustix::process::Pid::from_raw(pid)
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// How long an update waits for the proxy to say it applied the new policy.
const RELOAD_BOUND: std::time::Duration = std::time::Duration::from_secs(10);

/// Tells the lease's running proxy to read its policy file again and waits (bounded by
/// 10 s) until it says it applied that file (`egress.json.applied` holds the
/// same bytes), so the policy is in force when the update returns: `Ok(false)` when none
/// runs (the caller starts one).
pub async fn reload_proxy(lease: &str, lease_dir: &Path, sockets: &Path) -> Result<bool, DriverError> {
    let Some(pid) = running_proxy(lease_dir, sockets).and_then(rustix::process::Pid::from_raw) else {
        return Ok(false);
    };
    let policy = lease_dir.join(POLICY_FILE);
    // What `envrt-egress` writes once it applied the file (`FILE.applied`).
    let applied = lease_dir.join(format!("{POLICY_FILE}.applied"));
    let wanted = std::fs::read(&policy).map_err(|e| DriverError::io(format!("cannot read {}", policy.display()), e))?;
    rustix::process::kill_process(pid, rustix::process::Signal::HUP)
        .map_err(|e| DriverError::other(format!("cannot signal the egress proxy of lease {lease}: {e}")))?;
    let until = std::time::Instant::now() + RELOAD_BOUND;
    loop {
        if std::fs::read(&applied).is_ok_and(|bytes| bytes == wanted) {
            return Ok(true);
        }
        if std::time::Instant::now() >= until {
            return Err(DriverError::other(format!(
                "the egress proxy of lease {lease} did not apply the new policy within {} s",
                RELOAD_BOUND.as_secs()
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_is_the_first_nameserver_of_resolv_conf() {
        assert_eq!(
            first_nameserver("# c\nsearch x\nnameserver 192.0.2.53\nnameserver 192.0.2.54\n"),
            Some("192.0.2.53:53".parse().unwrap())
        );
        assert_eq!(
            first_nameserver("nameserver 2001:db8::53\n"),
            Some("[2001:db8::53]:53".parse().unwrap())
        );
        assert_eq!(first_nameserver("nameserver bogus\n"), None);
        assert_eq!(first_nameserver(""), None);
    }

    #[test]
    fn a_missing_binary_is_named_and_a_given_one_is_taken() {
        let missing = Path::new("/nonexistent/envrt-egress");
        assert_eq!(
            resolve_setup(Some(missing), None, "docker"),
            Err("the egress proxy \"/nonexistent/envrt-egress\" is not an executable file".into())
        );
        let upstream: SocketAddr = "192.0.2.53:53".parse().unwrap();
        assert_eq!(
            resolve_setup(Some(Path::new("/bin/true")), Some(upstream), "sandbox"),
            Ok(EgressSetup {
                binary: "/bin/true".into(),
                upstream
            })
        );
    }

    #[test]
    fn the_proxy_variables_name_the_loopback_proxy_in_both_cases() {
        let env = proxy_env();
        assert_eq!(env.len(), 6);
        assert!(env.contains(&("HTTPS_PROXY".into(), "http://127.0.0.1:3128".into())));
        assert!(env.contains(&("no_proxy".into(), "localhost,127.0.0.1,::1".into())));
    }
}
