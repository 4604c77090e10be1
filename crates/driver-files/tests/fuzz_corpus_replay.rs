//! Every input checked in for this crate's fuzz targets (`fuzz/corpus/<target>/`, and the
//! crash inputs under `fuzz/regressions/<target>/`) goes through the same entry point the
//! target calls, on stable (`envrt_test_support::fuzz::replay`), so `cargo test` replays
//! them without nightly.

use envrt_test_support::fuzz::replay;

#[test]
fn the_archive_extract_corpus_replays_clean() {
    replay("archive_extract", envrt_driver_files::archive::fuzzing::archive_extract);
}
