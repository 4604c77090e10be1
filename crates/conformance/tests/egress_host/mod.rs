//! The test host the egress checks reach, shared by the suites of enforcing drivers: made
//! where this machine can (root, `ip netns`), else the reason the checks report as "not
//! checked" (under `ENVRT_REQUIRE_NETWORK=1` making none fails instead).

use std::sync::Arc;

use envrt_conformance::EgressHost;
use envrt_test_support::network::{HOST, TestHost};

/// What the host serves at `/`.
pub(crate) const BODY: &str = "hello from the conformance test host";

/// A test host with the names the checks use, and its description for the suite.
pub(crate) fn make() -> (Option<Arc<TestHost>>, Result<EgressHost, String>) {
    let names = [("web.test", HOST), ("other.test", HOST), ("rebind.test", "10.200.77.2")];
    match TestHost::new(&names, BODY) {
        Some(host) => {
            let host = Arc::new(host);
            let asked = Arc::clone(&host);
            let described = EgressHost {
                address: host.address.clone(),
                body: BODY.to_owned(),
                asked: Arc::new(move || asked.asked()),
            };
            (Some(host), Ok(described))
        }
        None => (
            None,
            Err("this machine cannot make a test host network namespace (root and ip netns are needed)".into()),
        ),
    }
}
