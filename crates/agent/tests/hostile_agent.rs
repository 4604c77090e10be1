//! The client treats the agent as hostile: a fake agent on a socket sends frames that break
//! the protocol, and each is refused with its text, failing the calls in flight.

use std::time::Duration;

use envrt_agent::client::{Client, ClientError};
use envrt_agent::proto::{Offsets, Reply, Response, Stream, chunk_frame, json_frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

type Call<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ClientError> + 'a>>;

async fn read_request(stream: &mut UnixStream) -> serde_json::Value {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await.unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).await.unwrap();
    serde_json::from_slice(&body[1..]).unwrap()
}

/// A fake agent that greets, reads one request and answers it with `bad(request id)`.
async fn with_fake_agent(bad: fn(u64) -> Vec<u8>, call: fn(&Client) -> Call<'_>) -> ClientError {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fake.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let fake = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let hello = read_request(&mut stream).await;
        let ok = Response {
            id: hello["id"].as_u64().unwrap(),
            result: Ok(Reply::Hello { version: 1 }),
        };
        stream.write_all(&json_frame(&ok)).await.unwrap();
        let request = read_request(&mut stream).await;
        stream.write_all(&bad(request["id"].as_u64().unwrap())).await.unwrap();
        // Keep the connection open: the client must end the call on its own.
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let client = Client::connect(&path).await.unwrap();
    let error = tokio::time::timeout(Duration::from_secs(20), call(&client))
        .await
        .expect("the call ended");
    fake.abort();
    error
}

fn list(client: &Client) -> Call<'_> {
    Box::pin(async move { client.list().await.unwrap_err() })
}

fn output(client: &Client) -> Call<'_> {
    Box::pin(async move {
        let mut output = client.output(1, Offsets::default()).await.unwrap();
        loop {
            match output.next().await {
                Some(Ok(_)) => continue,
                Some(Err(error)) => return error,
                None => panic!("the stream ended with no error"),
            }
        }
    })
}

fn broken(text: &str) -> ClientError {
    ClientError::Broken(text.to_owned())
}

#[tokio::test]
async fn a_response_to_no_request_in_flight_breaks_the_connection() {
    let bad = |id: u64| {
        json_frame(&Response {
            id: id + 100,
            result: Ok(Reply::Done),
        })
    };
    let error = with_fake_agent(bad, list).await;
    assert!(
        matches!(&error, ClientError::Broken(text) if text.ends_with("which is not in flight")),
        "{error}"
    );
}

#[tokio::test]
async fn a_chunk_for_a_request_that_is_no_output_stream_breaks_the_connection() {
    let error = with_fake_agent(|id| chunk_frame(id, Stream::Stdout, 0, b"x"), list).await;
    assert_eq!(error, broken("a chunk for request 2, which is no output stream"));
}

#[tokio::test]
async fn a_chunk_that_skips_offsets_breaks_the_connection() {
    let bad = |id: u64| {
        let mut frames = chunk_frame(id, Stream::Stdout, 10, b"abc");
        frames.extend(chunk_frame(id, Stream::Stdout, 20, b"def"));
        frames
    };
    let error = with_fake_agent(bad, output).await;
    assert_eq!(error, broken("a stdout chunk at offset 20 where 13 was next"));
}

#[tokio::test]
async fn an_oversized_frame_from_the_agent_breaks_the_connection() {
    let error = with_fake_agent(|_| u32::MAX.to_be_bytes().to_vec(), list).await;
    assert_eq!(
        error,
        broken("frame of 4294967295 bytes is outside the bound of 1 to 1048576 bytes")
    );
    assert_eq!(
        error.to_string(),
        "the agent connection is broken: frame of 4294967295 bytes is outside the bound of 1 to 1048576 bytes"
    );
}

#[tokio::test]
async fn a_reply_of_the_wrong_kind_is_refused() {
    let bad = |id: u64| {
        json_frame(&Response {
            id,
            result: Ok(Reply::Done),
        })
    };
    let error = with_fake_agent(bad, list).await;
    assert_eq!(error, broken("unexpected reply Done"));
}
