//! Every input checked in for this crate's fuzz targets (`fuzz/corpus/<target>/`, and the
//! crash inputs under `fuzz/regressions/<target>/`) goes through the same entry point the
//! target calls, on stable (`envrt_test_support::fuzz::replay`), so `cargo test` replays
//! them without nightly.

use envrt_test_support::fuzz::replay;

#[test]
fn the_agent_frame_corpus_replays_clean() {
    replay("agent_frame", envrt_agent::fuzzing::agent_frame);
}
