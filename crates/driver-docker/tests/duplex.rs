//! Duplex channels over exec attach, against a real engine (contract section 7).

mod common;

use std::time::Duration;

use envrt_runtime_core::{DuplexChannel, DuplexExit};

fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

async fn read_all(channel: &dyn DuplexChannel) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(chunk) = channel.read().await.unwrap() {
        out.extend(chunk);
    }
    out
}

fn unique() -> u32 {
    100_000 + (uuid::Uuid::new_v4().as_u128() % 800_000) as u32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cat_echoes_chunks_in_order_and_eof_ends_it_with_zero() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let channel = h.runtime.open_duplex_channel(&lease.id, &argv(&["cat"])).await.unwrap();
        let mut sent = Vec::new();
        for (i, size) in [1usize, 7, 512, 0, 65_536, 3, 200_000].into_iter().enumerate() {
            let chunk: Vec<u8> = (0..size).map(|j| (i * 31 + j) as u8).collect();
            channel.write(&chunk).await.unwrap();
            sent.extend(chunk);
        }
        channel.close_input().await.unwrap();
        channel.close_input().await.unwrap();
        assert!(
            read_all(channel.as_ref()).await == sent,
            "bytes came back changed or out of order"
        );
        assert_eq!(
            channel.wait().await.unwrap(),
            DuplexExit {
                exit_code: Some(0),
                transport_closed: false
            }
        );
        channel.close().await.unwrap();
        channel.close().await.unwrap();
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_and_a_writer_run_at_once_without_deadlock() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let channel = h.runtime.open_duplex_channel(&lease.id, &argv(&["cat"])).await.unwrap();
        let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
        let writer = async {
            for chunk in data.chunks(100_000) {
                channel.write(chunk).await.unwrap();
            }
            channel.close_input().await.unwrap();
        };
        let (_, got) = tokio::join!(writer, read_all(channel.as_ref()));
        assert!(got == data, "bytes came back changed");
        assert_eq!(channel.wait().await.unwrap().exit_code, Some(0));
        channel.close().await.unwrap();
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_and_output_before_the_first_read() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let channel = h
            .runtime
            .open_duplex_channel(&lease.id, &argv(&["sh", "-c", "exit 7"]))
            .await
            .unwrap();
        assert_eq!(channel.wait().await.unwrap().exit_code, Some(7));
        channel.close().await.unwrap();
        let channel = h
            .runtime
            .open_duplex_channel(&lease.id, &argv(&["sh", "-c", "echo early; echo err >&2; exit 3"]))
            .await
            .unwrap();
        assert_eq!(channel.wait().await.unwrap().exit_code, Some(3));
        let out = read_all(channel.as_ref()).await;
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.contains("early\n") && text.contains("err\n") && text.len() == 10,
            "{text:?}"
        );
        channel.close().await.unwrap();
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_and_close_kill_the_command_and_close_is_final() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let n = unique();
        let script = format!("sleep {n} & trap '' TERM; sleep {n}1");
        let channel = h
            .runtime
            .open_duplex_channel(&lease.id, &argv(&["sh", "-c", &script]))
            .await
            .unwrap();
        channel.stop().await.unwrap();
        assert_eq!(channel.wait().await.unwrap().exit_code, None, "the host ended it");
        assert_eq!(
            h.processes_matching(&lease, &format!("sleep {n}")).await,
            Vec::<String>::new()
        );
        channel.close().await.unwrap();

        let channel = h
            .runtime
            .open_duplex_channel(&lease.id, &argv(&["sh", "-c", &format!("sleep {n}2")]))
            .await
            .unwrap();
        channel.close().await.unwrap();
        channel.close().await.unwrap();
        assert_eq!(
            channel.write(b"x").await.unwrap_err().to_string(),
            "Duplex channel is closed."
        );
        assert_eq!(channel.read().await.unwrap(), None);
        assert_eq!(
            channel.wait().await.unwrap(),
            DuplexExit {
                exit_code: None,
                transport_closed: false
            }
        );
        assert_eq!(
            h.processes_matching(&lease, &format!("sleep {n}2")).await,
            Vec::<String>::new()
        );

        // Dropped without close: the command is still killed.
        let channel = h
            .runtime
            .open_duplex_channel(&lease.id, &argv(&["sh", "-c", &format!("echo up; sleep {n}3")]))
            .await
            .unwrap();
        assert_eq!(channel.read().await.unwrap(), Some(b"up\n".to_vec()));
        drop(channel);
        let mut left = vec![String::new()];
        for _ in 0..100 {
            left = h.processes_matching(&lease, &format!("sleep {n}3")).await;
            if left.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(left, Vec::<String>::new());
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_commands_are_refused() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        // The facade refuses an empty argv; the driver does too when called directly.
        let err = h.runtime.open_duplex_channel(&lease.id, &[]).await.err().unwrap();
        assert_eq!(
            err.to_string(),
            "Invalid input: a duplex command needs at least a program"
        );
        let context = envrt_runtime_core::LeaseContext {
            environment: h
                .runtime
                .environment(lease.environment_id.as_deref().unwrap())
                .await
                .unwrap(),
            lease: lease.clone(),
        };
        let duplex = envrt_runtime_core::EnvironmentDriver::as_duplex(h.driver.as_ref()).unwrap();
        for bad in [vec![], vec![String::new()]] {
            let err = duplex.open_duplex_channel(&context, &bad).await.err().unwrap();
            assert_eq!(err.to_string(), "Invalid input: The duplex command is empty.");
        }
        let err = duplex
            .open_duplex_channel(&context, &argv(&["a\0b"]))
            .await
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            "Invalid input: The command or an argument contains a NUL byte."
        );
        let channel = h
            .runtime
            .open_duplex_channel(&lease.id, &argv(&["envrt-no-such-program"]))
            .await
            .unwrap();
        assert_eq!(channel.wait().await.unwrap().exit_code, Some(127));
        let out = String::from_utf8_lossy(&read_all(channel.as_ref()).await).into_owned();
        assert!(out.contains("envrt-no-such-program"), "{out}");
        channel.close().await.unwrap();
    })
    .await;
    h.finish().await;
}
