//! The process-session checks catch broken supervisors: each fault of
//! `broken/processes.rs` (the local driver's real supervisor behind a wrapper breaking one
//! promise) makes the check that guards it fail, with the failure it names, while the
//! honest driver behind the same wrapper passes every one of them.

#[allow(dead_code, reason = "the other faults' helpers serve broken_drivers.rs")]
mod broken;

use broken::processes::ProcessFault;
use broken::{Fault, suite};
use envrt_conformance::Status;

/// Runs `check` against `fault` and returns its failure text, after killing whatever a
/// leaking fault left carrying the suite's markers.
fn failure_of(fault: ProcessFault, check: &str) -> String {
    let root = tempfile::tempdir().unwrap();
    let suite = suite(Fault::Process(fault), root.path());
    let outcome = suite.run_check_outcome(check);
    for pid in envrt_conformance::processes_with_marker(suite.marker_prefix()) {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    match outcome {
        Some(outcome) if outcome.status == Status::Failed => outcome.message.unwrap_or_default(),
        Some(outcome) => panic!(
            "{fault:?}: {check} ended {:?} against a broken supervisor",
            outcome.status
        ),
        None => panic!("{fault:?}: {check} is not registered"),
    }
}

macro_rules! catches {
    ($($test:ident: $fault:ident => $check:literal, $expected:literal;)+) => {
        $(
            #[test]
            fn $test() {
                let message = failure_of(ProcessFault::$fault, $check);
                assert!(message.contains($expected), "{}: {message}", stringify!($fault));
            }
        )+

        /// Every check above passes against the honest driver behind the same wrapper.
        #[test]
        fn the_honest_supervisor_passes_every_process_check() {
            let root = tempfile::tempdir().unwrap();
            let suite = suite(Fault::Honest, root.path());
            for check in [$($check),+] {
                let outcome = suite.run_check_outcome(check).expect("registered");
                assert_eq!(outcome.status, Status::Passed, "{check}: {:?}", outcome.message);
            }
        }
    };
}

catches! {
    ids_the_supervisor_does_not_know: ShiftsProcessIds =>
        "processes_survive_their_caller", "process from a second runtime: Process \"";
    an_ignored_start_offset: IgnoresFromOffset =>
        "processes_replay_from_a_middle_offset", "the offset of the next stdout chunk: expected 4, got 0";
    dropped_bytes_not_counted: MisreportsDropped =>
        "processes_count_dropped_bytes_at_the_bound", "(written, dropped): expected (200, 150), got (200, 0)";
    a_signal_to_the_leader_alone: SignalsOnlyTheLeader =>
        "processes_signal_reaches_the_group", "processes survived";
    a_lost_stdin_byte: DropsLastStdinByte =>
        "processes_stdin_round_trip_with_eof", "cat returned 70001 bytes of 70003";
    an_ignored_resize: IgnoresResize =>
        "processes_tty_size_and_resize", "the size after resize";
    a_forgotten_exit_status: ForgetsExitStatus =>
        "processes_keep_exit_status", "expected Exited { code: 5 }, got Exited { code: 0 }";
    a_process_outside_the_lease_outlives_release: LeaksProcessOutsideLease =>
        "processes_end_with_release", "processes survived";
    a_process_outside_the_lease_outlives_destroy: LeaksProcessOutsideLease =>
        "processes_end_with_destroy", "processes survived";
    an_ignored_idempotency_key: IgnoresIdempotencyKey =>
        "processes_idempotent_spawn", "the process of the same key and request";
    a_starved_second_reader: StarvesASecondReader =>
        "processes_concurrent_readers_see_the_same_bytes", "the two readers saw different bytes";
    a_timeout_that_kills_the_leader_alone: TimeoutKillsOnlyTheLeader =>
        "processes_timeout_kills_the_group", "processes survived";
    an_empty_list: ListsNothing =>
        "processes_are_listed", "the processes: expected [(";
    made_up_processes: InventsProcesses =>
        "processes_refusal_texts", "an unknown process: expected \"Process \\\"";
    a_grant_without_spawns: ClaimsProcessesButRefuses =>
        "honesty_processes", "spawn despite the capability: no processes here";
    a_grant_without_the_group: GrantsWithoutTheGroup =>
        "honesty_processes", "the lease grants persistentProcessSessions but the driver has no process group";
}

/// Whether the skipped chunk held all of stdout or only its start depends on how the
/// supervisor read the pipe: either way the check names what is missing.
#[test]
fn a_skipped_first_chunk() {
    let message = failure_of(ProcessFault::SkipsFirstChunk, "processes_replay_from_zero");
    assert!(
        message.starts_with("the offset of the next stdout chunk: expected 0, got ")
            || message.starts_with("stdout from 0: expected \"out1\\nout2"),
        "{message}"
    );
    let root = tempfile::tempdir().unwrap();
    let honest = suite(Fault::Honest, root.path()).run_check_outcome("processes_replay_from_zero");
    assert_eq!(honest.expect("registered").status, Status::Passed);
}
