//! The process model's pinned texts: ids, statuses and every refusal.

use super::*;

fn info(tty: bool, streams: &[(ProcessStream, u64, u64)]) -> ProcessInfo {
    ProcessInfo {
        id: ProcessId::new("lease-1", 3),
        pid: 42,
        started_at: Timestamp(0),
        argv: vec!["cat".into()],
        tty,
        status: ProcessStatus::Running,
        streams: streams
            .iter()
            .map(|(stream, written, dropped)| StreamInfo {
                stream: *stream,
                written: *written,
                dropped: *dropped,
                keep: 16,
            })
            .collect(),
    }
}

#[test]
fn a_process_id_is_the_lease_and_the_number() {
    let id: ProcessId = "a/b-c/17".parse().unwrap();
    assert_eq!(id, ProcessId::new("a/b-c", 17));
    assert_eq!(id.to_string(), "a/b-c/17");
    assert_eq!(serde_json::to_value(&id).unwrap(), serde_json::json!("a/b-c/17"));
    for bad in [
        "",
        "17",
        "/17",
        "lease/",
        "lease/x",
        "lease/-1",
        "lease/+1",
        "lease/99999999999999999999",
    ] {
        assert_eq!(
            bad.parse::<ProcessId>().unwrap_err().to_string(),
            format!("Process \"{bad}\" was not found.")
        );
    }
}

#[test]
fn statuses_read_like_a_shell() {
    assert_eq!(ProcessStatus::Running.to_string(), "running");
    assert_eq!(ProcessStatus::Exited { code: 3 }.to_string(), "exited(3)");
    assert_eq!(ProcessStatus::Signalled { signal: 9 }.to_string(), "signalled(9)");
    assert_eq!(ProcessStatus::Lost.to_string(), "lost");
    assert_eq!(ProcessStatus::Signalled { signal: 15 }.exit_code(), Some(143));
    assert_eq!(ProcessStatus::Exited { code: 3 }.exit_code(), Some(3));
    assert_eq!(ProcessStatus::Running.exit_code(), None);
}

#[test]
fn every_refusal_has_its_exact_text() {
    let id = "lease-1/3".to_owned();
    let cases: Vec<(ProcessError, &str, &str)> = vec![
        (
            ProcessError::Exited {
                id: id.clone(),
                verb: "signal it",
            },
            "Process \"lease-1/3\" has exited: cannot signal it.",
            "process_exited",
        ),
        (
            ProcessError::NoTty { id: id.clone() },
            "Process \"lease-1/3\" has no terminal to resize.",
            "process_no_tty",
        ),
        (
            ProcessError::NotPiped { id: id.clone() },
            "Process \"lease-1/3\" was not started with piped stdin.",
            "process_stdin_not_piped",
        ),
        (
            ProcessError::UnknownSignal { signal: "FOO".into() },
            "Unknown signal \"FOO\".",
            "process_unknown_signal",
        ),
        (
            ProcessError::IdempotencyConflict {
                key: "k".into(),
                id: id.clone(),
            },
            "Idempotency key \"k\" was already used for process \"lease-1/3\" with a different request.",
            "process_idempotency_conflict",
        ),
        (
            ProcessError::Spawn {
                reason: "argv is empty".into(),
            },
            "Cannot spawn the process: argv is empty",
            "process_spawn_refused",
        ),
    ];
    for (error, text, kind) in cases {
        assert_eq!(error.to_string(), text);
        assert_eq!(error.kind(), kind);
        assert_eq!(crate::RuntimeError::from(error).kind(), kind);
    }
}

#[test]
fn offsets_are_checked_against_what_is_held() {
    let pipes = info(
        false,
        &[(ProcessStream::Stdout, 100, 40), (ProcessStream::Stderr, 5, 0)],
    );
    assert_eq!(ProcessError::check_offsets(&pipes, &Offsets::default()), Ok(()));
    assert_eq!(
        ProcessError::check_offsets(&pipes, &Offsets::default().with(ProcessStream::Stdout, 40)),
        Ok(())
    );
    assert_eq!(
        ProcessError::check_offsets(&pipes, &Offsets::default().with(ProcessStream::Stdout, 100)),
        Ok(())
    );
    assert_eq!(
        ProcessError::check_offsets(&pipes, &Offsets::zero())
            .unwrap_err()
            .to_string(),
        "Offset 0 of process \"lease-1/3\"'s stdout is no longer held: the first offset still held is 40 (40 bytes dropped)."
    );
    assert_eq!(
        ProcessError::check_offsets(&pipes, &Offsets::default().with(ProcessStream::Stderr, 6))
            .unwrap_err()
            .to_string(),
        "Offset 6 of process \"lease-1/3\"'s stderr is past its end: 5 bytes written so far."
    );
    assert_eq!(
        ProcessError::check_offsets(&pipes, &Offsets::default().with(ProcessStream::Tty, 1))
            .unwrap_err()
            .to_string(),
        "Process \"lease-1/3\" has no tty stream."
    );
    let tty = info(true, &[(ProcessStream::Tty, 10, 0)]);
    assert_eq!(ProcessError::check_offsets(&tty, &Offsets::zero()), Ok(()));
}
