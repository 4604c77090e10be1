//! Process ids that never repeat within a lease: each supervisor a lease ever had gives at
//! most [`IDS_PER_SUPERVISOR`] (2^32) numbers (the agent refuses to spawn past them), so the
//! `n`th supervisor of a lease (a generation counted from 0 in a file beside its socket,
//! out of the lease's reach) numbers from `n * IDS_PER_SUPERVISOR + 1` (its `--first-id`).
//! What a supervisor holds at once is a separate bound ([`HELD_PROCESSES`], its
//! `--max-processes`): an execute through it leaves its table when it is over, so executes
//! never use a supervisor up. A supervisor killed by a
//! command, by a restart of its host or by its host's end, is followed by one whose ids
//! start above every id the earlier ones could have given, so `{lease}/{n}` never names
//! two processes.

use std::path::Path;

/// The most ids one supervisor gives, so how far apart two generations number.
pub const IDS_PER_SUPERVISOR: u64 = envrt_agent::proto::IDS_PER_GENERATION;
/// The most processes one supervisor holds at once (`--max-processes`): running ones and
/// ended ones whose status it keeps.
pub const HELD_PROCESSES: u64 = envrt_agent::proto::DEFAULT_MAX_PROCESSES;

/// The arguments a supervisor of generation `generation` is started with:
/// `--max-processes {HELD_PROCESSES} --first-id {generation * IDS_PER_SUPERVISOR + 1}`.
pub fn id_args(generation: u64) -> [String; 4] {
    [
        "--max-processes".to_owned(),
        HELD_PROCESSES.to_string(),
        "--first-id".to_owned(),
        first_id(generation).to_string(),
    ]
}

/// The first id of the supervisor of generation `generation`.
pub fn first_id(generation: u64) -> u64 {
    generation.saturating_mul(IDS_PER_SUPERVISOR).saturating_add(1)
}

/// Takes the next generation from the counter file `counter` (0 when it is missing or
/// unreadable) and records the one after it, so the next supervisor starts past this one.
/// The caller holds the lease's start lock.
pub fn next_generation(counter: &Path) -> std::io::Result<u64> {
    let generation = match std::fs::read_to_string(counter) {
        Ok(text) => text.trim().parse::<u64>().unwrap_or(0),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(e),
    };
    std::fs::write(counter, generation.saturating_add(1).to_string())?;
    Ok(generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_generation_starts_above_every_id_of_the_ones_before() {
        let dir = tempfile::tempdir().unwrap();
        let counter = dir.path().join("generation");
        let firsts: Vec<u64> = (0..3).map(|_| first_id(next_generation(&counter).unwrap())).collect();
        assert_eq!(firsts, [1, (1 << 32) + 1, (2 << 32) + 1]);
        assert_eq!(std::fs::read_to_string(&counter).unwrap(), "3");
        assert_eq!(
            id_args(2),
            ["--max-processes", "4096", "--first-id", "8589934593"].map(str::to_owned)
        );
        // A counter that is no number starts over at 0 rather than failing the start.
        std::fs::write(&counter, "x").unwrap();
        assert_eq!(next_generation(&counter).unwrap(), 0);
        assert_eq!(first_id(u64::MAX), u64::MAX);
    }
}
