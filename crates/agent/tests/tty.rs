//! Real terminals: a controlling terminal at `/dev/pts/N`, its size, resize delivering
//! SIGWINCH and the new size, Ctrl-C interrupting the foreground job, EOF by `^D`.

mod common;

use common::{bounded, cmd, collect, read_until, sh, start};
use envrt_agent::proto::{Offsets, Status, Stream, TtySize};

#[tokio::test]
async fn a_terminal_has_a_pts_its_size_and_resize_delivers_sigwinch_and_the_new_size() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let mut request = sh("tty; stty size; trap 'stty size; exit 7' WINCH; echo ready; sleep 100 & wait");
        request.tty = Some(TtySize { rows: 24, cols: 80 });
        let info = client.spawn(request).await.unwrap();
        assert!(info.tty);
        let mut output = client.output(info.id, Offsets::default()).await.unwrap();
        let before = read_until(&mut output, "ready").await;
        let lines: Vec<&str> = before.split("\r\n").collect();
        assert!(lines[0].starts_with("/dev/pts/"), "tty printed {:?}", lines[0]);
        assert_eq!(lines[1], "24 80");
        client.resize(info.id, 30, 100).await.unwrap();
        let (bytes, exit) = collect(&client, info.id, Offsets::default()).await;
        let text = String::from_utf8_lossy(&bytes[&Stream::Tty]).into_owned();
        assert!(text.ends_with("ready\r\n30 100\r\n"), "after resize: {text:?}");
        assert_eq!(exit.unwrap().status, Status::Exited { code: 7 });
    })
    .await;
}

#[tokio::test]
async fn ctrl_c_in_the_stream_interrupts_the_foreground_job() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let mut request = cmd(&["sleep", "100"]);
        request.tty = Some(TtySize { rows: 10, cols: 40 });
        let info = client.spawn(request).await.unwrap();
        client.write_stdin(info.id, b"\x03").await.unwrap();
        assert_eq!(
            client.wait(info.id, None).await.unwrap(),
            Status::Signalled { signal: 2 }
        );
    })
    .await;
}

#[tokio::test]
async fn input_reaches_the_terminal_and_close_stdin_sends_eof() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let mut request = sh("stty -echo; echo ready; cat; echo end");
        request.tty = Some(TtySize { rows: 10, cols: 40 });
        let info = client.spawn(request).await.unwrap();
        let mut output = client.output(info.id, Offsets::default()).await.unwrap();
        read_until(&mut output, "ready\r\n").await;
        client.write_stdin(info.id, b"typed\n").await.unwrap();
        client.close_stdin(info.id).await.unwrap();
        let (bytes, exit) = collect(&client, info.id, Offsets::default()).await;
        assert_eq!(
            String::from_utf8_lossy(&bytes[&Stream::Tty]),
            "ready\r\ntyped\r\nend\r\n"
        );
        assert_eq!(exit.unwrap().status, Status::Exited { code: 0 });
    })
    .await;
}
