//! The kit's bypass checks on the sandbox driver (the bubblewrap reference worker, whose
//! sandboxes see the host's `/usr`, so `python3` is there): each through the lease's own
//! `envrt-egress`, against a test host with HTTPS whose CA the driver's proxy trusts for
//! the brokered credential. Every one must pass: the sandbox brokers credentials as Docker
//! does (its sandboxes trust the lease's CA and hold only the placeholder). Needs bwrap,
//! the reference worker and the supervisor, root for `ip netns`, `openssl` and `python3`;
//! fails instead of skipping with `ENVRT_REQUIRE_SANDBOX=1` / `ENVRT_REQUIRE_NETWORK=1`.

mod egress_host;

use std::sync::Arc;

use envrt_conformance::{Suite, Target};
use envrt_driver_plugin_sandbox::{SandboxDriver, SandboxOptions};

#[test]
fn the_sandbox_passes_every_bypass_check_and_brokers_credentials() {
    let worker = match envrt_test_support::sandbox::fresh_worker() {
        Ok(worker) => worker,
        Err(why) => {
            envrt_test_support::Component::Sandbox.skip_or_fail(
                format_args!("ENVRT_REQUIRE_SANDBOX=1 but {why}"),
                format_args!("SKIPPED: {why}"),
            );
            return;
        }
    };
    let (host, egress, roots) = egress_host::make_with_roots();
    let Some(host) = host else {
        return;
    };
    let dns = host.dns();
    let root = tempfile::tempdir().unwrap();
    let manifest = envrt_driver_plugin_sandbox::reference_manifest(&worker, root.path());
    let suite = Suite::build(|| async move {
        let options = SandboxOptions {
            egress: Some(envrt_test_support::network::egress_binary()),
            egress_dns: Some(dns),
            egress_roots: roots,
            ..SandboxOptions::default()
        };
        let driver = SandboxDriver::start(manifest, options)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Target::new(Arc::new(driver))
            .with_cases(1)
            .with_egress_host(egress)
            .only(&["egress_"]))
    })
    .expect("the sandbox suite");
    egress_host::assert_bypass_checks_pass(&suite);
    drop(suite);
    drop(host);
}
