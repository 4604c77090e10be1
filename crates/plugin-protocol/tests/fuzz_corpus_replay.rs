//! Every input checked in for this crate's fuzz targets (`fuzz/corpus/<target>/`, and the
//! crash inputs under `fuzz/regressions/<target>/`) goes through the same entry point the
//! target calls, on stable (`envrt_test_support::fuzz::replay`), so `cargo test` replays
//! them without nightly.

use envrt_test_support::fuzz::replay;

#[test]
fn the_protocol_line_corpus_replays_clean() {
    replay("protocol_line", envrt_plugin_protocol::fuzzing::protocol_line);
}

#[test]
fn the_protocol_params_corpus_replays_clean() {
    replay("protocol_params", envrt_plugin_protocol::fuzzing::protocol_params);
}

#[test]
fn the_dataplane_frame_corpus_replays_clean() {
    replay("dataplane_frame", envrt_plugin_protocol::fuzzing::dataplane_frame);
}
