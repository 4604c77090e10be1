//! Worker refusals cross the wire structured: every refusal variant goes from the
//! worker's answer (`error_data::refusal`, what the reference worker sends) through a JSON
//! line to the host's typed error with the same variant and text; the structured part,
//! not the text, decides; and a worker that sends only text (an SDK worker) is still read
//! back from the text.

use envrt_driver_plugin_sandbox::SandboxError;
use envrt_driver_plugin_sandbox::protocol::error_data::{self, ErrorData};
use envrt_driver_plugin_sandbox::protocol::{ErrorObject, Incoming, RequestId, error_response_line};
use envrt_runtime_core::DriverError;
use serde_json::{Value, json};

/// Every variant a worker answers with a structured refusal.
fn refusals() -> Vec<DriverError> {
    vec![
        DriverError::PathOutsideWorkspace { path: "/etc/x".into() },
        DriverError::UserRefused {
            user: "nobody".into(),
            reason: "the sandbox runs every command as the worker's user.".into(),
        },
        DriverError::EntryEscapesTarget {
            entry: "a/l".into(),
            target: "/workspace/t".into(),
        },
        DriverError::PostUploadCwd { cwd: "/tmp".into() },
        DriverError::PostUploadFailed {
            command: "make \"x\"".into(),
            outcome: "exit code 2".into(),
        },
        DriverError::SourceMissing { path: "/nope".into() },
        DriverError::SourceKind {
            path: "/f".into(),
            expected: "directory",
        },
        DriverError::SourceKind {
            path: "/d".into(),
            expected: "file",
        },
        envrt_runtime_core::tree::too_deep("/deep \"tree\""),
        DriverError::SyncTooLarge {
            path: "/big".into(),
            limit: 1024,
        },
        DriverError::InvalidGlob { pattern: "[".into() },
        DriverError::invalid("command must not be empty"),
        DriverError::ResourceGone { id: "sbx-1".into() },
        DriverError::ChannelClosed,
    ]
}

/// The worker's answer to request 7 as the host reads it off the wire.
fn over_the_wire(error: &ErrorObject) -> ErrorObject {
    let line = error_response_line(Some(&RequestId::Number(7)), error);
    match Incoming::parse(line.strip_suffix(b"\n").unwrap()).unwrap() {
        Incoming::Response {
            outcome: Err(error), ..
        } => error,
        other => panic!("not an error response: {other:?}"),
    }
}

/// What the host's driver returns for that answer.
fn host_error(error: ErrorObject) -> DriverError {
    SandboxError::Rpc {
        method: "m".into(),
        code: error.code,
        data: ErrorData::from_object(&error),
        message: error.message,
    }
    .into()
}

#[test]
fn every_refusal_round_trips_with_its_variant_and_text() {
    for error in refusals() {
        let sent = error_data::refusal(&error);
        assert_eq!(sent.message, error.to_string());
        let wire = over_the_wire(&sent);
        assert_eq!(wire, sent);
        assert_eq!(wire.data.as_ref().unwrap()["kind"], json!(error.kind()), "{error}");
        let back = host_error(wire);
        assert_eq!(format!("{back:?}"), format!("{error:?}"));
        assert_eq!(back.to_string(), error.to_string());
        assert_eq!(back.kind(), error.kind());
    }
}

#[test]
fn the_structured_part_decides_not_the_text() {
    for error in refusals() {
        let mut sent = error_data::refusal(&error);
        sent.message = "a worker's own words".into();
        let back = host_error(over_the_wire(&sent));
        assert_eq!(format!("{back:?}"), format!("{error:?}"));
    }
}

#[test]
fn a_worker_that_sends_text_only_is_read_from_the_text() {
    for error in refusals() {
        let mut sent = error_data::refusal(&error);
        sent.data = None;
        let back = host_error(over_the_wire(&sent));
        assert_eq!(format!("{back:?}"), format!("{error:?}"));
    }
    // data that is not a known kind is ignored the same way
    let mut sent = error_data::refusal(&DriverError::SourceMissing { path: "/nope".into() });
    sent.data = Some(json!({"kind": "something_new", "fields": {"path": "/elsewhere"}}));
    let back = host_error(over_the_wire(&sent));
    assert!(
        matches!(&back, DriverError::SourceMissing { path } if path == "/nope"),
        "{back:?}"
    );
    sent.data = Some(json!({"kind": "source_kind", "fields": {"path": "/x", "expected": "socket"}}));
    let back = host_error(over_the_wire(&sent));
    assert!(
        matches!(&back, DriverError::SourceMissing { path } if path == "/nope"),
        "{back:?}"
    );
}

#[test]
fn the_wire_shape_is_pinned() {
    let sent = error_data::refusal(&DriverError::PathOutsideWorkspace { path: "/etc".into() });
    let line = error_response_line(Some(&RequestId::Number(7)), &sent);
    let value: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(
        value,
        json!({"jsonrpc": "2.0", "id": 7, "error": {
            "code": -32602,
            "message": "Path \"/etc\" is outside the lease workspace.",
            "data": {"kind": "path_outside_workspace", "fields": {"path": "/etc"}},
        }})
    );
    let closed = error_data::refusal(&DriverError::ChannelClosed);
    assert_eq!(
        serde_json::to_value(&closed).unwrap(),
        json!({"code": -32002, "message": "Duplex channel is closed.", "data": {"kind": "channel_closed"}})
    );
}

#[test]
fn failures_that_are_not_refusals_cross_as_text_alone() {
    let failures = [
        DriverError::io("Starting bwrap", std::io::Error::from_raw_os_error(2)),
        DriverError::other("disk on fire"),
        DriverError::Unavailable {
            message: "gone".into(),
            source: None,
        },
    ];
    for error in failures {
        let sent = error_data::refusal(&error);
        assert_eq!(sent.code, -32002);
        assert_eq!(sent.data, None, "{error}");
        let back = host_error(over_the_wire(&sent));
        assert_eq!(back.kind(), "other");
        assert_eq!(back.to_string(), error.to_string());
    }
}
