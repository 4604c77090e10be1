//! Every input checked in for this crate's fuzz targets (`fuzz/corpus/<target>/`, and the
//! crash inputs under `fuzz/regressions/<target>/`) goes through the same entry point the
//! target calls, on stable, so `cargo test` (and `cargo xtask ci`) replays them without
//! nightly. An empty or missing corpus fails: a replay that reads nothing proves nothing.

use std::path::Path;

/// Feeds every file of the target's corpus and regressions to `entry`; returns how many.
fn replay(target: &str, entry: fn(&[u8])) -> usize {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut fed = 0;
    for kind in ["corpus", "regressions"] {
        let dir = fuzz.join(kind).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            assert_eq!(kind, "regressions", "no corpus at {}", dir.display());
            continue;
        };
        let mut files: Vec<_> = entries.map(|e| e.expect("a corpus entry").path()).collect();
        files.sort();
        for file in files {
            let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let replayed = std::panic::catch_unwind(|| entry(&bytes));
            assert!(replayed.is_ok(), "{} fails its target's invariants", file.display());
            fed += 1;
        }
    }
    assert!(fed > 0, "the corpus of {target} is empty");
    fed
}

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
