//! Policy grammar, decisions and grants, each error text pinned.

use super::*;
use crate::network::{GrantError, NetworkConfig};

fn allow(entries: &[&str]) -> Policy {
    Policy::new(Egress::Allow, entries).unwrap()
}

fn err(entries: &[&str]) -> String {
    Policy::new(Egress::Allow, entries).unwrap_err().to_string()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[derive(serde::Deserialize)]
struct Env {
    environment: EnvBody,
}
#[derive(serde::Deserialize)]
struct EnvBody {
    network: NetworkConfig,
}

fn toml_net(text: &str) -> Result<NetworkConfig, String> {
    toml::from_str::<Env>(text)
        .map(|e| e.environment.network)
        .map_err(|e| e.to_string())
}

#[test]
fn the_issue_shape_parses_from_toml() {
    let net = toml_net(
        r#"[environment.network]
egress = "allow"
allow = ["pypi.org", "*.pythonhosted.org:443", "203.0.113.0/24", "198.51.100.7/32:8080", "[2001:db8::/32]:443", "2001:db8:1::/48"]
grantable = ["api.example.com:443"]
"#,
    )
    .unwrap();
    let shown: Vec<String> = net.policy().allow().iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "pypi.org",
            "*.pythonhosted.org:443",
            "203.0.113.0/24",
            "198.51.100.7/32:8080",
            "[2001:db8::/32]:443",
            "2001:db8:1::/48"
        ]
    );
    assert_eq!(net.grantable()[0].to_string(), "api.example.com:443");
    assert_eq!(net.policy().egress(), Egress::Allow);
    let none = toml_net("[environment.network]\n").unwrap();
    assert_eq!(none.policy().egress(), Egress::None);
}

#[test]
fn every_bad_entry_has_its_pinned_text() {
    let cases: &[(&str, &str)] = &[
        ("", "allow: entry 0 is empty"),
        (
            "10.0.0.0/33",
            "allow: \"10.0.0.0/33\": bad CIDR: the prefix length 33 is longer than 32",
        ),
        (
            "10.0.0.1/8",
            "allow: \"10.0.0.1/8\": bad CIDR: host bits are set (the network is 10.0.0.0/8)",
        ),
        (
            "10.0.0.x/8",
            "allow: \"10.0.0.x/8\": bad CIDR: \"10.0.0.x\" is not an IP address",
        ),
        (
            "10.0.0.0/x",
            "allow: \"10.0.0.0/x\": bad CIDR: \"x\" is not a prefix length",
        ),
        (
            "2001:db8::/129",
            "allow: \"2001:db8::/129\": bad CIDR: the prefix length 129 is longer than 128",
        ),
        (
            "[10.0.0.0/8]:80",
            "allow: \"[10.0.0.0/8]:80\": bad CIDR: \"10.0.0.0\" in brackets is not an IPv6 address",
        ),
        (
            "[2001:db8::/32",
            "allow: \"[2001:db8::/32\": bad CIDR: a \"[\" without its \"]\"",
        ),
        (
            "pypi.org:0",
            "allow: \"pypi.org:0\": bad port \"0\": a port is a number from 1 to 65535",
        ),
        (
            "pypi.org:65536",
            "allow: \"pypi.org:65536\": bad port \"65536\": a port is a number from 1 to 65535",
        ),
        (
            "pypi.org:",
            "allow: \"pypi.org:\": bad port \"\": a port is a number from 1 to 65535",
        ),
        (
            "pypi.org:+1",
            "allow: \"pypi.org:+1\": bad port \"+1\": a port is a number from 1 to 65535",
        ),
        (
            "198.51.100.7/32:http",
            "allow: \"198.51.100.7/32:http\": bad port \"http\": a port is a number from 1 to 65535",
        ),
        (
            "py*.org",
            "allow: \"py*.org\": bad wildcard: only a whole leading label \"*.\" may be a wildcard",
        ),
        (
            "a.*.org",
            "allow: \"a.*.org\": bad wildcard: only a whole leading label \"*.\" may be a wildcard",
        ),
        (
            "*",
            "allow: \"*\": bad wildcard: only a whole leading label \"*.\" may be a wildcard",
        ),
        (
            "*.*.org",
            "allow: \"*.*.org\": bad wildcard: only a whole leading label \"*.\" may be a wildcard",
        ),
        (
            "py_pi.org",
            "allow: \"py_pi.org\": bad name: only letters, digits, \"-\" and \".\" may be in a name",
        ),
        (
            "-a.org",
            "allow: \"-a.org\": bad name: a label starts or ends with \"-\"",
        ),
        ("a..org", "allow: \"a..org\": bad name: an empty label"),
        (
            "1.2.3",
            "allow: \"1.2.3\": bad name: the last label is all digits (not an IP address either)",
        ),
        (
            " pypi.org",
            "allow: \" pypi.org\": bad name: only letters, digits, \"-\" and \".\" may be in a name",
        ),
    ];
    for (entry, text) in cases {
        assert_eq!(err(&[entry]), *text, "entry {entry:?}");
    }
    assert_eq!(err(&["pypi.org", ""]), "allow: entry 1 is empty");
}

#[test]
fn unknown_egress_and_entries_under_none_are_refused_from_toml() {
    let e = toml_net("[environment.network]\negress = \"some\"\n").unwrap_err();
    assert!(
        e.contains("egress = \"some\": unknown value (expected \"none\", \"allow\" or \"open\")"),
        "{e}"
    );
    let e = toml_net("[environment.network]\nallow = [\"pypi.org\"]\n").unwrap_err();
    assert!(
        e.contains("allow: entries need egress = \"allow\" or \"open\" (egress is \"none\")"),
        "{e}"
    );
    let e = toml_net("[environment.network]\negress = \"allow\"\ngrantable = [\"*x.org\"]\n").unwrap_err();
    assert!(e.contains("grantable: \"*x.org\": bad wildcard"), "{e}");
    let e = toml_net("[environment.network]\negres = \"allow\"\n").unwrap_err();
    assert!(e.contains("unknown field `egres`"), "{e}");
}

#[test]
fn names_wildcards_and_ports_decide() {
    let p = allow(&["pypi.org", "*.pythonhosted.org:443"]);
    assert_eq!(p.check_name("pypi.org", Some(80)), Ok(()));
    assert_eq!(p.check_name("PyPI.org.", Some(443)), Ok(()));
    assert_eq!(p.check_name("files.pythonhosted.org", Some(443)), Ok(()));
    assert_eq!(p.check_name("a.b.pythonhosted.org", None), Ok(()));
    assert_eq!(
        p.check_name("pythonhosted.org", Some(443)).unwrap_err().to_string(),
        "host \"pythonhosted.org\" is not in the allow list"
    );
    assert_eq!(
        p.check_name("evilpythonhosted.org", Some(443)).unwrap_err().to_string(),
        "host \"evilpythonhosted.org\" is not in the allow list"
    );
    assert_eq!(
        p.check_name("files.pythonhosted.org", Some(80))
            .unwrap_err()
            .to_string(),
        "port 80 is not allowed for host \"files.pythonhosted.org\""
    );
    assert_eq!(
        Policy::none().check_name("pypi.org", None).unwrap_err().to_string(),
        "egress is \"none\""
    );
    let open = Policy::new(Egress::Open, &[]).unwrap();
    assert_eq!(open.check_name("anything.example", Some(1)), Ok(()));
}

#[test]
fn raw_addresses_need_a_cidr_under_allow() {
    let p = allow(&["203.0.113.0/24", "198.51.100.7/32:8080", "[2001:db8::/32]:443"]);
    assert_eq!(p.check_ip(ip("203.0.113.9"), 22), Ok(()));
    assert_eq!(p.check_ip(ip("198.51.100.7"), 8080), Ok(()));
    assert_eq!(
        p.check_ip(ip("198.51.100.7"), 80).unwrap_err().to_string(),
        "port 80 is not allowed for host \"198.51.100.7\""
    );
    assert_eq!(
        p.check_ip(ip("198.51.100.8"), 8080).unwrap_err().to_string(),
        "address 198.51.100.8 is not in the allow list"
    );
    assert_eq!(p.check_ip(ip("2001:db8::5"), 443), Ok(()));
    // IPv4-mapped IPv6 is judged as the IPv4 address it carries.
    assert_eq!(p.check_ip(ip("::ffff:203.0.113.9"), 22), Ok(()));
}

#[test]
fn denied_ranges_hold_even_under_open() {
    let open = Policy::new(Egress::Open, &[]).unwrap();
    let cases = [
        (
            "169.254.169.254",
            "address 169.254.169.254 is in the cloud metadata range 169.254.169.254/32",
        ),
        (
            "::ffff:169.254.169.254",
            "address 169.254.169.254 is in the cloud metadata range 169.254.169.254/32",
        ),
        (
            "fd00:ec2::254",
            "address fd00:ec2::254 is in the cloud metadata range fd00:ec2::254/128",
        ),
        ("10.1.2.3", "address 10.1.2.3 is in the private range 10.0.0.0/8"),
        ("172.20.0.1", "address 172.20.0.1 is in the private range 172.16.0.0/12"),
        (
            "192.168.1.1",
            "address 192.168.1.1 is in the private range 192.168.0.0/16",
        ),
        ("127.0.0.1", "address 127.0.0.1 is in the loopback range 127.0.0.0/8"),
        ("::1", "address ::1 is in the loopback range ::1/128"),
        (
            "169.254.1.1",
            "address 169.254.1.1 is in the link-local range 169.254.0.0/16",
        ),
        ("fe80::1", "address fe80::1 is in the link-local range fe80::/10"),
        ("100.64.0.1", "address 100.64.0.1 is in the CGNAT range 100.64.0.0/10"),
        ("fd12::1", "address fd12::1 is in the unique-local range fc00::/7"),
        ("224.0.0.1", "address 224.0.0.1 is in the multicast range 224.0.0.0/4"),
        ("ff02::1", "address ff02::1 is in the multicast range ff00::/8"),
        ("0.0.0.0", "address 0.0.0.0 is in the this-network range 0.0.0.0/8"),
        ("::", "address :: is in the unspecified range ::/128"),
        (
            "64:ff9b::a9fe:a9fe",
            "address 64:ff9b::a9fe:a9fe is in the NAT64 range 64:ff9b::/96",
        ),
    ];
    for (addr, text) in cases {
        assert_eq!(open.check_ip(ip(addr), 80).unwrap_err().to_string(), text, "{addr}");
        assert_eq!(
            open.check_resolved(ip(addr), Some(80)).unwrap_err().to_string(),
            text,
            "{addr}"
        );
    }
    assert_eq!(open.check_ip(ip("203.0.113.1"), 80), Ok(()));
    assert_eq!(open.check_ip(ip("2001:db8::1"), 80), Ok(()));
}

#[test]
fn only_a_cidr_inside_a_denied_range_opens_it() {
    let wide = Policy::new(Egress::Open, &["0.0.0.0/0", "::/0"]).unwrap();
    assert!(wide.check_ip(ip("169.254.169.254"), 80).is_err());
    assert!(wide.check_ip(ip("10.0.0.1"), 80).is_err());
    let p = Policy::new(Egress::Open, &["10.200.0.0/16:80", "169.254.0.0/16"]).unwrap();
    assert_eq!(p.check_ip(ip("10.200.3.4"), 80), Ok(()));
    assert_eq!(p.check_resolved(ip("10.200.3.4"), Some(80)), Ok(()));
    assert!(p.check_ip(ip("10.200.3.4"), 81).is_err());
    assert_eq!(p.check_ip(ip("169.254.1.1"), 80), Ok(()));
    // The link-local CIDR does not name the metadata address inside it.
    assert_eq!(
        p.check_ip(ip("169.254.169.254"), 80).unwrap_err().to_string(),
        "address 169.254.169.254 is in the cloud metadata range 169.254.169.254/32"
    );
    let md = Policy::new(Egress::Open, &["169.254.169.254/32"]).unwrap();
    assert_eq!(md.check_ip(ip("169.254.169.254"), 80), Ok(()));
}

fn net(egress: Egress, allow: &[&str], grantable: &[&str]) -> NetworkConfig {
    NetworkConfig::new(Policy::new(egress, allow).unwrap(), grantable).unwrap()
}

#[test]
fn a_lease_may_narrow_and_widen_only_within_grantable() {
    let env = net(
        Egress::Allow,
        &["*.example.com", "203.0.113.0/24"],
        &["api.github.com:443"],
    );
    assert_eq!(env.lease_policy(None).unwrap(), *env.policy());
    let narrow = allow(&["pkg.example.com:443", "203.0.113.128/25"]);
    assert_eq!(env.lease_policy(Some(&narrow)).unwrap(), narrow);
    let granted = allow(&["api.github.com:443"]);
    assert_eq!(env.lease_policy(Some(&granted)).unwrap(), granted);
    assert_eq!(env.lease_policy(Some(&Policy::none())).unwrap(), Policy::none());
    let cases: &[(&[&str], &str)] = &[
        (&["api.github.com"], "api.github.com"),
        (&["example.com"], "example.com"),
        (&["203.0.0.0/16"], "203.0.0.0/16"),
        (&["*.github.com:443"], "*.github.com:443"),
    ];
    for (asked, shown) in cases {
        assert_eq!(
            env.lease_policy(Some(&allow(asked))).unwrap_err().to_string(),
            format!(
                "the lease asks for \"{shown}\", which the environment's policy neither allows nor lists as grantable"
            )
        );
    }
    let open = Policy::new(Egress::Open, &[]).unwrap();
    assert_eq!(
        env.lease_policy(Some(&open)).unwrap_err(),
        GrantError::Egress {
            asked: "open",
            env: "allow"
        }
    );
    assert_eq!(
        env.lease_policy(Some(&open)).unwrap_err().to_string(),
        "the lease asks for egress = \"open\", but the environment's policy is egress = \"allow\" and \"open\" is not grantable"
    );
}

#[test]
fn grants_over_none_and_under_open() {
    let deny_all = net(Egress::None, &[], &["pypi.org:443"]);
    let asked = allow(&["pypi.org:443"]);
    assert_eq!(deny_all.lease_policy(Some(&asked)).unwrap(), asked);
    assert!(deny_all.lease_policy(Some(&allow(&["pypi.org"]))).is_err());
    let open = net(Egress::Open, &["10.9.0.0/16"], &[]);
    assert!(
        open.lease_policy(Some(&allow(&["anything.example", "203.0.113.0/24"])))
            .is_ok()
    );
    assert!(open.lease_policy(Some(&allow(&["10.9.1.0/24"]))).is_ok());
    assert_eq!(
        open.lease_policy(Some(&allow(&["10.8.0.0/16"])))
            .unwrap_err()
            .to_string(),
        "the lease asks for \"10.8.0.0/16\", which the environment's policy neither allows nor lists as grantable"
    );
    assert!(open.lease_policy(Some(&allow(&["0.0.0.0/0"]))).is_err());
}

#[test]
fn a_section_round_trips_through_toml() {
    let text = r#"[environment.network]
egress = "open"
allow = ["10.200.0.0/16:80", "[fd00::/8]:443", "*.example.com"]
grantable = ["api.github.com:443"]
"#;
    let net = toml_net(text).unwrap();
    // Serialized (JSON here: the workspace's toml has no serializer) to the same shape.
    let json = serde_json::to_value(&net).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "egress": "open",
            "allow": ["10.200.0.0/16:80", "[fd00::/8]:443", "*.example.com"],
            "grantable": ["api.github.com:443"],
        })
    );
    let back: NetworkConfig = serde_json::from_value(json).unwrap();
    assert_eq!(back, net);
    let policy: Policy = toml::from_str("egress = \"allow\"\nallow = [\"pypi.org:443\"]\n").unwrap();
    assert_eq!(policy, allow(&["pypi.org:443"]));
    let e = toml::from_str::<Policy>("egress = \"allow\"\ngrantable = [\"x.org\"]\n").unwrap_err();
    assert!(e.to_string().contains("unknown field `grantable`"), "{e}");
}
