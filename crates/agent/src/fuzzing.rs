//! The entry point of the `agent_frame` fuzz target in the repository's `fuzz/` directory
//! (and of the stable test that replays its corpus). Not API.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use crate::proto::{Frame, Request, Response, chunk_frame, json_frame, read_frame};

/// Runs a future that never waits (every read is from memory) to its end.
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(value) => value,
        Poll::Pending => panic!("a read from memory waited"),
    }
}

/// Reads one frame back from its own encoding.
fn reread(frame: &[u8]) -> Frame {
    let mut rest = frame;
    let back = ready(read_frame(&mut rest)).expect("an encoded frame reads back");
    assert!(rest.is_empty(), "one frame is read whole");
    back.expect("an encoded frame is not the end")
}

/// `fuzz_targets/agent_frame`: a stream of supervisor frames as both ends read it (the
/// agent its requests, the client its replies and output chunks). Every chunk re-encodes
/// to the bytes it came from; every JSON body that is a request or a response travels
/// through its own frame unchanged; a stream that stops being frames fails with a text.
pub fn agent_frame(data: &[u8]) {
    let mut rest = data;
    loop {
        let before = rest;
        match ready(read_frame(&mut rest)) {
            Ok(None) => return assert!(before.is_empty(), "a clean end only between frames"),
            Err(text) => return assert!(!text.is_empty()),
            Ok(Some(Frame::Data(chunk))) => {
                let used = before.len() - rest.len();
                let encoded = chunk_frame(chunk.id, chunk.stream, chunk.offset, &chunk.bytes);
                assert_eq!(encoded, before[..used]);
            }
            Ok(Some(Frame::Json(body))) => {
                if let Ok(request) = serde_json::from_slice::<Request>(&body) {
                    let Frame::Json(again) = reread(&json_frame(&request)) else {
                        panic!("a request came back as a chunk");
                    };
                    assert_eq!(serde_json::from_slice::<Request>(&again).ok(), Some(request));
                }
                if let Ok(response) = serde_json::from_slice::<Response>(&body) {
                    let Frame::Json(again) = reread(&json_frame(&response)) else {
                        panic!("a response came back as a chunk");
                    };
                    assert_eq!(serde_json::from_slice::<Response>(&again).ok(), Some(response));
                }
            }
        }
    }
}
