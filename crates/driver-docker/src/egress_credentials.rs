//! Brokered credentials on Docker (`[[environment.network.credential]]`): the shared
//! part is [`envrt_driver_agent::egress::credentials`]; here only what the container is
//! given. The proxy writes the bundle into the lease's sockets directory, which the
//! container sees read-only at [`EGRESS_DIR`](crate::egress::EGRESS_DIR), so the bundle is
//! at [`LEASE_CA_BUNDLE`](envrt_driver_agent::egress::credentials::LEASE_CA_BUNDLE).

use envrt_driver_api::network::Credential;

pub(crate) use envrt_driver_agent::egress::credentials::{brokering, of};

/// The container variables for `credentials` (`NAME=value`): the CA bundle for every TLS
/// client, and the placeholders. Nothing when there are none.
pub(crate) fn lease_env(credentials: &[Credential]) -> Vec<String> {
    envrt_driver_agent::egress::credentials::lease_env(credentials)
        .into_iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use envrt_driver_agent::egress::credentials::{CA_BUNDLE, LEASE_CA_BUNDLE};

    #[test]
    fn the_bundle_is_where_the_container_sees_the_sockets_directory() {
        assert_eq!(LEASE_CA_BUNDLE, format!("{}/{CA_BUNDLE}", crate::egress::EGRESS_DIR));
    }
}
