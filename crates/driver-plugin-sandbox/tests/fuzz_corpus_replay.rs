//! Every input checked in for this crate's fuzz targets (`fuzz/corpus/<target>/`, and the
//! crash inputs under `fuzz/regressions/<target>/`) goes through the same entry point the
//! target calls, on stable (`envrt_test_support::fuzz::replay`), so `cargo test` replays
//! them without nightly.

use envrt_test_support::fuzz::replay;

#[test]
fn the_sandbox_manifest_corpus_replays_clean() {
    replay(
        "sandbox_manifest",
        envrt_driver_plugin_sandbox::host::fuzzing::sandbox_manifest,
    );
}
