//! The kit catches broken drivers: deliberately faulty wrappers around the real local
//! driver (see `broken/mod.rs`), each of which must make the check that guards its fault
//! fail, naming it, while the honest driver passes that check. At least one fault per
//! class the kit guards: life cycle behind the facade, inputs sent positively, duplex
//! shape, concurrency, unobserved channels, the kit itself, probes that cannot look.

mod broken;

use std::time::Duration;

use broken::{Fault, suite};
use envrt_conformance::{Status, Suite};

/// Runs `check` against the faulty driver and returns its failure text.
fn failure_of(fault: Fault, check: &str) -> String {
    let root = tempfile::tempdir().unwrap();
    let suite = suite(fault, root.path());
    match suite.run_check_outcome(check) {
        Some(outcome) if outcome.status == Status::Failed => {
            let message = outcome.message.unwrap_or_default();
            assert_eq!(outcome.name, format!("driver_{}::{check}", suite.key()));
            message
        }
        Some(outcome) => panic!(
            "{fault:?}: {check} ended {:?} against a broken driver: {:?}",
            outcome.status, outcome.message
        ),
        None => panic!("{fault:?}: {check} is not registered"),
    }
}

/// The honest driver behind the same wrapper passes `checks`.
fn honest_passes(checks: &[&str]) {
    let root = tempfile::tempdir().unwrap();
    let suite = suite(Fault::Honest, root.path());
    for check in checks {
        let outcome = suite.run_check_outcome(check).expect("registered");
        assert_eq!(outcome.status, Status::Passed, "{check}: {:?}", outcome.message);
    }
}

#[test]
fn claims_duplex_but_refuses() {
    let message = failure_of(Fault::ClaimsDuplexButRefuses, "honesty_duplex");
    assert!(
        message.contains("open_duplex_channel despite the capability"),
        "{message}"
    );
}

#[test]
fn refuses_with_the_wrong_text() {
    let message = failure_of(Fault::WrongRefusalText, "sync_in_refuses_parent_target");
    assert!(message.starts_with("refusal: expected \"Path \\\"../"), "{message}");
    assert!(message.ends_with("got \"Invalid input: bad path\""), "{message}");
}

#[test]
fn leaks_a_process_past_a_timeout() {
    let root = tempfile::tempdir().unwrap();
    let suite = suite(Fault::LeaksProcessPastTimeout, root.path());
    let outcome = suite.run_check("execute_timeout_kills_tree");
    // Clean up what the faulty driver leaked before asserting.
    for pid in envrt_conformance::processes_with_marker(suite.marker_prefix()) {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    let message = outcome.expect("registered").expect_err("a leaking driver passed");
    assert!(message.starts_with("processes survived"), "{message}");
}

#[test]
fn kills_only_the_process_group_at_a_timeout() {
    let root = tempfile::tempdir().unwrap();
    let suite = suite(Fault::KillsOnlyTheProcessGroup, root.path());
    // The tree the older check builds stays in the command's group: this driver passes it.
    let older = suite.run_check("execute_timeout_kills_tree").expect("registered");
    let outcome = suite.run_check("execute_timeout_kills_new_session");
    for pid in envrt_conformance::processes_with_marker(suite.marker_prefix()) {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    assert!(older.is_ok(), "{older:?}");
    let message = outcome.expect("registered").expect_err("a group-only kill passed");
    assert!(message.starts_with("processes survived"), "{message}");
    honest_passes(&["execute_timeout_kills_new_session", "execute_timeout_kills_tree"]);
}

#[test]
fn leaks_a_host_descriptor_to_the_command() {
    let message = failure_of(Fault::LeaksHostDescriptors, "execute_host_descriptors_not_inherited");
    assert!(
        message.starts_with("a descriptor the host program holds reached the command: "),
        "{message}"
    );
    assert!(message.contains("host-descriptor"), "{message}");
    honest_passes(&["execute_host_descriptors_not_inherited"]);
}

#[test]
fn leaves_its_command_running_when_the_execute_is_dropped() {
    let root = tempfile::tempdir().unwrap();
    let suite = suite(Fault::LeavesCommandRunningOnDrop, root.path());
    let outcome = suite.run_check("execute_drop_kills_tree");
    let leaked = envrt_conformance::processes_with_marker(suite.marker_prefix());
    // Clean up what the faulty driver leaked before asserting.
    for pid in &leaked {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    let message = outcome.expect("registered").expect_err("a leaking driver passed");
    assert!(message.starts_with("processes survived"), "{message}");
    assert!(!leaked.is_empty());
}

#[test]
fn drops_a_byte_of_stdin() {
    let message = failure_of(Fault::DropsStdinByte, "execute_stdin_roundtrip");
    assert!(message.contains("cat returned"), "{message}");
}

#[test]
fn keeps_special_bits() {
    let message = failure_of(Fault::KeepsSpecialBits, "sync_clears_special_bits");
    assert_eq!(
        message,
        "modes after sync in (special bits cleared): expected \"755 su\\n777 g\\n\", got \"4755 su\\n2777 g\\n\""
    );
    honest_passes(&["sync_clears_special_bits"]);
}

#[test]
fn writes_outside_a_sync_target() {
    let message = failure_of(Fault::WritesOutsideTarget, "sync_in_refuses_parent_target");
    assert!(message.starts_with("accepted; expected the refusal"), "{message}");
}

// Class 1: the lease life cycle behind the facade.

#[test]
fn a_second_release_on_the_driver_fails() {
    let message = failure_of(Fault::ReleaseNotIdempotent, "lifecycle_driver_release_after_end");
    assert!(
        message.starts_with("the driver's release_lease of an ended lease (#1) failed: "),
        "{message}"
    );
    assert!(message.ends_with("was already released"), "{message}");
}

#[test]
fn an_ephemeral_release_that_keeps_the_workspace() {
    let message = failure_of(
        Fault::EphemeralReleaseKeepsWorkspace,
        "lifecycle_ephemeral_release_frees_resource",
    );
    assert_eq!(
        message,
        "an ephemeral lease's resource still exists after its release (before any destroy)"
    );
}

#[test]
fn a_resume_that_hands_out_ghosts() {
    let message = failure_of(Fault::ResumesGhosts, "lifecycle_driver_resume_after_release");
    assert!(
        message.starts_with("the driver resumed a released ephemeral lease"),
        "{message}"
    );
}

#[test]
fn a_destroy_that_fails_when_the_resource_is_gone() {
    let message = failure_of(Fault::DestroyFailsWhenGone, "lifecycle_driver_unknown_lease");
    assert!(
        message.starts_with("the driver's destroy_lease of a lease it never issued failed: "),
        "{message}"
    );
}

// Class 2: valid inputs sent positively.

#[test]
fn a_subdirectory_cwd_ignored() {
    let message = failure_of(Fault::IgnoresSubdirCwd, "execute_cwd_subdirectory");
    assert!(message.starts_with("pwd with cwd "), "{message}");
}

#[test]
fn env_values_cut_at_equals() {
    let message = failure_of(Fault::CutsEnvAtEquals, "execute_env_values_with_equals");
    assert!(
        message.starts_with("values containing = seen by the command: expected \"a=b\\n=\\n"),
        "{message}"
    );
}

#[test]
fn empty_directories_dropped() {
    let message = failure_of(Fault::DropsEmptyDirs, "sync_empty_directories");
    assert!(
        message.starts_with("an empty directory is missing in the environment"),
        "{message}"
    );
}

// Class 3: duplex shape.

#[test]
fn a_duplex_group_never_granted() {
    // The facade's refusal text is right, so the old check passes...
    let root = tempfile::tempdir().unwrap();
    let faulty = suite(Fault::DuplexNeverGranted, root.path());
    assert_eq!(faulty.run_check("honesty_duplex"), Some(Ok(())));
    // ...and the shape check names the fault.
    let message = failure_of(Fault::DuplexNeverGranted, "honesty_duplex_shape");
    assert!(
        message
            .starts_with("the driver has a duplex group and verifies duplexChannelOpen, but the lease does not grant"),
        "{message}"
    );
}

#[test]
fn a_duplex_refusal_in_the_drivers_own_words() {
    let message = failure_of(Fault::DuplexOwnRefusalText, "honesty_duplex_shape");
    assert_eq!(
        message,
        "the driver answered with a refusal text of its own (\"Environment driver \\\"faulty_duplexownrefusaltext\\\" \
         does not support duplex channels.\") on a lease that grants duplexCommandStream"
    );
}

// Class 4: what happens at the same time.

#[test]
fn executes_serialized_behind_a_lock() {
    let root = tempfile::tempdir().unwrap();
    let faulty = suite(Fault::SerializesExecutes, root.path());
    assert_eq!(
        faulty.run_check("execute_concurrent"),
        Some(Ok(())),
        "outputs alone pass"
    );
    let message = failure_of(Fault::SerializesExecutes, "execute_concurrent_overlap");
    assert!(
        message.ends_with("the two commands did not run at the same time"),
        "{message}"
    );
}

// Class 5: unobserved channels.

#[test]
fn secrets_in_the_tracing_output() {
    let message = failure_of(Fault::LogsSecrets, "execute_secrets_not_logged");
    assert!(
        message.starts_with("a secret env value appeared in the tracing or log output"),
        "{message}"
    );
    // Where it was seen: the faulty driver's own event.
    assert!(message.contains("broken_drivers::broken DEBUG"), "{message}");
}

#[test]
fn synced_files_world_readable_while_written() {
    let message = failure_of(Fault::LooseWhileWriting, "sync_in_mode_never_looser");
    assert!(
        message.starts_with("files were readable with a looser mode than 0600 while the sync wrote them"),
        "{message}"
    );
}

#[test]
fn host_files_world_readable_while_synced_out() {
    let message = failure_of(Fault::LooseWhileWritingOut, "sync_out_mode_never_looser");
    assert!(
        message.starts_with("host files were readable with a looser mode than 0600 while the sync wrote them"),
        "{message}"
    );
}

// Class 6: the kit itself.

#[test]
fn a_driver_that_blocks_forever_fails_one_check_and_the_suite_goes_on() {
    let root = tempfile::tempdir().unwrap();
    let suite = Suite::build(|| async {
        Ok(broken::target(Fault::BlocksInRealize, root.path())
            .await?
            .with_deadline(Duration::from_secs(3))
            .only(&["honesty_", "cleanup_no_process"]))
    })
    .unwrap();
    let report = suite.run_all();
    let realize = report
        .trials
        .iter()
        .find(|t| t.name.ends_with("::honesty_realize"))
        .expect("reported");
    assert_eq!(realize.status, Status::Failed);
    assert_eq!(
        realize.message.as_deref(),
        Some("honesty_realize did not finish within its deadline of 3 s; it was abandoned")
    );
    assert!(!report.passed);
    // Every other check ran, after the hang, and passed.
    let names = suite.check_names();
    assert_eq!(report.trials.len(), names.len());
    for trial in report.trials.iter().filter(|t| !t.name.ends_with("::honesty_realize")) {
        assert_eq!(trial.status, Status::Passed, "{trial:?}");
    }
}

#[test]
fn a_panicking_check_is_a_failure_in_the_report() {
    let root = tempfile::tempdir().unwrap();
    let suite = Suite::build(|| async {
        Ok(broken::target(Fault::PanicsOnMissingProgram, root.path())
            .await?
            .only(&["execute_missing_program", "execute_stdout_stderr_apart"]))
    })
    .unwrap();
    let report = suite.run_all();
    assert!(!report.passed);
    let json = serde_json::to_value(&report).unwrap();
    let trials = json["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 2);
    let missing = &trials[0];
    assert_eq!(
        missing["name"],
        "driver_faulty_panicsonmissingprogram::execute_missing_program"
    );
    assert_eq!(missing["status"], "failed");
    assert_eq!(missing["passed"], false);
    assert_eq!(
        missing["message"],
        "execute_missing_program panicked: the faulty driver cannot bear a missing program"
    );
    assert_eq!(trials[1]["status"], "passed");
}

#[test]
fn each_check_reports_its_own_promise() {
    // A cwd outside the workspace is execute_cwd_confined's promise, not the secrets'.
    let root = tempfile::tempdir().unwrap();
    let faulty = suite(Fault::AcceptsOutsideCwd, root.path());
    assert_eq!(faulty.run_check("execute_secrets_absent"), Some(Ok(())));
    let message = failure_of(Fault::AcceptsOutsideCwd, "execute_cwd_confined");
    assert_eq!(message, "cwd ../outside accepted");
}

// Class 8: probes that cannot look.

#[test]
fn probes_that_cannot_look_report_not_checked() {
    let root = tempfile::tempdir().unwrap();
    let blind = Suite::build(|| async {
        let mut target = broken::target(Fault::LeaksProcessPastTimeout, root.path())
            .await?
            .with_proc_root("/nonexistent-proc");
        target.resource = None;
        Ok(target)
    })
    .unwrap();
    let expect = |check: &str, why: &str| {
        let outcome = blind.run_check_outcome(check).expect("registered");
        assert_eq!(outcome.status, Status::NotChecked, "{check}: {outcome:?}");
        let message = outcome.message.unwrap();
        assert!(message.starts_with(why), "{check}: {message}");
    };
    for check in [
        "execute_timeout_kills_tree",
        "execute_timeout_kills_orphans_and_term_ignorers",
    ] {
        expect(
            check,
            "the command behaved, but survivors cannot be looked for: /nonexistent-proc cannot be read",
        );
    }
    for pid in envrt_conformance::processes_with_marker(blind.marker_prefix()) {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    expect(
        "cleanup_no_process",
        "cannot look for processes: /nonexistent-proc cannot be read",
    );
    expect(
        "cleanup_no_driver_leftovers",
        "the target has no leftovers probe (Target::with_leftovers)",
    );
    expect(
        "lifecycle_ephemeral_release_frees_resource",
        "the target has no resource probe (Target::with_resource_probe)",
    );
    let report = blind.report();
    assert!(report.passed, "not checked is not a failure");
    let json = serde_json::to_string(&report).unwrap();
    assert!(json.contains("\"status\":\"notChecked\""), "{json}");
}

#[test]
fn the_honest_driver_passes_the_same_checks() {
    honest_passes(&[
        "honesty_duplex",
        "honesty_duplex_shape",
        "sync_in_refuses_parent_target",
        "execute_timeout_kills_tree",
        "execute_drop_kills_tree",
        "execute_stdin_roundtrip",
        "lifecycle_driver_release_after_end",
        "lifecycle_ephemeral_release_frees_resource",
        "lifecycle_driver_resume_after_release",
        "lifecycle_driver_unknown_lease",
        "execute_cwd_subdirectory",
        "execute_env_values_with_equals",
        "sync_empty_directories",
        "execute_concurrent_overlap",
        "execute_secrets_not_logged",
        "sync_in_mode_never_looser",
        "sync_out_mode_never_looser",
        "honesty_realize",
        "execute_argv_roundtrip",
        "execute_cwd_confined",
        "execute_secrets_absent",
        "cleanup_no_process",
        "templates_a_lease_from_a_template_has_its_files_and_not_later_changes",
        "templates_a_deleted_template_refuses_acquire_with_its_text",
    ]);
}

#[test]
fn a_template_that_follows_its_source_after_the_capture() {
    let message = failure_of(
        Fault::TemplateIsLive,
        "templates_a_lease_from_a_template_has_its_files_and_not_later_changes",
    );
    assert!(message.starts_with("what a lease from the template sees"), "{message}");
}

#[test]
fn a_template_deletion_that_keeps_the_template() {
    let message = failure_of(
        Fault::DeleteKeepsTemplate,
        "templates_a_deleted_template_refuses_acquire_with_its_text",
    );
    assert!(message.starts_with("delete_template's answer"), "{message}");
}

#[test]
fn pool_hands_out_leases_that_share_a_workspace() {
    let check = "pool_concurrent_acquires_get_distinct_clean_leases";
    let message = failure_of(Fault::SharesOneWorkspace, check);
    assert!(message.contains("sees a file written in another lease"), "{message}");
    honest_passes(&[check]);
}

// One text per case on every driver (contract section 5).

#[test]
fn a_missing_program_worded_as_a_shell_would_is_caught() {
    let message = failure_of(Fault::OwnNotFoundText, "execute_missing_program");
    assert!(
        message.starts_with("stderr: expected \"envrt: command not found: "),
        "{message}"
    );
    assert!(
        message.ends_with("-no-such-program-0: command not found\\n\""),
        "{message}"
    );
    honest_passes(&["execute_missing_program"]);
}

#[test]
fn a_missing_cwd_worded_by_the_driver_is_caught() {
    let message = failure_of(Fault::OwnMissingCwdText, "execute_missing_cwd");
    assert!(
        message.starts_with("refusal: expected \"Invalid input: cwd \\\""),
        "{message}"
    );
    assert!(
        message.contains("is not a directory in the environment.\", got \"Invalid input: working directory \\\""),
        "{message}"
    );
    honest_passes(&["execute_missing_cwd"]);
}

// A duplex channel carries stderr with stdout, in order (contract section 7).

#[test]
fn a_duplex_channel_that_drops_stderr_is_caught() {
    let message = failure_of(Fault::DuplexDropsStderr, "duplex_stderr_in_order");
    assert!(
        message.starts_with("stdout and stderr read from the channel: expected \"out-1\\nerr-1\\n"),
        "{message}"
    );
    assert!(message.ends_with("got \"out-1\\nout-2\\nout-3\\n\""), "{message}");
}

#[test]
fn a_duplex_channel_that_holds_stderr_back_is_caught() {
    let message = failure_of(Fault::DuplexStderrLast, "duplex_stderr_in_order");
    assert!(
        message.ends_with("got \"out-1\\nout-2\\nout-3\\nerr-1\\nerr-2\\n\""),
        "{message}"
    );
}

// Output under a slow reader and at a timeout (contract section 5).

#[test]
fn a_relay_that_drops_chunks_when_the_sink_is_slow_is_caught() {
    let check = "execute_sink_slow_reader_gets_every_byte";
    // A quick sink gets everything: the older sink check passes.
    let root = tempfile::tempdir().unwrap();
    let faulty = suite(Fault::DropsChunksWhenTheSinkIsSlow, root.path());
    assert_eq!(faulty.run_check("execute_sink_streams"), Some(Ok(())));
    let message = failure_of(Fault::DropsChunksWhenTheSinkIsSlow, check);
    // Which stream loses a chunk first depends on the timing; one does.
    assert!(
        message.starts_with("stdout through the slow sink: ") || message.starts_with("stderr through the slow sink: "),
        "{message}"
    );
    assert!(
        message.contains(" bytes for 2097152 expected; first difference at byte "),
        "{message}"
    );
    honest_passes(&[check]);
}

#[test]
fn a_relay_that_swaps_chunks_when_the_sink_is_slow_is_caught() {
    let message = failure_of(
        Fault::SwapsChunksWhenTheSinkIsSlow,
        "execute_sink_slow_reader_gets_every_byte",
    );
    // Every byte arrives, out of order.
    // In whichever stream a swap came first.
    let stream = message.split(' ').next().unwrap_or_default();
    assert!(["stdout", "stderr"].contains(&stream), "{message}");
    assert!(
        message.starts_with(&format!(
            "{stream} through the slow sink: 2097152 bytes for 2097152 expected; first difference at byte "
        )),
        "{message}"
    );
}

#[test]
fn output_thrown_away_at_a_timeout_is_caught() {
    let check = "execute_timeout_keeps_partial_output";
    let message = failure_of(Fault::EmptyOutputOnTimeout, check);
    assert!(
        message.starts_with("stdout in the result of a timed-out command: 0 bytes for "),
        "{message}"
    );
    assert!(
        message.ends_with(" expected; first difference at byte 0: got \"\", expected \"pppppppppppppppp\""),
        "{message}"
    );
    honest_passes(&[check]);
}

// Timeouts against the shapes a kill of what it can reach misses.

/// Runs `check` against `fault`, kills whatever carries the suite's markers, and returns
/// the outcome.
fn leaky_outcome(fault: Fault, check: &str) -> Result<(), String> {
    let root = tempfile::tempdir().unwrap();
    let suite = suite(fault, root.path());
    let outcome = suite.run_check(check).expect("registered");
    for pid in envrt_conformance::processes_with_marker(suite.marker_prefix()) {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    outcome
}

#[test]
fn a_timeout_that_kills_only_the_command_is_caught() {
    let check = "execute_timeout_kills_orphans_and_term_ignorers";
    let message = leaky_outcome(Fault::KillsOnlyTheCommand, check).expect_err("a command-only kill passed");
    assert!(message.starts_with("processes survived"), "{message}");
}

#[test]
fn a_timeout_that_kills_only_descendants_is_caught() {
    let check = "execute_timeout_kills_orphans_and_term_ignorers";
    for older in ["execute_timeout_kills_tree", "execute_timeout_kills_new_session"] {
        let passed = leaky_outcome(Fault::KillsOnlyDescendants, older);
        assert!(passed.is_ok(), "{older}: {passed:?}");
    }
    let message = leaky_outcome(Fault::KillsOnlyDescendants, check).expect_err("a descendants-only kill passed");
    assert!(message.starts_with("processes survived"), "{message}");
    honest_passes(&[check]);
}

#[test]
fn a_timeout_that_only_asks_politely_is_caught() {
    let check = "execute_timeout_kills_orphans_and_term_ignorers";
    for older in ["execute_timeout_kills_tree", "execute_timeout_kills_new_session"] {
        let passed = leaky_outcome(Fault::TermsWithoutKill, older);
        assert!(passed.is_ok(), "{older}: {passed:?}");
    }
    let message = leaky_outcome(Fault::TermsWithoutKill, check).expect_err("a SIGTERM-only timeout passed");
    assert!(message.starts_with("processes survived"), "{message}");
}

// The host's own output: under libtest's per-test capture, print! never reaches the
// descriptors, so the check cannot look and says so (broken_host_output.rs, with
// harness = false, shows the faults it catches).

#[test]
fn host_output_under_a_capturing_harness_is_not_checked() {
    let nocapture = std::env::args().any(|a| a == "--nocapture")
        || std::env::var_os("RUST_TEST_NOCAPTURE").is_some_and(|v| v != "0");
    let root = tempfile::tempdir().unwrap();
    let faulty = suite(Fault::PrintsEnv, root.path());
    let outcome = faulty
        .run_check_outcome("execute_secrets_not_printed")
        .expect("registered");
    if nocapture {
        assert_eq!(outcome.status, Status::Failed, "{outcome:?}");
        return;
    }
    assert_eq!(outcome.status, Status::NotChecked, "{outcome:?}");
    assert_eq!(
        outcome.message.as_deref(),
        Some(
            "what this process prints does not reach its descriptors 1 and 2 (a test harness captures it; \
             run under harness = false or with --nocapture)"
        )
    );
}

// Pause and unpause (contract section 8).

#[test]
fn a_pause_that_stops_nothing() {
    let message = failure_of(
        Fault::PauseStopsNothing,
        "pause_stops_progress_refuses_and_unpause_continues",
    );
    assert!(
        message.starts_with("a paused lease's process made progress: its CPU time went from "),
        "{message}"
    );
    honest_passes(&["pause_stops_progress_refuses_and_unpause_continues"]);
}

#[test]
fn an_unpause_that_continues_nothing() {
    let message = failure_of(
        Fault::UnpauseContinuesNothing,
        "pause_stops_progress_refuses_and_unpause_continues",
    );
    assert!(
        message.starts_with("the paused lease's process did not go on after unpause: its CPU time stayed at "),
        "{message}"
    );
    assert!(
        message.contains(": state S, cgroup \"/envrt-local/lease-"),
        "frozen, not running: {message}"
    );
}

#[test]
fn a_fork_whose_copies_start_empty_is_caught() {
    let message = failure_of(
        Fault::ForkCopiesAreEmpty,
        "fork_copies_hold_the_fork_point_and_stay_apart",
    );
    assert!(
        message.starts_with("the second copy after the source and the first copy wrote: expected"),
        "{message}"
    );
}

#[test]
fn a_resume_that_empties_the_workspace_is_caught_by_scope_reuse() {
    let message = failure_of(
        Fault::ResumeEmptiesWorkspace,
        "scope_reuse_resumes_replaces_and_serialises",
    );
    assert!(
        message.starts_with("`sh -c \"cat scope-state\"` ended with Some(1)/None: "),
        "{message}"
    );
}

#[test]
fn a_destroy_that_keeps_the_workspace_is_caught_by_the_readiness_check() {
    let message = failure_of(Fault::DestroyKeepsWorkspace, "ready_failure_leaves_nothing_behind");
    assert_eq!(message, "the half-made lease's resource is still there");
}

#[test]
fn an_acquire_that_returns_before_the_lease_runs_a_command_is_caught() {
    let message = failure_of(Fault::NotReadyAtAcquire, "acquire_is_ready_for_execute_and_spawn");
    assert!(
        message.starts_with("the first execute right after acquire 0 failed: "),
        "{message}"
    );
    let message = failure_of(Fault::SpawnNotReadyAtAcquire, "acquire_is_ready_for_execute_and_spawn");
    assert!(
        message.starts_with("the first spawn right after acquire 0 failed: spawn: "),
        "{message}"
    );
}

#[test]
fn the_honest_driver_passes_the_lease_life_checks() {
    honest_passes(&[
        "fork_copies_hold_the_fork_point_and_stay_apart",
        "scope_reuse_resumes_replaces_and_serialises",
        "ready_failure_leaves_nothing_behind",
        "acquire_is_ready_for_execute_and_spawn",
    ]);
}

// Idle timeouts (contract section 8).

#[test]
fn an_idle_timeout_armed_with_the_wrong_length() {
    let message = failure_of(Fault::IdleNeverEnds, "idle_lease_ends_and_kept_alive_one_stays");
    assert_eq!(
        message,
        "a lease untouched for its idle timeout of 1s was still held after 60s"
    );
    honest_passes(&["idle_lease_ends_and_kept_alive_one_stays"]);
}

#[test]
fn a_keep_alive_that_resets_nothing() {
    let message = failure_of(
        Fault::KeepAliveResetsNothing,
        "idle_lease_ends_and_kept_alive_one_stays",
    );
    assert!(
        message == "the driver ended a lease that was kept alive"
            || message.starts_with("a kept-alive lease was refused: Lease \""),
        "{message}"
    );
}
