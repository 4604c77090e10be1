//! The reference worker's manifest, in one place: `reference-worker.manifest.json` (the
//! crate's documented example) embedded, with the worker's command filled in. The CLI,
//! the bench, the conformance kit and the tests all start the reference worker from it.

use std::path::Path;

use crate::host::manifest::PluginManifest;

/// The reference worker's binary name (crate `envrt-sandbox-worker`).
pub const REFERENCE_WORKER_BINARY: &str = "envrt-sandbox-worker";

const REFERENCE_MANIFEST: &str = include_str!("../../reference-worker.manifest.json");

/// The reference worker's manifest, running `worker` with its leases under `root`
/// (`[worker, "--root", root]`; push further flags onto `worker.command`).
pub fn reference_manifest(worker: &Path, root: &Path) -> PluginManifest {
    let mut manifest = PluginManifest::from_json(REFERENCE_MANIFEST)
        .unwrap_or_else(|e| unreachable!("reference-worker.manifest.json is a valid manifest: {e}"));
    manifest.worker.command = vec![
        worker.to_string_lossy().into_owned(),
        "--root".into(),
        root.to_string_lossy().into_owned(),
    ];
    manifest
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::DEFAULT_DRIVER_KEY;

    #[test]
    fn the_reference_manifest_runs_the_given_worker_over_the_given_root() {
        let manifest = reference_manifest(Path::new("/opt/w"), Path::new("/var/leases"));
        assert_eq!(manifest.id, "envrt.reference-sandbox");
        assert_eq!(manifest.worker.command, ["/opt/w", "--root", "/var/leases"]);
        assert_eq!(manifest.driver_key(None), DEFAULT_DRIVER_KEY);
        assert_eq!(manifest.driver_key(Some("other")), "other");
    }
}
