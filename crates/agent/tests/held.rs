//! Held output (`hold`, a host's buffered execute): the process blocks on a full pipe
//! instead of losing bytes, a slow reader still gets every byte, the process leaves the
//! table once its final state is delivered, and it names its output pipes.

mod common;

use common::{bounded, collect, refused, sh, start};
use envrt_agent::client::Event;
use envrt_agent::proto::{Offsets, Status, Stream};

#[tokio::test]
async fn a_held_process_loses_no_byte_to_a_slow_reader_and_leaves_the_table_when_delivered() {
    bounded(60, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let mut request = sh("head -c 1000000 /dev/zero | tr '\\0' a; printf done >&2");
        request.keep = Some(4096);
        request.hold = true;
        let info = client.spawn(request).await.unwrap();
        assert_eq!(info.pipes.len(), 2, "{:?}", info.pipes);
        assert!(info.pipes.iter().all(|p| p.starts_with("pipe:[") && p.ends_with(']')));
        let mut output = client.output(info.id, Offsets::default()).await.unwrap();
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let exit = loop {
            match output.next().await.expect("an event") {
                Ok(Event::Chunk(chunk)) => {
                    // A slow reader: with a plain ring of 4096 bytes this drops nearly all.
                    tokio::task::yield_now().await;
                    match chunk.stream {
                        Stream::Stdout => stdout.extend(chunk.bytes),
                        _ => stderr.extend(chunk.bytes),
                    }
                }
                Ok(Event::Exit(info)) => break info,
                Err(error) => panic!("refused: {error}"),
            }
        };
        assert_eq!(stdout.len(), 1_000_000);
        assert!(stdout.iter().all(|b| *b == b'a'));
        assert_eq!(stderr, b"done");
        assert_eq!(exit.status, Status::Exited { code: 0 });
        let out = exit.streams.iter().find(|s| s.stream == Stream::Stdout).unwrap();
        assert_eq!(out.written, 1_000_000);
        // Delivered: gone from the table, its reservation back.
        assert_eq!(
            refused(client.info(info.id).await),
            format!("no process {} in this agent", info.id)
        );
        assert_eq!(client.agent().await.unwrap().buffer_reserved, 0);
    })
    .await;
}

#[tokio::test]
async fn a_held_process_blocks_while_nobody_reads_and_a_plain_one_does_not() {
    bounded(60, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let mut held = sh("head -c 100000 /dev/zero; echo written >&2");
        held.keep = Some(4096);
        held.hold = true;
        let mut plain = held.clone();
        plain.hold = false;
        let plain = client.spawn(plain).await.unwrap();
        assert_eq!(client.wait(plain.id, None).await.unwrap(), Status::Exited { code: 0 });
        let held = client.spawn(held).await.unwrap();
        // The plain one ran to its end; the held one cannot, with 4096 bytes held and its
        // pipe full, until a reader comes.
        let status = client.wait(held.id, Some(std::time::Duration::from_millis(300))).await;
        assert_eq!(status.unwrap(), Status::Running);
        let (bytes, exit) = collect(&client, held.id, Offsets::default()).await;
        assert_eq!(bytes[&Stream::Stdout].len(), 100_000);
        assert_eq!(bytes[&Stream::Stderr], b"written\n");
        assert_eq!(exit.unwrap().status, Status::Exited { code: 0 });
    })
    .await;
}

#[tokio::test]
async fn a_terminal_cannot_hold_its_output() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let mut request = sh("true");
        request.hold = true;
        request.tty = Some(envrt_agent::proto::TtySize { rows: 24, cols: 80 });
        assert_eq!(
            refused(client.spawn(request).await),
            "a process with a terminal cannot hold its output (hold is for pipes)"
        );
    })
    .await;
}
