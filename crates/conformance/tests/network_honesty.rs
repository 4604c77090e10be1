//! The kit catches a driver that claims its leases have no network while its commands
//! share the host's: the local driver declaring itself isolated fails
//! `network_isolated_has_no_route`, naming the listener it reached; the honest local
//! driver is not looked at (its level is the host network, said so).

mod broken;

use broken::{Fault, suite};
use envrt_conformance::Status;

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
