//! The test host the egress checks reach, shared by the suites of enforcing drivers: made
//! where this machine can (root, `ip netns`), else the reason the checks report as "not
//! checked" (under `ENVRT_REQUIRE_NETWORK=1` making none fails instead).

use std::path::PathBuf;
use std::sync::Arc;

use envrt_conformance::EgressHost;
use envrt_test_support::network::{HOST, TestHost};

/// What the host serves at `/`.
pub(crate) const BODY: &str = "hello from the conformance test host";

/// A test host with the names the checks use, and its description for the suite.
#[allow(dead_code, reason = "the bypass tests use make_with_roots")]
pub(crate) fn make() -> (Option<Arc<TestHost>>, Result<EgressHost, String>) {
    let (host, described, _) = make_with_roots();
    (host, described)
}

/// [`make`], and the test CA of the host's HTTPS server (for a driver that verifies the
/// real host of a brokered credential), when `openssl` made one.
pub(crate) fn make_with_roots() -> (Option<Arc<TestHost>>, Result<EgressHost, String>, Option<PathBuf>) {
    let names = [("web.test", HOST), ("other.test", HOST), ("rebind.test", "10.200.77.2")];
    match TestHost::new(&names, BODY) {
        Some(mut host) => {
            // Without openssl or the HTTPS server the TLS checks say "not checked".
            let roots = match host.serve_https(&["web.test", "other.test"]) {
                Ok(roots) => Some(roots),
                Err(e) => {
                    envrt_test_support::Component::Network.skip_or_fail(
                        format_args!("ENVRT_REQUIRE_NETWORK=1 but the test host has no HTTPS server: {e}"),
                        format_args!("SKIPPED: the TLS egress checks: the test host has no HTTPS server: {e}"),
                    );
                    None
                }
            };
            let host = Arc::new(host);
            // The closures hold the host weakly: the binary's `main` drops the one strong
            // reference before its `process::exit`, and that must end the host.
            let asked = Arc::downgrade(&host);
            let seen = Arc::downgrade(&host);
            let https_seen: Option<Arc<dyn Fn() -> Vec<String> + Send + Sync>> = match roots {
                Some(_) => Some(Arc::new(move || {
                    seen.upgrade().map(|host| host.https_requests()).unwrap_or_default()
                })),
                None => None,
            };
            let described = EgressHost {
                address: host.address.clone(),
                body: BODY.to_owned(),
                asked: Arc::new(move || asked.upgrade().map(|host| host.asked()).unwrap_or_default()),
                https_seen,
            };
            (Some(host), Ok(described), roots)
        }
        None => (
            None,
            Err("this machine cannot make a test host network namespace (root and ip netns are needed)".into()),
            None,
        ),
    }
}

/// The kit's four bypass checks, which a driver brokering credentials through its own
/// `envrt-egress` must all pass against the test host.
#[allow(dead_code, reason = "only the bypass tests use it")]
pub(crate) const BYPASS_CHECKS: [&str; 4] = [
    "egress_host_and_sni_mismatch_refused",
    "egress_redirect_to_denied_host_not_followed",
    "egress_live_update_cuts_removed_destination",
    "egress_brokered_credential_stays_out_of_the_lease",
];

/// Asserts that `suite` passes every one of [`BYPASS_CHECKS`].
#[allow(dead_code, reason = "only the bypass tests use it")]
pub(crate) fn assert_bypass_checks_pass(suite: &envrt_conformance::Suite) {
    for check in BYPASS_CHECKS {
        let outcome = suite.run_check_outcome(check).expect("registered");
        assert_eq!(
            outcome.status,
            envrt_conformance::Status::Passed,
            "{check}: {:?}",
            outcome.message
        );
    }
}
