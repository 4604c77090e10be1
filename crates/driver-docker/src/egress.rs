//! Network under a policy on Docker (contract section 10): a lease's container keeps
//! `NetworkMode: none` (no route out), and everything it may reach goes through one egress
//! proxy of its own on the host (`envrt-egress`), which judges every name, address and port
//! by the lease's policy and resolves names itself.
//!
//! - **When.** The driver's boundary is [`Proxied`](NetworkBoundary::Proxied) for an
//!   environment with `network = "none"` when the driver has all it needs: the static
//!   process supervisor (it runs the forwarders in the container), the `envrt-egress`
//!   binary ([`DockerConfig::egress`], else `ENVRT_EGRESS`, beside the running executable,
//!   `PATH`) and an upstream DNS server ([`DockerConfig::egress_dns`], else the first
//!   `nameserver` of the host's `/etc/resolv.conf`). Without them the boundary stays
//!   [`Isolated`](NetworkBoundary::Isolated) and `"allow"` / `"open"` are refused as before
//!   (`envrt doctor` says why).
//! - **A lease with a policy** (the environment's `[environment.network]` or the lease's
//!   own, [`AcquireInput::network`]) gets, beside its supervisor's run directory: the host
//!   directory `{lease dir}/egress` (root's, 0755) mounted read-only at [`EGRESS_DIR`], where
//!   `envrt-egress` listens on `proxy.sock` and `dns.sock`; the policy in
//!   `{lease dir}/egress.json` (0600, out of the container's reach); `/etc/resolv.conf`
//!   naming `127.0.0.1`; and `http_proxy`, `https_proxy`, `HTTP_PROXY`, `HTTPS_PROXY`
//!   (`http://127.0.0.1:3128`), `no_proxy` and `NO_PROXY` (`localhost,127.0.0.1,::1`) in its
//!   environment. Once the container runs, the driver starts `envrt-egress` on the host (in
//!   a session of its own, so it outlives the program that acquired the lease) and, with one
//!   detached exec as the container's user, the supervisor binary as a forwarder
//!   (`--forward tcp:127.0.0.1:3128=…/proxy.sock --forward dns:127.0.0.1:53=…/dns.sock`).
//!   Programs that ignore the proxy variables reach nothing: fail closed.
//! - **Updates** ([`update_network_policy`](envrt_driver_api::EnvironmentDriver::update_network_policy))
//!   write the new policy file (under another name, then renamed) and send the proxy
//!   SIGHUP: new connections use it at once, open ones it denies are cut. A proxy that is
//!   gone (the host restarted) is started again, and so is the forwarder.
//! - **The end.** Release, destroy, expiry and `gc` stop the proxy (its pid is recorded and
//!   checked against its command line before the signal) and remove the lease directory;
//!   the forwarder ends with the container.
//! - **Untrusted.** The command can reach the two sockets (that is their purpose) and can
//!   kill or replace the forwarder (it only loses its own network). It cannot reach the
//!   policy file, the proxy's pid or log, or any other lease's sockets.

use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::models::{Mount, MountType};
#[cfg(doc)]
use envrt_driver_api::AcquireInput;
use envrt_driver_api::network::{NetworkBoundary, Policy};
use envrt_driver_api::{DriverError, LeaseContext};
use tokio::io::AsyncBufReadExt;

#[cfg(doc)]
use crate::config::DockerConfig;
use crate::driver::{DockerDriver, container_name};
use crate::processes::{AGENT_PATH, RUN_DIR};

/// The egress binary's name.
pub(crate) const EGRESS_BINARY: &str = "envrt-egress";
/// The variable naming the egress binary.
pub(crate) const EGRESS_VAR: &str = "ENVRT_EGRESS";
/// Where the lease's egress sockets are mounted in its container (read-only).
pub(crate) const EGRESS_DIR: &str = "/.envrt/egress";
/// The proxy address the lease's programs are pointed at.
pub(crate) const PROXY_ADDRESS: &str = "127.0.0.1:3128";
/// The DNS address the lease's resolver names.
pub(crate) const DNS_ADDRESS: &str = "127.0.0.1:53";
/// Lease-metadata key: `true` when the lease's container was made with the egress plumbing.
pub(crate) const META_EGRESS: &str = "egressProxy";
/// How long a starting proxy or forwarder has to answer.
const START_BOUND: Duration = Duration::from_secs(10);

/// What the driver needs to run a lease's egress: the proxy binary and the upstream DNS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EgressSetup {
    pub(crate) binary: PathBuf,
    pub(crate) upstream: SocketAddr,
}

/// The first `nameserver` of a resolv.conf text, port 53.
fn first_nameserver(text: &str) -> Option<SocketAddr> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next()? == "nameserver")
            .then(|| words.next()?.parse::<std::net::IpAddr>().ok())
            .flatten()
            .map(|ip| SocketAddr::new(ip, 53))
    })
}

/// The driver's egress set-up, or why it has none: the binary (`configured`, else found as
/// the supervisor is), the upstream (`upstream`, else the host's first nameserver), and a
/// supervisor to run the forwarders (`agent`).
pub(crate) fn resolve(
    configured: Option<&Path>,
    upstream: Option<SocketAddr>,
    agent: &Result<PathBuf, String>,
) -> Result<EgressSetup, String> {
    if let Err(why) = agent {
        return Err(format!("no process supervisor runs the lease's forwarders: {why}"));
    }
    let binary = match configured {
        Some(path) if envrt_driver_api::descriptor::is_executable(path) => path.to_owned(),
        Some(path) => {
            return Err(format!(
                "the egress proxy \"{}\" is not an executable file",
                path.display()
            ));
        }
        None => envrt_driver_agent::locate_named(EGRESS_BINARY, EGRESS_VAR)?,
    };
    let upstream = match upstream {
        Some(upstream) => upstream,
        None => std::fs::read_to_string("/etc/resolv.conf")
            .ok()
            .as_deref()
            .and_then(first_nameserver)
            .ok_or(
                "no upstream DNS server: set [docker] egress_dns, or give the host a nameserver in /etc/resolv.conf",
            )?,
    };
    Ok(EgressSetup { binary, upstream })
}

/// The boundary of a `network = "none"` container: proxied where the driver can run the
/// egress proxy.
pub(crate) fn none_boundary(driver: &DockerDriver) -> NetworkBoundary {
    match driver.egress {
        Ok(_) => NetworkBoundary::Proxied,
        Err(_) => NetworkBoundary::Isolated,
    }
}

/// The host directory of the lease whose container is named `name` (the supervisor's).
fn lease_dir(name: &str) -> PathBuf {
    crate::processes::lease_dir(name)
}

fn sockets_dir(lease_dir: &Path) -> PathBuf {
    lease_dir.join("egress")
}

/// The container side of a new lease with a policy: its mount, variables and resolver.
pub(crate) struct Plumbing {
    pub(crate) mount: Mount,
    pub(crate) env: Vec<String>,
    pub(crate) dns: Vec<String>,
}

/// Makes the sockets directory in `lease_dir` (already made for the supervisor) and says
/// what the container needs.
pub(crate) fn prepare(
    lease_dir: &Path,
    credentials: &[envrt_driver_api::network::Credential],
) -> Result<Plumbing, DriverError> {
    let dir = sockets_dir(lease_dir);
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&dir)
        .map_err(|e| DriverError::io(format!("cannot create {}", dir.display()), e))?;
    // The umask may have narrowed it; the container's user must reach the sockets.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| DriverError::io(format!("cannot open {} to the lease", dir.display()), e))?;
    let proxy = format!("http://{PROXY_ADDRESS}");
    let mut env: Vec<String> = ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"]
        .iter()
        .map(|name| format!("{name}={proxy}"))
        .collect();
    env.extend(
        ["no_proxy", "NO_PROXY"]
            .iter()
            .map(|name| format!("{name}=localhost,127.0.0.1,::1")),
    );
    env.extend(crate::egress_credentials::lease_env(credentials));
    Ok(Plumbing {
        mount: Mount {
            target: Some(EGRESS_DIR.to_owned()),
            source: Some(dir.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        },
        env,
        dns: vec!["127.0.0.1".to_owned()],
    })
}

/// Writes `policy` as the lease's policy file, atomically (another name, then a rename).
fn write_policy(lease_dir: &Path, policy: &Policy) -> Result<(), DriverError> {
    let json = serde_json::to_vec(policy).map_err(|e| DriverError::other(format!("cannot encode the policy: {e}")))?;
    let next = lease_dir.join("egress.json.next");
    std::fs::write(&next, json).map_err(|e| DriverError::io(format!("cannot write {}", next.display()), e))?;
    std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| DriverError::io(format!("cannot write {}", next.display()), e))?;
    let path = lease_dir.join("egress.json");
    std::fs::rename(&next, &path).map_err(|e| DriverError::io(format!("cannot write {}", path.display()), e))
}

/// The pid of the lease's running proxy: recorded, alive, and running this lease's socket.
fn running_proxy(lease_dir: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(lease_dir.join("egress.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let socket = sockets_dir(lease_dir).join("proxy.sock");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    cmdline
        .split(|b| *b == 0)
        .any(|arg| arg == socket.as_os_str().as_encoded_bytes())
        .then_some(pid)
}

/// Starts the lease's proxy on the host and waits until it listens.
async fn start_proxy(
    setup: &EgressSetup,
    lease: &str,
    lease_dir: &Path,
    brokering: Option<crate::egress_credentials::Brokering>,
) -> Result<(), DriverError> {
    let sockets = sockets_dir(lease_dir);
    let log = lease_dir.join("egress.log");
    let log_file =
        std::fs::File::create(&log).map_err(|e| DriverError::io(format!("cannot create {}", log.display()), e))?;
    let mut command = tokio::process::Command::new(&setup.binary);
    command
        .arg("--proxy-socket")
        .arg(sockets.join("proxy.sock"))
        .arg("--dns-socket")
        .arg(sockets.join("dns.sock"))
        .arg("--policy")
        .arg(lease_dir.join("egress.json"))
        .arg("--upstream")
        .arg(setup.upstream.to_string())
        .env_clear()
        .stdin(match brokering {
            Some(_) => std::process::Stdio::piped(),
            None => std::process::Stdio::null(),
        })
        .stdout(std::process::Stdio::piped())
        .stderr(log_file)
        // A session of its own: it outlives the program that acquired the lease and gets
        // none of its terminal's signals.
        .process_group(0);
    if let Some(brokering) = &brokering {
        command.args(&brokering.args);
    }
    let mut child = command
        .spawn()
        .map_err(|e| DriverError::io(format!("cannot start {}", setup.binary.display()), e))?;
    // The secrets go over stdin (never argv, never a file), then end of file.
    if let (Some(brokering), Some(mut stdin)) = (brokering, child.stdin.take()) {
        use tokio::io::AsyncWriteExt;
        let written = tokio::time::timeout(START_BOUND, stdin.write_all(&brokering.stdin)).await;
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
    let expected = format!("envrt-egress listening on {}", sockets.join("proxy.sock").display());
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

/// Stops the lease's proxy, if one runs; the lease directory goes with the supervisor's.
pub(crate) fn stop(lease_id: &str) {
    let dir = lease_dir(&container_name(lease_id));
    if let Some(pid) = running_proxy(&dir) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
}

impl DockerDriver {
    /// Starts the egress of a new lease under `policy`, once its container runs: the proxy
    /// on the host and the forwarder in the container.
    pub(crate) async fn start_egress(
        &self,
        lease: &str,
        container: &str,
        policy: &Policy,
        credentials: &[envrt_driver_api::network::Credential],
    ) -> Result<(), DriverError> {
        let setup = self.egress.as_ref().map_err(|why| DriverError::other(why.clone()))?;
        let dir = lease_dir(&container_name(lease));
        write_policy(&dir, policy)?;
        let brokering =
            crate::egress_credentials::brokering(credentials, &sockets_dir(&dir), self.config.egress_roots.as_deref())?;
        start_proxy(setup, lease, &dir, brokering).await?;
        self.start_forwarder(lease, container).await
    }

    /// Starts the forwarder in the container with one detached exec and waits until its
    /// listeners are bound (its socket answers).
    async fn start_forwarder(&self, lease: &str, container: &str) -> Result<(), DriverError> {
        let cmd = vec![
            AGENT_PATH.to_owned(),
            "--socket".to_owned(),
            format!("{RUN_DIR}/fwd"),
            "--forward".to_owned(),
            format!("tcp:{PROXY_ADDRESS}={EGRESS_DIR}/proxy.sock"),
            "--forward".to_owned(),
            format!("dns:{DNS_ADDRESS}={EGRESS_DIR}/dns.sock"),
        ];
        let socket = crate::processes::run_dir(&lease_dir(&container_name(lease))).join("fwd");
        self.start_detached(lease, container, cmd, &socket, "egress forwarder")
            .await
            .map(drop)
    }

    /// Replaces a lease's policy: the file, then SIGHUP to its proxy (started again, with
    /// the forwarder, when it is gone).
    pub(crate) async fn update_egress(&self, context: &LeaseContext, policy: &Policy) -> Result<(), DriverError> {
        let lease = &context.lease.id;
        if context.lease.metadata.get(META_EGRESS).and_then(|v| v.as_bool()) != Some(true) {
            // What the lease already has: no network, nothing to cut.
            if policy.egress() == envrt_driver_api::network::Egress::None {
                return Ok(());
            }
            return Err(DriverError::other(format!(
                "lease {lease} was made without an egress proxy (its environment names no network policy), so its network cannot be opened; acquire a new lease"
            )));
        }
        let dir = lease_dir(&container_name(lease));
        write_policy(&dir, policy)?;
        match running_proxy(&dir) {
            Some(pid) => nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGHUP)
                .map_err(|e| DriverError::other(format!("cannot signal the egress proxy of lease {lease}: {e}"))),
            None => {
                let setup = self.egress.as_ref().map_err(|why| DriverError::other(why.clone()))?;
                let credentials = crate::egress_credentials::of(context.environment.as_ref());
                let brokering = crate::egress_credentials::brokering(
                    credentials,
                    &sockets_dir(&dir),
                    self.config.egress_roots.as_deref(),
                )?;
                start_proxy(setup, lease, &dir, brokering).await?;
                let container = Self::container_of(context)?;
                let socket = crate::processes::run_dir(&dir).join("fwd");
                if crate::processes::answers(&socket).await {
                    return Ok(());
                }
                self.start_forwarder(lease, container).await
            }
        }
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
    fn without_a_supervisor_or_a_binary_there_is_no_egress_and_the_reason_is_said() {
        let no_agent: Result<PathBuf, String> = Err("the engine is remote".into());
        assert_eq!(
            resolve(None, None, &no_agent),
            Err("no process supervisor runs the lease's forwarders: the engine is remote".into())
        );
        let agent: Result<PathBuf, String> = Ok("/bin/true".into());
        let missing = Path::new("/nonexistent/envrt-egress");
        assert_eq!(
            resolve(Some(missing), None, &agent),
            Err("the egress proxy \"/nonexistent/envrt-egress\" is not an executable file".into())
        );
        let upstream: SocketAddr = "192.0.2.53:53".parse().unwrap();
        assert_eq!(
            resolve(Some(Path::new("/bin/true")), Some(upstream), &agent),
            Ok(EgressSetup {
                binary: "/bin/true".into(),
                upstream
            })
        );
    }
}
