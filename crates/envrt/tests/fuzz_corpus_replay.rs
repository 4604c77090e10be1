//! Every input checked in for this crate's fuzz targets (`fuzz/corpus/<target>/`, and the
//! crash inputs under `fuzz/regressions/<target>/`) goes through the same entry point the
//! target calls, on stable (`envrt_test_support::fuzz::replay`), so `cargo test` replays
//! them without nightly.
#![cfg(all(feature = "config", feature = "all-drivers"))]

use envrt_test_support::fuzz::replay;

#[test]
fn the_config_toml_corpus_replays_clean() {
    replay("config_toml", envrt::config::Config::fuzz_config_toml);
}
