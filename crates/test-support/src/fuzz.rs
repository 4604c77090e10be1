//! The stable replay of the fuzz corpora: every input checked in for a fuzz target
//! (`fuzz/corpus/<target>/`, and the crash inputs under `fuzz/regressions/<target>/`) goes
//! through the same entry point the target calls, so `cargo test` (and `cargo xtask ci`)
//! replays them without nightly. An empty or missing corpus fails: a replay that reads
//! nothing proves nothing.

use std::path::{Path, PathBuf};

/// The repository's `fuzz/` directory.
fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Feeds every file of `target`'s corpus and regressions, in name order, to `entry` (which
/// panics when an input breaks the target's invariants); returns how many it fed. Panics
/// naming the file that fails, and when the corpus is missing or empty.
#[track_caller]
pub fn replay(target: &str, entry: fn(&[u8])) -> usize {
    let fuzz = fuzz_dir();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_corpus_fails_naming_where_it_looked() {
        let outcome = std::panic::catch_unwind(|| replay("no_such_target", |_| {}));
        let message = *outcome.unwrap_err().downcast::<String>().unwrap();
        assert!(
            message.starts_with("assertion `left == right` failed: no corpus at "),
            "{message}"
        );
        assert!(message.contains("fuzz/corpus/no_such_target"), "{message}");
    }

    #[test]
    fn an_input_that_breaks_the_invariants_fails_naming_its_file() {
        let outcome = std::panic::catch_unwind(|| replay("protocol_line", |_| panic!("broken")));
        let message = *outcome.unwrap_err().downcast::<String>().unwrap();
        assert!(message.contains("fuzz/corpus/protocol_line/"), "{message}");
        assert!(message.ends_with("fails its target's invariants"), "{message}");
    }
}
