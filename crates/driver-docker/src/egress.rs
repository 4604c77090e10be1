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

use bollard::models::{Mount, MountType};
pub(crate) use envrt_driver_agent::egress::EgressSetup;
use envrt_driver_agent::egress::{DNS_ADDRESS, PROXY_ADDRESS, reload_proxy, start_proxy, write_policy};
#[cfg(doc)]
use envrt_driver_api::AcquireInput;
use envrt_driver_api::network::{NetworkBoundary, Policy};
use envrt_driver_api::{DriverError, LeaseContext};

#[cfg(doc)]
use crate::config::DockerConfig;
use crate::driver::{DockerDriver, container_name};
use crate::processes::{AGENT_PATH, RUN_DIR};

/// Where the lease's egress sockets are mounted in its container (read-only).
pub(crate) const EGRESS_DIR: &str = "/.envrt/egress";
/// Lease-metadata key: `true` when the lease's container was made with the egress plumbing.
pub(crate) const META_EGRESS: &str = "egressProxy";

/// The driver's egress set-up, or why it has none: the binary (`configured`, else found as
/// the supervisor is), the upstream (`upstream`, else the host's first nameserver), and a
/// supervisor to run the forwarders (`agent`). The shared part is
/// [`envrt_driver_agent::egress::resolve_setup`].
pub(crate) fn resolve(
    configured: Option<&Path>,
    upstream: Option<SocketAddr>,
    agent: &Result<PathBuf, String>,
) -> Result<EgressSetup, String> {
    if let Err(why) = agent {
        return Err(format!("no process supervisor runs the lease's forwarders: {why}"));
    }
    envrt_driver_agent::egress::resolve_setup(configured, upstream, "docker")
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
    let mut env = envrt_driver_agent::egress::proxy_env()
        .into_iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>();
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

/// Stops the lease's proxy, if one runs; the lease directory goes with the supervisor's.
pub(crate) fn stop(lease_id: &str) {
    let dir = lease_dir(&container_name(lease_id));
    envrt_driver_agent::egress::stop_proxy(&dir, &sockets_dir(&dir));
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
        start_proxy(setup, lease, &dir, &sockets_dir(&dir), brokering.as_ref()).await?;
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
        if reload_proxy(lease, &dir, &sockets_dir(&dir)).await? {
            return Ok(());
        }
        let setup = self.egress.as_ref().map_err(|why| DriverError::other(why.clone()))?;
        // A proxy started again reads its credentials again (contract section 10).
        let credentials = crate::egress_credentials::of(context.environment.as_ref());
        let brokering =
            crate::egress_credentials::brokering(credentials, &sockets_dir(&dir), self.config.egress_roots.as_deref())?;
        start_proxy(setup, lease, &dir, &sockets_dir(&dir), brokering.as_ref()).await?;
        let container = Self::container_of(context)?;
        let socket = crate::processes::run_dir(&dir).join("fwd");
        if crate::processes::answers(&socket).await {
            return Ok(());
        }
        self.start_forwarder(lease, container).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
