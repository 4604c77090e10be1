//! The entry point of the `sandbox_manifest` fuzz target in the repository's `fuzz/`
//! directory (and of the stable test that replays its corpus). Not API.

use super::manifest::PluginManifest;

/// `fuzz_targets/sandbox_manifest`: the bytes as a plugin manifest. A refusal has a
/// text; an accepted manifest names a worker, and what it sends in `initialize` parses
/// back to the same manifest.
pub fn sandbox_manifest(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let manifest = match PluginManifest::from_json(text) {
        Ok(manifest) => manifest,
        Err(e) => return assert!(!e.to_string().is_empty()),
    };
    let wire = manifest.to_wire();
    let again = PluginManifest::from_json(&wire.to_string())
        .unwrap_or_else(|e| panic!("the manifest's own wire form is refused: {e}\n{wire}"));
    assert_eq!(again.to_wire(), wire);
    let _ = manifest.driver_key(None);
    let _ = manifest.default_entry();
}
