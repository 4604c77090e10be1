//! An environment's `network` in `envrt.toml`: `network = "host"` (the explicit opt-in to
//! the host's network, accepted by the drivers whose commands share it: local, ssh) or a
//! table `[environment.network]` (a policy: `egress = "none" | "allow" | "open"`, `allow`,
//! `grantable`, in the `envrt-egress` grammar). Whether the driver can enforce it is
//! checked when the environment is recorded (`put_environment`); see
//! `envrt_runtime_core::network`.

use envrt_runtime_core::network::{EnvironmentNetwork, HostNetwork, NetworkConfig, RawNetwork};

/// The checked `network` of an environment; the error is the message without the file
/// or environment name.
pub(super) fn parse(value: &toml::Value) -> Result<EnvironmentNetwork, String> {
    match value {
        toml::Value::String(s) if s == "host" => Ok(EnvironmentNetwork::Host(HostNetwork::Host)),
        toml::Value::Table(table) => {
            let raw: RawNetwork = table
                .clone()
                .try_into()
                .map_err(|e: toml::de::Error| format!("[environment.network]: {}", e.message()))?;
            let config = NetworkConfig::try_from(raw).map_err(|e| format!("[environment.network]: {e}"))?;
            Ok(EnvironmentNetwork::Policy(config))
        }
        other => Err(format!(
            "network expects \"host\" or a table [environment.network], got {}",
            super::file::shown(other)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<EnvironmentNetwork, String> {
        let table: toml::Table = toml::from_str(text).unwrap();
        parse(&table["network"])
    }

    #[test]
    fn host_or_a_policy_table_and_exact_refusals_otherwise() {
        assert_eq!(
            parsed("network = \"host\""),
            Ok(EnvironmentNetwork::Host(HostNetwork::Host))
        );
        let policy =
            parsed("[network]\negress = \"allow\"\nallow = [\"pypi.org:443\"]\ngrantable = [\"*.example.com\"]")
                .unwrap();
        let EnvironmentNetwork::Policy(config) = policy else {
            panic!("not a policy")
        };
        assert_eq!(config.policy().allow().len(), 1);
        assert_eq!(config.grantable().len(), 1);
        assert_eq!(
            parsed("network = \"bridge\"").unwrap_err(),
            "network expects \"host\" or a table [environment.network], got \"bridge\""
        );
        assert_eq!(
            parsed("network = 3").unwrap_err(),
            "network expects \"host\" or a table [environment.network], got 3"
        );
        assert_eq!(
            parsed("[network]\negress = \"some\"").unwrap_err(),
            "[environment.network]: egress = \"some\": unknown value (expected \"none\", \"allow\" or \"open\")"
        );
        assert_eq!(
            parsed("[network]\negress = \"allow\"\nallow = [\"10.0.0.1/8\"]").unwrap_err(),
            "[environment.network]: allow: \"10.0.0.1/8\": bad CIDR: host bits are set (the network is 10.0.0.0/8)"
        );
        assert_eq!(
            parsed("[network]\nallow = [\"pypi.org\"]").unwrap_err(),
            "[environment.network]: allow: entries need egress = \"allow\" or \"open\" (egress is \"none\")"
        );
        assert_eq!(
            parsed("[network]\negres = \"none\"").unwrap_err(),
            "[environment.network]: unknown field `egres`, expected one of `egress`, `allow`, `grantable`, `credential`"
        );
    }

    #[test]
    fn credentials_are_read_with_their_secret_reference_and_exact_refusals() {
        let with = |entry: &str| {
            parsed(&format!(
                "[network]\negress = \"allow\"\nallow = [\"api.github.com:443\"]\n[[network.credential]]\n{entry}"
            ))
        };
        let EnvironmentNetwork::Policy(config) = with(
            "host = \"api.github.com\"\nheader = \"Authorization\"\nvalue = \"Bearer {secret}\"\nsecret = \"env:GITHUB_TOKEN\"",
        )
        .unwrap() else {
            panic!("not a policy")
        };
        assert_eq!(config.credentials()[0].host, "api.github.com");
        assert_eq!(
            with("host = \"api.github.com\"\nheader = \"Authorization\"\nvalue = \"Bearer\"\nsecret = \"env:T\"")
                .unwrap_err(),
            "[environment.network]: credential 0: value must contain \"{secret}\" exactly once, and otherwise only visible ASCII and spaces"
        );
        assert_eq!(
            with("host = \"api.github.com\"\nheader = \"A\"\nvalue = \"{secret}\"\nsecret = \"ghp_literal\"")
                .unwrap_err(),
            "[environment.network]: credential 0: secret \"ghp_literal\" must be \"env:NAME\" or \"file:/absolute/path\""
        );
        assert_eq!(
            with("host = \"api.github.com\"\nheader = \"A\"\nvalue = \"{secret}\"\nsecret = \"env:T\"\ntoken = \"x\"")
                .unwrap_err(),
            "[environment.network]: unknown field `token`, expected one of `host`, `header`, `value`, `secret`, `placeholder_env`"
        );
    }
}
