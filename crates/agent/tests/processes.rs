//! The process table through the real binary and its socket: survival of the client, replay,
//! dropped bytes, signals to the group, stdin, exit status, concurrent readers, idempotency.

mod common;

use common::{bounded, cmd, collect, read_until, refused, sh, start};
use envrt_agent::proto::{Offsets, Status, StdinMode, Stream};

#[tokio::test]
async fn a_process_survives_its_client_and_another_client_reads_it_from_offset_0() {
    bounded(30, async {
        let agent = start(&[]).await;
        let first = agent.client().await;
        let mut request = sh("echo started; cat; echo end");
        request.stdin = StdinMode::Piped;
        let info = first.spawn(request).await.unwrap();
        let mut output = first.output(info.id, Offsets::default()).await.unwrap();
        read_until(&mut output, "started\n").await;
        drop(output);
        drop(first);
        let second = agent.client().await;
        second.write_stdin(info.id, b"more\n").await.unwrap();
        second.close_stdin(info.id).await.unwrap();
        let (bytes, exit) = collect(
            &second,
            info.id,
            Offsets {
                stdout: Some(0),
                ..Offsets::default()
            },
        )
        .await;
        assert_eq!(bytes[&Stream::Stdout], b"started\nmore\nend\n");
        assert_eq!(exit.unwrap().status, Status::Exited { code: 0 });
    })
    .await;
}

#[tokio::test]
async fn output_replays_from_0_and_from_a_middle_offset() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let info = client.spawn(sh("printf 0123456789; printf abc >&2")).await.unwrap();
        assert_eq!(client.wait(info.id, None).await.unwrap(), Status::Exited { code: 0 });
        let (bytes, _) = collect(&client, info.id, Offsets::default()).await;
        assert_eq!(bytes[&Stream::Stdout], b"0123456789");
        assert_eq!(bytes[&Stream::Stderr], b"abc");
        let mut output = client
            .output(
                info.id,
                Offsets {
                    stdout: Some(4),
                    stderr: Some(3),
                    tty: None,
                },
            )
            .await
            .unwrap();
        match output.next().await {
            Some(Ok(envrt_agent::client::Event::Chunk(chunk))) => {
                assert_eq!(
                    (chunk.stream, chunk.offset, chunk.bytes.as_slice()),
                    (Stream::Stdout, 4, &b"456789"[..])
                );
            }
            other => panic!("expected the stdout chunk at 4, got {other:?}"),
        }
        assert!(matches!(
            output.next().await,
            Some(Ok(envrt_agent::client::Event::Exit(_)))
        ));
    })
    .await;
}

#[tokio::test]
async fn a_full_buffer_drops_the_oldest_bytes_counts_them_and_refuses_their_offsets() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let mut request = sh("i=0; while [ $i -lt 10 ]; do printf 0123456789; i=$((i+1)); done");
        request.keep = Some(16);
        let info = client.spawn(request).await.unwrap();
        client.wait(info.id, None).await.unwrap();
        let stdout = client.info(info.id).await.unwrap().streams[0].clone();
        assert_eq!((stdout.stream, stdout.written, stdout.dropped, stdout.keep), (Stream::Stdout, 100, 84, 16));
        let from = |offset| Offsets { stdout: Some(offset), ..Offsets::default() };
        let (_, exit) = collect(&client, info.id, from(0)).await;
        assert_eq!(
            refused(exit),
            format!(
                "offset 0 of process {}'s stdout is no longer held: the first offset still held is 84 (84 bytes dropped)",
                info.id
            )
        );
        let (_, exit) = collect(&client, info.id, from(101)).await;
        assert_eq!(
            refused(exit),
            format!("offset 101 of process {}'s stdout is past its end: 100 bytes written so far", info.id)
        );
        let (bytes, exit) = collect(&client, info.id, from(84)).await;
        assert_eq!(bytes[&Stream::Stdout], b"4567890123456789");
        exit.unwrap();
        let (bytes, exit) = collect(&client, info.id, from(100)).await;
        assert!(!bytes.contains_key(&Stream::Stdout));
        exit.unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_signal_by_name_reaches_the_whole_group_and_is_reported() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let info = client.spawn(sh("sleep 100 & echo $!; sleep 100")).await.unwrap();
        let mut output = client.output(info.id, Offsets::default()).await.unwrap();
        let background: i32 = read_until(&mut output, "\n").await.trim().parse().unwrap();
        let background_fd = common::pidfd(background);
        let signalled = client.signal(info.id, "SIGTERM").await.unwrap();
        assert_eq!(signalled.pid, info.pid);
        assert_eq!(
            client.wait(info.id, None).await.unwrap(),
            Status::Signalled { signal: 15 }
        );
        assert!(
            common::all_end(vec![background_fd]).await,
            "the background sleep {background} survived"
        );
        assert_eq!(
            client.info(info.id).await.unwrap().status,
            Status::Signalled { signal: 15 }
        );
    })
    .await;
}

#[tokio::test]
async fn signals_are_taken_by_number_and_in_any_case() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        for (signal, number) in [("9", 9), ("int", 2), ("HUP", 1)] {
            let info = client.spawn(cmd(&["sleep", "100"])).await.unwrap();
            client.signal(info.id, signal).await.unwrap();
            assert_eq!(
                client.wait(info.id, None).await.unwrap(),
                Status::Signalled { signal: number }
            );
        }
    })
    .await;
}

#[tokio::test]
async fn stdin_round_trips_and_close_gives_eof() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let mut request = cmd(&["cat"]);
        request.stdin = StdinMode::Piped;
        let info = client.spawn(request).await.unwrap();
        client.write_stdin(info.id, b"hello\n").await.unwrap();
        client.write_stdin(info.id, &[0, 255, b'x']).await.unwrap();
        // More than one frame holds: the client splits it (and cat never blocks on its
        // output, which the agent drains whether anyone reads or not).
        let big: Vec<u8> = (0..3 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
        client.write_stdin(info.id, &big).await.unwrap();
        client.close_stdin(info.id).await.unwrap();
        let (bytes, exit) = collect(&client, info.id, Offsets::default()).await;
        let mut expected = b"hello\n\0\xffx".to_vec();
        expected.extend_from_slice(&big);
        assert_eq!(bytes[&Stream::Stdout], expected);
        assert_eq!(exit.unwrap().status, Status::Exited { code: 0 });
    })
    .await;
}

#[tokio::test]
async fn the_exit_status_is_kept_after_the_exit_for_later_clients() {
    bounded(30, async {
        let agent = start(&[]).await;
        let info = agent.client().await.spawn(sh("exit 3")).await.unwrap();
        let client = agent.client().await;
        assert_eq!(client.wait(info.id, None).await.unwrap(), Status::Exited { code: 3 });
        let later = agent.client().await;
        assert_eq!(later.info(info.id).await.unwrap().status, Status::Exited { code: 3 });
        let listed = later.list().await.unwrap();
        assert_eq!(
            listed.iter().map(|p| (p.id, p.status)).collect::<Vec<_>>(),
            vec![(info.id, Status::Exited { code: 3 })]
        );
        assert!(info.start_time > 0, "the start time is read from /proc");
    })
    .await;
}

#[tokio::test]
async fn a_timeout_kills_the_group() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let mut request = sh("sleep 100 & sleep 100");
        request.timeout_ms = Some(50);
        let info = client.spawn(request).await.unwrap();
        assert_eq!(
            client.wait(info.id, None).await.unwrap(),
            Status::Signalled { signal: 9 }
        );
    })
    .await;
}

#[tokio::test]
async fn a_wait_with_a_timeout_answers_running() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let info = client.spawn(cmd(&["sleep", "100"])).await.unwrap();
        let status = client
            .wait(info.id, Some(std::time::Duration::from_millis(20)))
            .await
            .unwrap();
        assert_eq!(status, Status::Running);
    })
    .await;
}

#[tokio::test]
async fn concurrent_readers_see_identical_bytes() {
    bounded(60, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let info = client
            .spawn(sh("i=0; while [ $i -lt 3000 ]; do echo line $i; i=$((i+1)); done"))
            .await
            .unwrap();
        let other = agent.client().await;
        let (a, b, c) = tokio::join!(
            collect(&client, info.id, Offsets::default()),
            collect(&client, info.id, Offsets::default()),
            collect(&other, info.id, Offsets::default()),
        );
        let expected: String = (0..3000).map(|i| format!("line {i}\n")).collect();
        assert_eq!(String::from_utf8_lossy(&a.0[&Stream::Stdout]), expected);
        assert_eq!(a.0, b.0);
        assert_eq!(a.0, c.0);
    })
    .await;
}

#[tokio::test]
async fn the_same_idempotency_key_returns_the_same_process_and_a_different_request_is_refused() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let mut request = cmd(&["sleep", "100"]);
        request.idempotency_key = Some("build-1".to_owned());
        let first = client.spawn(request.clone()).await.unwrap();
        let again = agent.client().await.spawn(request.clone()).await.unwrap();
        assert_eq!(
            (again.id, again.pid, again.start_time),
            (first.id, first.pid, first.start_time)
        );
        assert_eq!(client.list().await.unwrap().len(), 1);
        request.argv[1] = "200".to_owned();
        assert_eq!(
            refused(client.spawn(request).await),
            format!(
                "idempotency key \"build-1\" was already used for process {} with a different request",
                first.id
            )
        );
    })
    .await;
}

#[tokio::test]
async fn a_reader_that_stops_reading_never_blocks_the_process_and_is_refused_when_overtaken() {
    bounded(60, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        // 16 MiB: far more than the channels and the socket buffer can hold for a stalled reader.
        let mut request = sh("head -c 16777216 /dev/zero");
        request.keep = Some(1024);
        let info = client.spawn(request).await.unwrap();
        // A reader that reads nothing until the process is done.
        let mut stalled = client.output(info.id, Offsets::default()).await.unwrap();
        assert_eq!(client.wait(info.id, None).await.unwrap(), Status::Exited { code: 0 });
        let written = 16 * 1024 * 1024;
        let first = written - 1024;
        let last = loop {
            match stalled.next().await {
                Some(Ok(envrt_agent::client::Event::Chunk(_))) => continue,
                other => break other,
            }
        };
        let text = match last {
            Some(Err(envrt_agent::client::ClientError::Refused(text))) => text,
            other => panic!("expected the overtaken reader to be refused, got {other:?}"),
        };
        // Overtaken while it was stalled: the text names where it was and what was held then.
        let words: Vec<&str> = text.split(' ').collect();
        let at: u64 = words[1].parse().unwrap();
        let held: u64 = words[words.len() - 4].parse().unwrap();
        assert_eq!(
            text,
            format!(
                "offset {at} of process {}'s stdout is no longer held: the first offset still held is {held} ({held} bytes dropped)",
                info.id
            )
        );
        assert!(at < held && held <= first, "{text}");
    })
    .await;
}

#[tokio::test]
async fn concurrent_stdin_writes_each_arrive_whole() {
    bounded(60, async {
        let agent = start(&[]).await;
        let (one, two) = (agent.client().await, agent.client().await);
        let mut request = cmd(&["cat"]);
        request.stdin = StdinMode::Piped;
        let info = one.spawn(request).await.unwrap();
        let (a, b) = (vec![b'a'; 300 * 1024], vec![b'b'; 300 * 1024]);
        let (first, second) = tokio::join!(one.write_stdin(info.id, &a), two.write_stdin(info.id, &b));
        first.unwrap();
        second.unwrap();
        one.close_stdin(info.id).await.unwrap();
        let (bytes, _) = collect(&one, info.id, Offsets::default()).await;
        let out = &bytes[&Stream::Stdout];
        let runs = 1 + out.windows(2).filter(|pair| pair[0] != pair[1]).count();
        assert_eq!((out.len(), runs), (600 * 1024, 2), "the two writes interleaved");
    })
    .await;
}

#[tokio::test]
async fn an_agent_started_with_a_first_id_numbers_its_processes_from_it() {
    let agent = common::start(&["--first-id", "4097"]).await;
    let client = agent.client().await;
    let first = client.spawn(common::sh("true")).await.unwrap();
    let second = client.spawn(common::sh("true")).await.unwrap();
    assert_eq!((first.id, second.id), (4097, 4098));
    assert_eq!(client.info(4097).await.unwrap().id, 4097);
    agent.stop().await;
}
