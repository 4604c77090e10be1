//! One lease's egress enforcement as a process of its own (the `envrt-egress` binary), so
//! that it lives as long as the lease and not as long as the program that acquired it (a
//! lease outlives `envrt lease acquire`). A driver starts one per lease whose policy lets
//! anything out, and binds its two sockets into the lease:
//!
//! ```text
//! envrt-egress --proxy-socket DIR/egress.sock --dns-socket DIR/dns.sock \
//!              --policy DIR/policy.json --upstream 192.0.2.53:53
//! ```
//!
//! - The proxy ([`EgressProxy`]) on `--proxy-socket`, the DNS stub on
//!   `--dns-socket` (DNS-over-TCP framing: a two-byte length before each message), both
//!   sockets mode 0666 (the directory they are made in is what keeps others out: the driver
//!   makes it private to the lease).
//! - `--policy` is the JSON form of a [`Policy`] (`{"egress":"allow","allow":[...]}`), at
//!   most [`MAX_POLICY_BYTES`]; `--upstream` the one DNS server names are resolved through.
//! - Once both sockets accept it prints `envrt-egress listening on PROXY_SOCKET` on stdout.
//! - SIGHUP re-reads the policy file and applies it: new connections and DNS answers use it
//!   at once and open connections it denies are cut; then it writes the bytes it applied to
//!   `FILE.applied` beside it (another name, then a rename), which the driver's update waits
//!   for. A file that cannot be read or parsed
//!   keeps the policy in force, and says why on stderr (`envrt-egress: policy not reloaded:
//!   ...`). The driver writes the new file under another name and renames it over the old.
//! - SIGTERM or SIGINT end it (exit 0).
//! - Credential brokering (`--credentials-stdin --ca-bundle FILE [--base-bundle FILE]
//!   [--extra-roots FILE]`): the resolved credentials are read from stdin (a JSON list of
//!   [`Brokered`](crate::Brokered), at most [`MAX_CREDENTIALS_BYTES`](crate::credential_stdin::MAX_CREDENTIALS_BYTES), until end of file:
//!   never on the command line or in a file), a CA is made for the lease in this process,
//!   and its certificate (followed by `--base-bundle`, the host's roots, when given) is
//!   written to `--ca-bundle` before the listening line. `--extra-roots` adds trusted roots
//!   for the real hosts. See [`crate::credential_stdin`].

use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::signal::unix::{SignalKind, signal};

use crate::{EgressProxy, Limits, Policy, Resolver};

/// The largest policy file read.
pub const MAX_POLICY_BYTES: u64 = 1024 * 1024;
/// How long the resolver waits for the upstream server's answer.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The binary's options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Where the proxy listens.
    pub proxy_socket: PathBuf,
    /// Where the DNS stub listens.
    pub dns_socket: PathBuf,
    /// The policy file.
    pub policy: PathBuf,
    /// The DNS server names are resolved through.
    pub upstream: SocketAddr,
    /// Credential brokering, when asked for.
    pub credentials: Option<crate::credential_stdin::BrokerOptions>,
}

/// The usage line.
pub const USAGE: &str = "usage: envrt-egress --proxy-socket PATH --dns-socket PATH --policy FILE --upstream ADDR:PORT [--credentials-stdin --ca-bundle FILE [--base-bundle FILE] [--extra-roots FILE]]";

impl Options {
    /// Parses the command line (without the program name); the error is the exact text.
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let (mut proxy, mut dns, mut policy, mut upstream) = (None, None, None, None);
        let mut broker = crate::credential_stdin::BrokerArgs::default();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            if arg == "--credentials-stdin" {
                broker.stdin = true;
                continue;
            }
            let value = args.next().cloned().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--proxy-socket" => proxy = Some(PathBuf::from(value?)),
                "--dns-socket" => dns = Some(PathBuf::from(value?)),
                "--policy" => policy = Some(PathBuf::from(value?)),
                "--upstream" => {
                    let text = value?;
                    upstream = Some(
                        text.parse::<SocketAddr>()
                            .map_err(|_| format!("--upstream takes ADDRESS:PORT, not {text:?}"))?,
                    );
                }
                "--ca-bundle" => broker.ca_bundle = Some(PathBuf::from(value?)),
                "--base-bundle" => broker.base_bundle = Some(PathBuf::from(value?)),
                "--extra-roots" => broker.extra_roots = Some(PathBuf::from(value?)),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(Options {
            proxy_socket: proxy.ok_or("--proxy-socket PATH is required")?,
            dns_socket: dns.ok_or("--dns-socket PATH is required")?,
            policy: policy.ok_or("--policy FILE is required")?,
            upstream: upstream.ok_or("--upstream ADDR:PORT is required")?,
            credentials: broker.check()?,
        })
    }
}

/// The policy in `path`: its JSON form, at most [`MAX_POLICY_BYTES`].
pub fn read_policy(path: &Path) -> Result<Policy, String> {
    read_policy_bytes(path).map(|(policy, _)| policy)
}

/// The name beside the policy file where a reload writes the bytes it applied.
fn applied_path(policy: &Path) -> PathBuf {
    let mut name = policy.file_name().unwrap_or_default().to_os_string();
    name.push(".applied");
    policy.with_file_name(name)
}

/// Writes `bytes`, the policy just applied, to [`applied_path`] (another name, then a
/// rename): the driver's update waits for it, so a policy is in force when the update
/// returns.
fn acknowledge(policy: &Path, bytes: &[u8]) -> Result<(), String> {
    let done = applied_path(policy);
    let mut next = done.clone().into_os_string();
    next.push(".next");
    let next = PathBuf::from(next);
    std::fs::write(&next, bytes)
        .and_then(|()| std::fs::rename(&next, &done))
        .map_err(|e| format!("cannot write {}: {e}", done.display()))
}

fn read_policy_bytes(path: &Path) -> Result<(Policy, Vec<u8>), String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut text = Vec::new();
    file.take(MAX_POLICY_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if text.len() as u64 > MAX_POLICY_BYTES {
        return Err(format!("{} is larger than {MAX_POLICY_BYTES} bytes", path.display()));
    }
    let policy = serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((policy, text))
}

/// A listener on `path` (a stale socket there is replaced; anything else is refused), mode
/// 0666.
fn listen(path: &Path) -> Result<UnixListener, String> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(format!("{} exists and is not a socket", path.display()));
        }
        std::fs::remove_file(path).map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
    }
    let listener = UnixListener::bind(path).map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| format!("cannot open {} to the lease: {e}", path.display()))?;
    Ok(listener)
}

/// Serves until SIGTERM or SIGINT (then `Ok`), or until a listener fails.
pub async fn run(options: Options) -> Result<(), String> {
    let policy = read_policy(&options.policy)?;
    let resolver = Resolver::new(options.upstream, RESOLVE_TIMEOUT);
    let proxy = match &options.credentials {
        None => EgressProxy::new(policy, resolver, Limits::default()),
        Some(broker) => {
            let broker = crate::credential_stdin::start(broker, std::io::stdin().lock())?;
            EgressProxy::with_broker(policy, resolver, Limits::default(), broker)
        }
    };
    let stub = proxy.dns_stub();
    let proxy_listener = listen(&options.proxy_socket)?;
    let dns_listener = listen(&options.dns_socket)?;
    let signal_error = |e: std::io::Error| format!("cannot handle signals: {e}");
    let mut hangup = signal(SignalKind::hangup()).map_err(signal_error)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(signal_error)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(signal_error)?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "envrt-egress listening on {}", options.proxy_socket.display())
            .and_then(|()| out.flush())
            .map_err(|e| format!("cannot say it listens: {e}"))?;
    }
    let serving = {
        let proxy = proxy.clone();
        async move {
            tokio::select! {
                served = proxy.serve_unix(proxy_listener) => served,
                served = stub.serve_unix(dns_listener) => served,
            }
        }
    };
    tokio::pin!(serving);
    loop {
        tokio::select! {
            served = &mut serving => {
                return served.map_err(|e| format!("a listener failed: {e}"));
            }
            _ = hangup.recv() => match read_policy_bytes(&options.policy) {
                Ok((policy, bytes)) => {
                    proxy.update_policy(policy);
                    if let Err(why) = acknowledge(&options.policy, &bytes) {
                        eprintln!("envrt-egress: policy reloaded but not acknowledged: {why}");
                    }
                }
                Err(why) => eprintln!("envrt-egress: policy not reloaded: {why}"),
            },
            _ = terminate.recv() => return Ok(()),
            _ = interrupt.recv() => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn options_are_parsed_and_every_fault_named() {
        let parsed = Options::parse(&args(&[
            "--proxy-socket",
            "/r/p.sock",
            "--dns-socket",
            "/r/d.sock",
            "--policy",
            "/r/policy.json",
            "--upstream",
            "192.0.2.53:53",
        ]))
        .unwrap();
        assert_eq!(parsed.upstream, "192.0.2.53:53".parse().unwrap());
        assert_eq!(parsed.policy, PathBuf::from("/r/policy.json"));
        assert_eq!(
            Options::parse(&args(&["--upstream", "nowhere"])),
            Err("--upstream takes ADDRESS:PORT, not \"nowhere\"".into())
        );
        assert_eq!(
            Options::parse(&args(&["--policy"])),
            Err("--policy needs a value".into())
        );
        assert_eq!(
            Options::parse(&args(&["--bogus", "x"])),
            Err("unknown argument \"--bogus\"".into())
        );
        assert_eq!(
            Options::parse(&args(&[
                "--dns-socket",
                "d",
                "--policy",
                "p",
                "--upstream",
                "192.0.2.1:53"
            ])),
            Err("--proxy-socket PATH is required".into())
        );
    }

    #[test]
    fn a_policy_file_is_read_within_its_bound_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.json");
        std::fs::write(&path, r#"{"egress":"allow","allow":["pypi.org:443"]}"#).unwrap();
        let policy = read_policy(&path).unwrap();
        assert_eq!(policy, Policy::new(crate::Egress::Allow, &["pypi.org:443"]).unwrap());
        std::fs::write(&path, r#"{"egress":"allow","allow":["py*.org"]}"#).unwrap();
        let why = read_policy(&path).unwrap_err();
        assert!(why.contains("bad wildcard"), "{why}");
        std::fs::write(&path, vec![b' '; MAX_POLICY_BYTES as usize + 1]).unwrap();
        assert_eq!(
            read_policy(&path),
            Err(format!("{} is larger than {MAX_POLICY_BYTES} bytes", path.display()))
        );
    }
}
