//! The kit's bypass checks against a driver whose leases go out through a proxy of the
//! test's own (`proxied`): with the real `envrt_egress` proxy, applied honestly, each check
//! passes; each fault (a proxy that trusts the TLS server name or the Host header, one that
//! follows redirects, an update ignored or sparing open connections, a secret in the lease's
//! environment, a credential put on every host) fails the check that guards it, with the
//! failure naming what happened. Needs root for the test host's network namespace and
//! `openssl` and `python3` for its HTTPS server; fails instead of skipping with
//! `ENVRT_REQUIRE_NETWORK=1`.

mod egress_host;
mod proxied;

use envrt_conformance::{Status, Suite};
use proxied::ProxyFault;

/// The new checks, in the order they are asked for.
const CHECKS: [&str; 4] = [
    "egress_host_and_sni_mismatch_refused",
    "egress_redirect_to_denied_host_not_followed",
    "egress_live_update_cuts_removed_destination",
    "egress_brokered_credential_stays_out_of_the_lease",
];

/// Runs `check` on the proxied driver with `fault`: its status and message.
fn outcome(fault: ProxyFault, check: &str) -> Option<(Status, String)> {
    let (host, egress, roots) = egress_host::make_with_roots();
    let host = host?;
    let root = tempfile::tempdir().unwrap();
    let dns = host.dns();
    let suite = Suite::build(|| proxied::target(fault, root.path(), dns, roots, egress)).expect("suite");
    let outcome = suite.run_check_outcome(check).expect("registered");
    drop(suite);
    drop(host);
    Some((outcome.status, outcome.message.unwrap_or_default()))
}

#[test]
fn the_real_proxy_applied_honestly_passes_every_bypass_check() {
    for check in CHECKS {
        let Some((status, message)) = outcome(ProxyFault::Honest, check) else {
            return;
        };
        assert_eq!(status, Status::Passed, "{check}: {message}");
    }
}

/// Each fault, the check that must catch it, and the start of its failure.
const CAUGHT: [(ProxyFault, &str, &str); 7] = [
    (
        ProxyFault::TrustsSni,
        CHECKS[0],
        "the policy allows only web.test, yet the test host was reached by: CONNECT to a denied name with a TLS server name naming the allowed one; CONNECT to a denied address with a TLS server name naming the allowed one",
    ),
    (
        ProxyFault::TrustsHostHeader,
        CHECKS[0],
        "the policy allows only web.test, yet the test host was reached by: plain HTTP to a denied address with the allowed name in its Host header",
    ),
    (
        ProxyFault::FollowsRedirects,
        CHECKS[1],
        "the plain redirect from web.test to other.test (denied) reached other.test: its body came back to the lease",
    ),
    (
        ProxyFault::IgnoresUpdates,
        CHECKS[2],
        "after the update removed other.test, a new connection to it reached the test host",
    ),
    (
        ProxyFault::KeepsOpenConnections,
        CHECKS[2],
        "after the update removed other.test, the tunnel already open to it was not cut (within 30 s): ",
    ),
    (
        ProxyFault::SecretInLeaseEnv,
        CHECKS[3],
        "the secret reached the lease: in its environment, processes (variables or command lines)",
    ),
    (
        ProxyFault::BrokersToEveryHost,
        CHECKS[3],
        "the secret was put on other.test, which carries no credential",
    ),
];

#[test]
fn each_faulty_proxy_is_failed_by_the_check_that_guards_its_promise() {
    for (fault, check, failure) in CAUGHT {
        let Some((status, message)) = outcome(fault, check) else {
            return;
        };
        assert_eq!(status, Status::Failed, "{fault:?} {check}: {message}");
        assert!(message.starts_with(failure), "{fault:?} {check}: {message}");
    }
}
