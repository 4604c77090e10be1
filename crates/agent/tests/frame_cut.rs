//! A stream that ends inside a frame's length prefix is a cut stream, not a clean end
//! (found by the `agent_frame` fuzz target: it read as `Ok(None)`, so a reader took a
//! peer that died mid-frame for one that closed between frames).

use envrt_agent::proto::{Stream, chunk_frame, read_frame};

#[tokio::test]
async fn an_end_inside_the_length_prefix_is_an_error_and_only_an_end_between_frames_is_clean() {
    for cut in 1..4 {
        let frame = chunk_frame(1, Stream::Stdout, 0, b"hi");
        let mut reader = &frame[..cut];
        assert_eq!(
            read_frame(&mut reader).await.unwrap_err(),
            "reading a frame: early eof",
            "cut after {cut} bytes"
        );
    }
    let mut stream = chunk_frame(4, Stream::Stderr, 5, b"err");
    stream.extend_from_slice(&[0, 0]);
    let mut reader = &stream[..];
    assert!(matches!(read_frame(&mut reader).await, Ok(Some(_))));
    assert_eq!(read_frame(&mut reader).await.unwrap_err(), "reading a frame: early eof");
    let mut empty: &[u8] = &[];
    assert!(matches!(read_frame(&mut empty).await, Ok(None)));
}
