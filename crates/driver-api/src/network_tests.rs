//! The network decision table of [`super`]: every boundary against every setting, with the
//! exact refusal texts.

use super::*;

fn policy(egress: Egress, allow: &[&str]) -> Policy {
    Policy::new(egress, allow).unwrap()
}

fn config(egress: Egress, allow: &[&str], grantable: &[&str]) -> EnvironmentNetwork {
    EnvironmentNetwork::Policy(NetworkConfig::new(policy(egress, allow), grantable).unwrap())
}

const HOST: EnvironmentNetwork = EnvironmentNetwork::Host(HostNetwork::Host);

#[test]
fn host_shared_drivers_keep_the_host_network_and_refuse_every_policy() {
    let b = NetworkBoundary::HostShared;
    assert_eq!(environment_level("here", &b, None), Ok(NetworkLevel::HostNetwork));
    assert_eq!(
        environment_level("remote", &b, Some(&HOST)),
        Ok(NetworkLevel::HostNetwork)
    );
    for egress in [Egress::None, Egress::Open] {
        let err = environment_level("here", &b, Some(&config(egress, &[], &[]))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "driver \"here\" cannot enforce a network policy: its commands share the host's network; \
             drop the policy, or set network = \"host\" to run on the host network unrestricted"
        );
    }
    let err = lease_level("remote", &b, None, Some(&Policy::none())).unwrap_err();
    assert_eq!(
        err,
        NetworkRefusal::SharesHost {
            driver: "remote".into()
        }
    );
}

#[test]
fn isolated_drivers_have_no_network_and_refuse_what_needs_a_proxy() {
    let b = NetworkBoundary::Isolated;
    assert_eq!(environment_level("box", &b, None), Ok(NetworkLevel::NoNetwork));
    let none = config(Egress::None, &[], &["pypi.org"]);
    assert_eq!(environment_level("box", &b, Some(&none)), Ok(NetworkLevel::NoNetwork));
    assert_eq!(
        environment_level("box", &b, Some(&HOST)).unwrap_err().to_string(),
        "driver \"box\" cannot give a lease the host network: its leases have a network of their own \
         with no route out"
    );
    let allow = config(Egress::Allow, &["pypi.org"], &[]);
    assert_eq!(
        environment_level("engine", &b, Some(&allow)).unwrap_err().to_string(),
        "driver \"engine\" cannot enforce egress = \"allow\" yet: its leases have no network at all, \
         so only egress = \"none\" is accepted"
    );
    let open = config(Egress::Open, &[], &[]);
    assert_eq!(
        environment_level("box", &b, Some(&open)),
        Err(NetworkRefusal::NoProxy {
            driver: "box".into(),
            egress: "open"
        })
    );
}

#[test]
fn proxied_drivers_enforce_allow_and_open_within_the_grants() {
    let b = NetworkBoundary::Proxied;
    assert_eq!(environment_level("ctr", &b, None), Ok(NetworkLevel::NoNetwork));
    assert_eq!(
        environment_level("ctr", &b, Some(&HOST)),
        Err(NetworkRefusal::NoHostNetwork { driver: "ctr".into() })
    );
    let allow = config(Egress::Allow, &["pypi.org"], &["api.github.com:443"]);
    assert_eq!(
        environment_level("ctr", &b, Some(&allow)),
        Ok(NetworkLevel::Proxied(Egress::Allow))
    );
    assert_eq!(NetworkLevel::Proxied(Egress::Allow).to_string(), "egress proxy (allow)");
    assert_eq!(NetworkLevel::Proxied(Egress::Open).to_string(), "egress proxy (open)");
    // A lease narrowing to none has no network; one widening within grantable is proxied.
    assert_eq!(
        lease_level("ctr", &b, Some(&allow), Some(&Policy::none())),
        Ok(NetworkLevel::NoNetwork)
    );
    let widened = policy(Egress::Allow, &["pypi.org", "api.github.com:443"]);
    assert_eq!(
        lease_level("ctr", &b, Some(&allow), Some(&widened)),
        Ok(NetworkLevel::Proxied(Egress::Allow))
    );
    assert_eq!(
        lease_level("ctr", &b, Some(&allow), Some(&policy(Egress::Allow, &["evil.test"])))
            .unwrap_err()
            .to_string(),
        "the lease asks for \"evil.test\", which the environment's policy neither allows nor lists as grantable"
    );
    // The policy in force: the granted one, else the environment's, else none named.
    assert_eq!(lease_policy(Some(&allow), Some(&widened)), Ok(Some(widened.clone())));
    assert_eq!(
        lease_policy(Some(&allow), None),
        Ok(Some(policy(Egress::Allow, &["pypi.org"])))
    );
    assert_eq!(lease_policy(None, None), Ok(None));
    assert_eq!(lease_policy(Some(&HOST), None), Ok(None));
    assert_eq!(lease_policy(None, Some(&Policy::none())), Ok(Some(Policy::none())));
}

#[test]
fn a_lease_is_held_to_the_grantable_list_before_enforceability() {
    let b = NetworkBoundary::Isolated;
    let none = config(Egress::None, &[], &["pypi.org:443"]);
    // Narrowing (asking for "none") is always granted.
    assert_eq!(
        lease_level("box", &b, Some(&none), Some(&Policy::none())),
        Ok(NetworkLevel::NoNetwork)
    );
    assert_eq!(lease_level("box", &b, None, None), Ok(NetworkLevel::NoNetwork));
    // Widening outside grantable: the grant text.
    let asked = policy(Egress::Allow, &["example.com"]);
    assert_eq!(
        lease_level("box", &b, Some(&none), Some(&asked))
            .unwrap_err()
            .to_string(),
        "the lease asks for \"example.com\", which the environment's policy neither allows nor lists as grantable"
    );
    assert_eq!(
        lease_level("box", &b, None, Some(&policy(Egress::Open, &[])))
            .unwrap_err()
            .to_string(),
        "the lease asks for egress = \"open\", but the environment's policy is egress = \"none\" and \"open\" is \
         not grantable"
    );
    // Within grantable, but this driver has no proxy: refused, never pretended.
    let asked = policy(Egress::Allow, &["pypi.org:443"]);
    assert_eq!(
        lease_level("box", &b, Some(&none), Some(&asked)),
        Err(NetworkRefusal::NoProxy {
            driver: "box".into(),
            egress: "allow"
        })
    );
}

#[test]
fn unrestricted_and_undeclared_boundaries_refuse_every_setting() {
    let b = NetworkBoundary::Unrestricted("Docker network \"bridge\"".into());
    assert_eq!(
        environment_level("engine", &b, None).unwrap().to_string(),
        "unrestricted (Docker network \"bridge\")"
    );
    assert_eq!(
        environment_level("engine", &b, Some(&config(Egress::None, &[], &[])))
            .unwrap_err()
            .to_string(),
        "driver \"engine\" cannot enforce a network policy over Docker network \"bridge\": the lease would \
         reach the network around the policy"
    );
    assert!(lease_level("engine", &b, None, Some(&Policy::none())).is_err());
    let u = NetworkBoundary::Undeclared;
    assert_eq!(
        environment_level("p", &u, None).unwrap().to_string(),
        "undeclared by the driver"
    );
    assert_eq!(
        environment_level("p", &u, Some(&HOST)).unwrap_err().to_string(),
        "driver \"p\" does not declare what it does with its leases' network, so no network setting can be \
         enforced there"
    );
}

#[test]
fn the_environment_network_round_trips_through_json() {
    for network in [
        HOST,
        config(Egress::Allow, &["pypi.org", "10.200.0.0/16:80"], &["*.example.com"]),
    ] {
        let json = serde_json::to_value(&network).unwrap();
        let back: EnvironmentNetwork = serde_json::from_value(json).unwrap();
        assert_eq!(back, network);
    }
    assert_eq!(serde_json::to_value(HOST).unwrap(), serde_json::json!("host"));
    assert!(serde_json::from_value::<EnvironmentNetwork>(serde_json::json!("bridge")).is_err());
}
