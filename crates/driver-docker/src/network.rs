//! What a Docker lease's network is: `NetworkMode: none` (the default `network = "none"`
//! of the environment config) gives a container with loopback only, no route out; any
//! other mode (`bridge`, `host`, a user network) is a network the driver does not restrict,
//! so the facade refuses every network policy over it (see `envrt_driver_api::network`).

use envrt_driver_api::Environment;
use envrt_driver_api::network::NetworkBoundary;

use crate::config::EnvConfig;

/// The boundary of `environment`'s containers, `none` for those with no route out (proxied
/// where the driver runs the egress proxy); an environment whose config does not parse is
/// undeclared (its acquire fails on the config anyway).
pub(crate) fn boundary(environment: &Environment, none: NetworkBoundary) -> NetworkBoundary {
    match EnvConfig::of(environment) {
        Ok(config) => match mode_boundary(&config.network) {
            NetworkBoundary::Isolated => none,
            other => other,
        },
        Err(_) => NetworkBoundary::Undeclared,
    }
}

/// The boundary of Docker network mode `mode`.
pub(crate) fn mode_boundary(mode: &str) -> NetworkBoundary {
    if mode == "none" {
        NetworkBoundary::Isolated
    } else {
        NetworkBoundary::Unrestricted(format!("Docker network \"{mode}\""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_network_none_is_isolated() {
        assert_eq!(mode_boundary("none"), NetworkBoundary::Isolated);
        assert_eq!(
            mode_boundary("bridge"),
            NetworkBoundary::Unrestricted("Docker network \"bridge\"".into())
        );
        let mut config = envrt_driver_api::JsonMap::new();
        config.insert("image".into(), "img".into());
        let env = Environment::new("d", "d", "docker").with_config(config.clone());
        assert_eq!(boundary(&env, NetworkBoundary::Isolated), NetworkBoundary::Isolated);
        assert_eq!(boundary(&env, NetworkBoundary::Proxied), NetworkBoundary::Proxied);
        config.insert("network".into(), "host".into());
        let env = Environment::new("d", "d", "docker").with_config(config);
        assert_eq!(
            boundary(&env, NetworkBoundary::Isolated),
            NetworkBoundary::Unrestricted("Docker network \"host\"".into())
        );
        assert_eq!(
            boundary(&Environment::new("d", "d", "docker"), NetworkBoundary::Isolated),
            NetworkBoundary::Undeclared
        );
    }
}
