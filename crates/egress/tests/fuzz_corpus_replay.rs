//! Every input checked in for this crate's fuzz targets (`fuzz/corpus/<target>/`, and the
//! crash inputs under `fuzz/regressions/<target>/`) goes through the same entry point the
//! target calls, on stable (`envrt_test_support::fuzz::replay`), so `cargo test` replays
//! them without nightly.

use envrt_test_support::fuzz::replay;

#[test]
fn the_egress_policy_corpus_replays_clean() {
    replay("egress_policy", envrt_egress::fuzzing::egress_policy);
}

#[test]
fn the_egress_head_corpus_replays_clean() {
    replay("egress_head", envrt_egress::fuzzing::egress_head);
}

#[test]
fn the_egress_dns_corpus_replays_clean() {
    replay("egress_dns", envrt_egress::fuzzing::egress_dns);
}
