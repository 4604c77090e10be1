//! The kit catches a driver that claims its leases have no network while its commands
//! share the host's: the local driver declaring itself isolated fails
//! `network_isolated_has_no_route`, naming the listener it reached; the honest local
//! driver is not looked at (its level is the host network, said so).

mod broken;
mod egress_host;

use broken::{Fault, suite, target};
use envrt_conformance::{Status, Suite};

#[test]
fn a_driver_claiming_no_network_that_reaches_the_host_is_failed() {
    let root = tempfile::tempdir().unwrap();
    let faulty = suite(Fault::ClaimsNoNetwork, root.path());
    let outcome = faulty
        .run_check_outcome("network_isolated_has_no_route")
        .expect("registered");
    assert_eq!(outcome.status, Status::Failed, "{:?}", outcome.message);
    let message = outcome.message.unwrap_or_default();
    assert!(
        message.starts_with("the driver declares no network, yet the lease reached the host's listeners on tcp port "),
        "{message}"
    );
    assert!(
        message.contains("tcp from ") && message.contains("127.0.0.1"),
        "{message}"
    );
    assert!(message.contains("udp from "), "{message}");

    let root = tempfile::tempdir().unwrap();
    let honest = suite(Fault::Honest, root.path());
    let outcome = honest
        .run_check_outcome("network_isolated_has_no_route")
        .expect("registered");
    assert_eq!(outcome.status, Status::NotChecked, "{:?}", outcome.message);
    assert_eq!(outcome.message.as_deref(), Some("the driver's leases get host network"));
}

/// Each egress check, and the start of the failure it must report for a driver that claims
/// an egress proxy while its commands share the host's network.
const EGRESS_CHECKS: [(&str, &str); 5] = [
    (
        "egress_allowed_name_reachable",
        "the allowed name web.test was not reached through the proxy",
    ),
    (
        "egress_unlisted_destinations_refused",
        "the policy allows only web.test:80 and rebind.test, yet the lease reached ",
    ),
    (
        "egress_direct_traffic_has_no_route",
        "a program that ignores the proxy reached the test host ",
    ),
    (
        "egress_dns_never_forwards_unlisted_names",
        "the allowed name web.test did not resolve to the test host ",
    ),
    (
        "egress_metadata_refused_under_open",
        "under egress = \"open\" the public name other.test was not reached",
    ),
];

/// The bypass checks (run with python3 in the lease), and how each fails on a driver that
/// claims an egress proxy and runs none.
const BYPASS_CHECKS: [(&str, &str); 3] = [
    (
        "egress_host_and_sni_mismatch_refused",
        "the allowed name web.test was not reached over TLS through the proxy, so no refusal can be told apart",
    ),
    (
        "egress_redirect_to_denied_host_not_followed",
        "the allowed host's redirect did not come back to the lease as it is (302 to http://other.test/)",
    ),
    (
        "egress_live_update_cuts_removed_destination",
        "before the update, other.test (allowed) was not reached over a tunnel",
    ),
];

#[test]
fn a_driver_claiming_an_egress_proxy_that_does_not_enforce_is_failed_by_every_egress_check() {
    let (_host, egress) = egress_host::make();
    if egress.is_err() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let faulty = Suite::build(|| async {
        Ok(target(Fault::ClaimsEgressProxy, root.path())
            .await?
            .with_egress_host(egress.clone()))
    })
    .expect("suite");
    for (check, failure) in EGRESS_CHECKS {
        let outcome = faulty.run_check_outcome(check).expect("registered");
        assert_eq!(outcome.status, Status::Failed, "{check}: {:?}", outcome.message);
        let message = outcome.message.unwrap_or_default();
        assert!(message.starts_with(failure), "{check}: {message}");
    }
    // The raw address, reached around the proxy, is named.
    let outcome = faulty
        .run_check_outcome("egress_unlisted_destinations_refused")
        .expect("registered");
    assert!(outcome.message.unwrap_or_default().contains("a raw address"));

    // The bypass checks find no proxy behind the claim: the allowed way fails first.
    for (check, failure) in BYPASS_CHECKS {
        let outcome = faulty.run_check_outcome(check).expect("registered");
        assert_eq!(outcome.status, Status::Failed, "{check}: {:?}", outcome.message);
        let message = outcome.message.unwrap_or_default();
        assert!(message.starts_with(failure), "{check}: {message}");
    }
    // It says it brokers no credentials: that check does not look.
    let outcome = faulty
        .run_check_outcome("egress_brokered_credential_stays_out_of_the_lease")
        .expect("registered");
    assert_eq!(outcome.status, Status::NotChecked, "{:?}", outcome.message);
    assert!(
        outcome
            .message
            .unwrap_or_default()
            .starts_with("the driver does not broker credentials: Network policy refused: driver \"faulty_claimsegressproxy\" cannot broker credentials")
    );

    // The honest local driver enforces no policy and says so: not looked at.
    let root = tempfile::tempdir().unwrap();
    let honest = Suite::build(|| async {
        Ok(target(Fault::Honest, root.path())
            .await?
            .with_egress_host(egress.clone()))
    })
    .expect("suite");
    for (check, _) in EGRESS_CHECKS {
        let outcome = honest.run_check_outcome(check).expect("registered");
        assert_eq!(outcome.status, Status::NotChecked, "{check}: {:?}", outcome.message);
        assert_eq!(outcome.message.as_deref(), Some("the driver's leases get host network"));
    }
}

#[test]
fn without_a_test_host_the_egress_checks_say_not_checked() {
    let root = tempfile::tempdir().unwrap();
    let faulty = suite(Fault::ClaimsEgressProxy, root.path());
    let bypass = BYPASS_CHECKS.map(|(check, _)| (check, ""));
    let credential = [("egress_brokered_credential_stays_out_of_the_lease", "")];
    for (check, _) in EGRESS_CHECKS.into_iter().chain(bypass).chain(credential) {
        let outcome = faulty.run_check_outcome(check).expect("registered");
        assert_eq!(outcome.status, Status::NotChecked, "{check}: {:?}", outcome.message);
        assert_eq!(
            outcome.message.as_deref(),
            Some("no test host: the suite was given no test host")
        );
    }
}
