//! Entry points of the fuzz targets in the repository's `fuzz/` directory (and of the
//! stable test that replays their corpora): each takes the other side's bytes, runs them
//! through the parser that reads them, and panics when an invariant breaks. Not API.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::envelope::{ErrorObject, RequestId, error_response_line, response_line};
use crate::line::{HostMessage, Incoming, LineError, dropped_request_id};
use crate::reader::{HEAD_BYTES, LineRead, LineReader};
use crate::{dataplane, error_data};

/// Runs a future that never waits (every read is from memory) to its end.
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(value) => value,
        Poll::Pending => panic!("a read from memory waited"),
    }
}

/// `fuzz_targets/protocol_line`: the bounded line reader (against a model of what it must
/// return), then each line through both classifications, and an answer to every request
/// read back with the same id.
pub fn protocol_line(data: &[u8]) {
    let Some((&[limit, capacity, flags], stream)) = data.split_first_chunk::<3>() else {
        return;
    };
    let limit = usize::from(limit) * 4;
    let capacity = usize::from(capacity % 64) + 1;
    let keep = flags & 1 == 1;
    let mut reader = LineReader::with_capacity(capacity, stream, limit);
    if keep {
        reader = reader.keep_unterminated();
    }
    let mut segments: Vec<&[u8]> = stream.split(|&b| b == b'\n').collect();
    // `split` yields the part after the last `\n` (empty when the stream ends with one)
    let last = segments.pop().unwrap_or_default();
    if keep && !last.is_empty() {
        segments.push(last);
    }
    for segment in segments {
        let read = ready(reader.next_line()).expect("reading from memory");
        if segment.len() > limit {
            assert_eq!(read, LineRead::Oversized(segment.len()));
            assert_eq!(reader.head(), &segment[..segment.len().min(HEAD_BYTES)]);
            let _ = dropped_request_id(reader.head());
        } else {
            assert_eq!(read, LineRead::Line);
            assert_eq!(reader.line(), segment);
            classify(segment);
        }
    }
    assert_eq!(ready(reader.next_line()).expect("reading from memory"), LineRead::Eof);
    assert_eq!(ready(reader.next_line()).expect("reading from memory"), LineRead::Eof);
}

/// Both classifications of one line, and the answers to what they read as a request.
fn classify(line: &[u8]) {
    match Incoming::parse(line) {
        Ok(Incoming::Request { id, .. }) => answers_echo(&id),
        Ok(_) => {}
        Err(e) => {
            let _ = e.sdk_error();
        }
    }
    if let Ok(text) = std::str::from_utf8(line) {
        match HostMessage::classify(text) {
            HostMessage::Request { id, .. } | HostMessage::Cancel(id) => answers_echo(&id),
            HostMessage::Invalid(error) => assert_eq!(error.code, crate::codes::PARSE_ERROR),
            HostMessage::Ignored => {}
        }
    }
}

/// An answer to request `id` reads back as the response to `id` (or, for an id that is
/// no JSON-RPC id, as no message at all: the host never matches it to a call).
fn answers_echo(id: &RequestId) {
    let error = ErrorObject::new(crate::codes::WORKER_ERROR, "no");
    for line in [
        response_line(id, Value::Bool(true)),
        error_response_line(Some(id), &error),
    ] {
        let body = line.strip_suffix(b"\n").expect("a line ends with \\n");
        assert!(!body.contains(&b'\n'), "one message per line");
        match Incoming::parse(body) {
            Ok(Incoming::Response { id: Some(back), .. }) => assert_eq!(&back, id),
            Err(LineError::NotJsonRpc) => assert!(!id.is_valid(), "{id} did not come back"),
            other => panic!("the answer to {id} read back as {other:?}"),
        }
    }
}

/// Decodes `value` as `T`; when it is one, its encoding decodes to the same `T`.
fn round_trips<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: &Value) {
    if let Ok(typed) = serde_json::from_value::<T>(value.clone()) {
        let again: T = serde_json::from_value(crate::to_value(&typed))
            .unwrap_or_else(|e| panic!("{typed:?} does not decode from its own encoding: {e}"));
        assert_eq!(again, typed);
    }
}

/// `fuzz_targets/protocol_params`: a JSON value as every typed param and result of the
/// protocol (each that decodes decodes again from its own encoding), and as a worker's
/// error (its structured `data` survives the trip to a driver error and back).
pub fn protocol_params(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    use crate::{duplex, environment as env, handshake, login, setup};
    round_trips::<env::ValidateConfigParams>(&value);
    round_trips::<env::ValidationResult>(&value);
    round_trips::<env::ProbeParams>(&value);
    round_trips::<env::ProbeResult>(&value);
    round_trips::<env::AcquireLeaseParams>(&value);
    round_trips::<env::ResumeLeaseParams>(&value);
    round_trips::<env::EndLeaseParams>(&value);
    round_trips::<env::TerminationReceipt>(&value);
    round_trips::<env::RealizeWorkspaceParams>(&value);
    round_trips::<env::ExecuteParams>(&value);
    round_trips::<env::ExecuteResult>(&value);
    round_trips::<env::SyncParams>(&value);
    round_trips::<env::RunnerIngressEndpointParams>(&value);
    round_trips::<env::RunnerIngressEndpoint>(&value);
    round_trips::<env::ListLeasesParams>(&value);
    round_trips::<env::ListLeasesResult>(&value);
    round_trips::<duplex::OpenParams>(&value);
    round_trips::<duplex::OpenResult>(&value);
    round_trips::<duplex::PairParams>(&value);
    round_trips::<duplex::WriteParams>(&value);
    round_trips::<duplex::CloseParams>(&value);
    round_trips::<duplex::DataParams>(&value);
    round_trips::<duplex::ExitParams>(&value);
    round_trips::<setup::StartInteractiveSetupParams>(&value);
    round_trips::<setup::GetInteractiveSetupParams>(&value);
    round_trips::<setup::InteractiveSetupSession>(&value);
    round_trips::<setup::CaptureTemplateParams>(&value);
    round_trips::<setup::CaptureTemplateResult>(&value);
    round_trips::<setup::CancelInteractiveSetupParams>(&value);
    round_trips::<setup::CancelInteractiveSetupResult>(&value);
    round_trips::<setup::DeleteTemplateParams>(&value);
    round_trips::<setup::DeleteTemplateResult>(&value);
    round_trips::<handshake::InitializeParams>(&value);
    round_trips::<handshake::InitializeResult>(&value);
    round_trips::<handshake::HealthResult>(&value);
    round_trips::<handshake::ExecuteLogParams>(&value);
    round_trips::<handshake::LogParams>(&value);
    round_trips::<handshake::CancelParams>(&value);
    round_trips::<login::OpenParams>(&value);
    round_trips::<login::OpenResult>(&value);
    round_trips::<login::InputParams>(&value);
    round_trips::<login::OutputParams>(&value);
    round_trips::<login::ExitParams>(&value);
    round_trips::<dataplane::Offer>(&value);
    round_trips::<ErrorObject>(&value);
    if let Some(text) = value.as_str() {
        let _ = crate::decode_strict_base64(text).map(|bytes| {
            assert_eq!(crate::encode_base64(&bytes), text, "strict base64 has one spelling");
        });
    }
    let Ok(error) = serde_json::from_value::<ErrorObject>(value) else {
        return;
    };
    let Some(data) = error_data::ErrorData::from_object(&error) else {
        return;
    };
    let back: error_data::ErrorData = serde_json::from_value(crate::to_value(&data)).expect("its own encoding");
    assert_eq!(back, data);
    if let Some(driver_error) = data.clone().into_driver_error() {
        assert_eq!(error_data::ErrorData::of(&driver_error).as_ref(), Some(&data));
        let answered = error_data::refusal(&driver_error);
        assert_eq!(error_data::ErrorData::from_object(&answered), Some(data));
    }
}

/// `fuzz_targets/dataplane_frame`: a stream of data-plane frames as both sides read it;
/// every frame read re-encodes to the bytes it came from, and a stream that stops being
/// frames fails with the reason, never a frame.
pub fn dataplane_frame(data: &[u8]) {
    let mut rest = data;
    loop {
        let before = rest;
        match ready(dataplane::read_frame(&mut rest)) {
            Ok(None) => {
                assert!(before.is_empty(), "a clean end only between frames");
                return;
            }
            Ok(Some(frame)) => {
                let used = before.len() - rest.len();
                let encoded = dataplane::encode(frame.route, frame.kind, &frame.payload);
                assert_eq!(encoded, before[..used]);
                match frame.kind {
                    dataplane::Kind::Credit => {
                        if let Some(bytes) = dataplane::parse_credit(&frame.payload) {
                            assert_eq!(dataplane::credit(frame.route, bytes), encoded);
                        }
                    }
                    dataplane::Kind::Exit => {
                        if let Some((code, closed)) = dataplane::parse_exit(&frame.payload) {
                            let again = dataplane::exit(frame.route, code, closed);
                            assert_eq!(
                                dataplane::parse_exit(&again[dataplane::HEADER_BYTES..]),
                                Some((code, closed))
                            );
                        }
                    }
                    _ => {}
                }
            }
            Err(e) => {
                let kind = e.kind();
                assert!(
                    matches!(
                        kind,
                        std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
                    ),
                    "{kind:?}: {e}"
                );
                return;
            }
        }
    }
}
