//! The runner ingress checks catch broken endpoints: a driver that grants
//! `runnerWebSocketIngress` and hands out an endpoint that needs no token, or one that
//! answers upgrades itself without reaching the lease, fails
//! `ingress_websocket_reaches_the_lease` with the failure it names (and passes the honesty
//! check, which only sees that an endpoint opens); the honest local driver has no ingress
//! group and takes the refusal.

#[allow(dead_code, reason = "the other faults' helpers serve broken_drivers.rs")]
mod broken;

use broken::{Fault, suite};
use envrt_conformance::Status;

fn outcome_of(fault: Fault, check: &str) -> (Status, String) {
    let root = tempfile::tempdir().unwrap();
    let suite = suite(fault, root.path());
    let outcome = suite
        .run_check_outcome(check)
        .unwrap_or_else(|| panic!("{fault:?}: {check} is not registered"));
    (outcome.status, outcome.message.unwrap_or_default())
}

#[test]
fn an_endpoint_that_needs_no_token_is_caught() {
    let (status, message) = outcome_of(Fault::IngressWithoutToken, "ingress_websocket_reaches_the_lease");
    assert_eq!(status, Status::Failed, "{message}");
    assert_eq!(
        message,
        "an upgrade without the secret headers was answered 101: the endpoint does not authenticate"
    );
}

#[test]
fn an_endpoint_that_does_not_reach_the_lease_is_caught() {
    let (status, message) = outcome_of(Fault::IngressNotToTheLease, "ingress_websocket_reaches_the_lease");
    assert_eq!(status, Status::Failed, "{message}");
    assert_eq!(
        message,
        "an upgrade with the secret headers was answered 101, but the lease's server never saw it (the endpoint does not reach the lease)"
    );
}

#[test]
fn the_honesty_check_passes_for_the_faults_and_the_honest_driver() {
    for fault in [Fault::IngressWithoutToken, Fault::IngressNotToTheLease, Fault::Honest] {
        let (status, message) = outcome_of(fault, "honesty_runner_ingress");
        assert_eq!(status, Status::Passed, "{fault:?}: {message}");
    }
    let root = tempfile::tempdir().unwrap();
    let honest = suite(Fault::Honest, root.path());
    assert!(
        honest
            .run_check_outcome("ingress_websocket_reaches_the_lease")
            .is_none(),
        "the check is registered for a driver without the group"
    );
}
