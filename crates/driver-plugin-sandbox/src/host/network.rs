//! What a plugin sandbox lease's network is. The reference worker runs every command under
//! bubblewrap with `--unshare-all`, so each lease has a network namespace of its own with
//! loopback only, no route out; any other plugin worker says nothing about its network, so
//! the facade refuses every network setting on it (see `envrt_driver_api::network`).

use envrt_driver_api::network::NetworkBoundary;

use super::manifest::PluginManifest;

/// The manifest id of the reference worker (`reference-worker.manifest.json`).
pub(crate) const REFERENCE_ID: &str = "envrt.reference-sandbox";

/// The boundary of leases of the worker `manifest` starts.
pub(crate) fn boundary(manifest: &PluginManifest) -> NetworkBoundary {
    if manifest.id == REFERENCE_ID {
        NetworkBoundary::Isolated
    } else {
        NetworkBoundary::Undeclared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_reference_worker_is_isolated() {
        let reference = crate::reference_manifest(std::path::Path::new("/w"), std::path::Path::new("/r"));
        assert_eq!(boundary(&reference), NetworkBoundary::Isolated);
        let mut other = reference.clone();
        other.id = "acme.sandbox".into();
        assert_eq!(boundary(&other), NetworkBoundary::Undeclared);
    }
}
