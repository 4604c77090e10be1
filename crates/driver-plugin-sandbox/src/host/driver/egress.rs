//! Network under a policy on the sandbox driver (contract section 10): the host runs one
//! egress proxy (`envrt-egress`) per lease, as the Docker driver does (the shared code is
//! `envrt_driver_agent::egress`), and the worker gives the lease's sandboxes a network
//! namespace of their own whose loopback reaches it (the extension `envrtStartEgress`, see
//! `docs/plugin-protocol.md` and the reference worker's `egress` module).
//!
//! - **When.** The boundary is [`Proxied`](NetworkBoundary::Proxied) for the reference
//!   worker when the host has the `envrt-egress` binary and an upstream DNS server
//!   ([`SandboxOptions::egress`](crate::SandboxOptions::egress),
//!   [`egress_dns`](crate::SandboxOptions::egress_dns)) and the live worker advertises
//!   `envrtStartEgress` (it found the supervisor binary that forwards); otherwise it stays
//!   [`Isolated`](NetworkBoundary::Isolated) and `"allow"` / `"open"` are refused.
//! - **A lease with a policy** gets the host directory `{tmp}/envrt-sandbox-egress-{euid}/{lease id}/`
//!   (0711, this user's): the policy `egress.json` (0600), the proxy's pid and log, and
//!   `sockets/` (0755) where the proxy listens on `proxy.sock` and `dns.sock`. The proxy
//!   starts before the worker is asked to start the lease's forwarder; either failing
//!   stops the proxy, removes the directory and destroys the worker's lease, and the
//!   acquire fails with the reason.
//! - **Brokered credentials** (`[[environment.network.credential]]`): the proxy is started
//!   with them on its stdin (`envrt_driver_agent::egress::credentials`, shared with
//!   Docker) and writes the lease's CA bundle beside its sockets; the worker is told the
//!   bundle's name and the lease's variables (CA variables, placeholders) and shows them to
//!   every sandbox of the lease. A proxy started anew reads the secrets again.
//! - **Updates** write the policy file (another name, then a rename) and SIGHUP the proxy
//!   (started anew when gone); the worker is asked again, which starts the forwarder anew
//!   when it ended.
//! - **The end.** Release and destroy stop the proxy and remove the directory; the worker
//!   ends the forwarder. A released reusable lease resumed later has no network until its
//!   policy is updated (nothing runs with less than its policy: without its forwarder a
//!   lease's sandboxes have no network at all).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::PathBuf;

use envrt_driver_agent::egress::{EgressSetup, credentials, reload_proxy, start_proxy, stop_proxy, write_policy};
use envrt_driver_api::network::{Credential, Egress, NetworkBoundary, Policy};
use envrt_driver_api::{AcquireInput, DriverError, LeaseContext, LeaseGrant};
use serde_json::Value;

use super::SandboxDriver;
use crate::protocol::environment::{DriverBase, EndLeaseParams, LeaseRef, StartEgressParams};
use crate::protocol::methods;

/// Lease-metadata key: `true` when the lease was made with its egress proxy.
pub(crate) const META_EGRESS: &str = "egressProxy";
const DIR_PREFIX: &str = "envrt-sandbox-egress-";

/// The host user's directory of lease egress directories.
fn base_dir() -> PathBuf {
    std::env::temp_dir().join(format!("{DIR_PREFIX}{}", rustix::process::geteuid().as_raw()))
}

/// The lease's egress directory (not made).
fn lease_dir(lease: &str) -> PathBuf {
    base_dir().join(lease)
}

fn sockets_dir(lease: &str) -> PathBuf {
    lease_dir(lease).join("sockets")
}

/// Makes `dir` with `mode` (again, past the umask) and checks it is this user's directory.
fn make_dir(dir: &std::path::Path, mode: u32) -> Result<(), DriverError> {
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(DriverError::io(format!("cannot create {}", dir.display()), e)),
    }
    let meta =
        std::fs::symlink_metadata(dir).map_err(|e| DriverError::io(format!("cannot read {}", dir.display()), e))?;
    if !meta.is_dir() || meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(DriverError::Unavailable {
            message: format!("the egress directory {} is not a directory of this user", dir.display()),
            source: None,
        });
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .map_err(|e| DriverError::io(format!("cannot set the mode of {}", dir.display()), e))
}

/// The driver's egress set-up, or why it has none.
pub(crate) fn resolve(options: &crate::SandboxOptions) -> Result<EgressSetup, String> {
    envrt_driver_agent::egress::resolve_setup(options.egress.as_deref(), options.egress_dns, "sandbox")
}

impl SandboxDriver {
    /// The boundary of the reference worker's leases: proxied when both sides can run a
    /// lease's egress.
    pub(crate) fn reference_boundary(&self) -> NetworkBoundary {
        if self.egress.is_ok() && self.advertises(methods::START_EGRESS) {
            NetworkBoundary::Proxied
        } else {
            NetworkBoundary::Isolated
        }
    }

    /// Starts the egress of a new lease under `policy` (its proxy, then the worker's
    /// forwarder); on failure leaves nothing, the worker's lease included.
    pub(crate) async fn start_egress(
        &self,
        input: &AcquireInput,
        grant: &mut LeaseGrant,
        policy: &Policy,
    ) -> Result<(), DriverError> {
        let lease = &input.lease_id;
        let started = self.start_proxy_and_forwarder(input, grant, policy).await;
        if let Err(error) = started {
            stop_proxy(&lease_dir(lease), &sockets_dir(lease));
            let _ = std::fs::remove_dir_all(lease_dir(lease));
            if self.advertises(methods::DESTROY_LEASE) {
                let params = EndLeaseParams {
                    base: self.base_of(input),
                    provider_lease_id: grant.provider_lease_id.clone(),
                    lease_metadata: Some(grant.metadata.clone()),
                    cancel_active_work: Some(true),
                };
                let _ = self.rpc(methods::DESTROY_LEASE, &params, &input.company_id).await;
            }
            return Err(error);
        }
        grant.metadata.insert(META_EGRESS.into(), Value::Bool(true));
        Ok(())
    }

    async fn start_proxy_and_forwarder(
        &self,
        input: &AcquireInput,
        grant: &LeaseGrant,
        policy: &Policy,
    ) -> Result<(), DriverError> {
        let setup = self.egress.as_ref().map_err(|why| DriverError::other(why.clone()))?;
        let lease = &input.lease_id;
        make_dir(&base_dir(), 0o711)?;
        make_dir(&lease_dir(lease), 0o711)?;
        make_dir(&sockets_dir(lease), 0o755)?;
        write_policy(&lease_dir(lease), policy)?;
        let credentials = credentials::of(Some(&input.environment));
        let brokering = credentials::brokering(credentials, &sockets_dir(lease), self.egress_roots.as_deref())?;
        start_proxy(setup, lease, &lease_dir(lease), &sockets_dir(lease), brokering.as_ref()).await?;
        let lease_ref = LeaseRef {
            provider_lease_id: grant.provider_lease_id.clone(),
            metadata: Some(grant.metadata.clone()),
            expires_at: None,
        };
        self.start_forwarder(self.base_of(input), lease_ref, lease, &input.company_id, credentials)
            .await
    }

    async fn start_forwarder(
        &self,
        base: DriverBase,
        lease: LeaseRef,
        lease_id: &str,
        company: &str,
        credentials: &[Credential],
    ) -> Result<(), DriverError> {
        self.require(methods::START_EGRESS)?;
        // With credentials, the proxy wrote the lease's CA bundle beside its sockets: the
        // worker shows it to every sandbox, with the variables that name it and the
        // placeholders.
        let params = StartEgressParams {
            base,
            lease,
            socket_dir: sockets_dir(lease_id).display().to_string(),
            ca_bundle: (!credentials.is_empty()).then(|| credentials::CA_BUNDLE.to_owned()),
            env: credentials::lease_env(credentials).into_iter().collect(),
        };
        self.rpc(methods::START_EGRESS, &params, company).await?;
        Ok(())
    }

    fn base_of(&self, input: &AcquireInput) -> DriverBase {
        DriverBase {
            driver_key: self.key.clone(),
            company_id: input.company_id.clone(),
            environment_id: input.environment.id.clone(),
            issue_id: input.issue_id.clone(),
            config: input.environment.config.clone(),
        }
    }

    /// Replaces a lease's policy: the file, then SIGHUP to its proxy (started anew when
    /// gone), then the worker's forwarder (started anew when gone).
    pub(crate) async fn update_egress(&self, context: &LeaseContext, policy: &Policy) -> Result<(), DriverError> {
        let lease = &context.lease.id;
        if context.lease.metadata.get(META_EGRESS).and_then(Value::as_bool) != Some(true) {
            if policy.egress() == Egress::None {
                return Ok(());
            }
            return Err(DriverError::other(format!(
                "lease {lease} was made without an egress proxy (its environment names no network policy), so its network cannot be opened; acquire a new lease"
            )));
        }
        let (dir, sockets) = (lease_dir(lease), sockets_dir(lease));
        if !dir.is_dir() {
            make_dir(&base_dir(), 0o711)?;
            make_dir(&dir, 0o711)?;
            make_dir(&sockets, 0o755)?;
        }
        write_policy(&dir, policy)?;
        let credentials = credentials::of(context.environment.as_ref());
        if !reload_proxy(lease, &dir, &sockets).await? {
            let setup = self.egress.as_ref().map_err(|why| DriverError::other(why.clone()))?;
            // A proxy started again reads its credentials again (contract section 10).
            let brokering = credentials::brokering(credentials, &sockets, self.egress_roots.as_deref())?;
            start_proxy(setup, lease, &dir, &sockets, brokering.as_ref()).await?;
        }
        self.start_forwarder(
            self.base(context),
            Self::lease(context),
            lease,
            &context.lease.company_id,
            credentials,
        )
        .await
    }
}

/// Stops the lease's proxy and removes its directory (release, destroy).
pub(crate) fn stop(lease: &str) {
    stop_proxy(&lease_dir(lease), &sockets_dir(lease));
    let _ = std::fs::remove_dir_all(lease_dir(lease));
}
