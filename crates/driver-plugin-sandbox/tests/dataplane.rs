//! The `envrt.dataPlane` extension end to end: the host against the reference worker with
//! real `bwrap`. Large transfers both ways arrive intact, a slow reader slows the command
//! instead of losing the route (the JSON path still ends it at the buffered bound), a
//! writer without credit waits, half-close, stop and close work, and a worker that does
//! not take the offer keeps JSON frames (the worker's own side of the offer:
//! `worker_dataplane.rs`).

mod host_common;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use envrt_driver_plugin_sandbox::{DuplexLimits, PluginManifest, SandboxDriver, SandboxOptions};
use envrt_plugin_protocol::dataplane::EXTENSION;
use envrt_runtime_core::{DriverError, DuplexChannel, DuplexExit, EnvironmentRuntime, ExecuteRequest, Lease};
use host_common::*;

/// The reference worker with extra flags, leases under `root`.
fn manifest_with(root: &TempDir, flags: &[&str]) -> Option<PluginManifest> {
    let mut manifest = reference_manifest(root.path())?;
    manifest.worker.command.extend(flags.iter().map(|f| (*f).to_owned()));
    Some(manifest)
}

struct Setup {
    driver: Arc<SandboxDriver>,
    runtime: EnvironmentRuntime,
    lease: Lease,
    _root: TempDir,
}

async fn setup(flags: &[&str], options: SandboxOptions) -> Option<Setup> {
    let root = TempDir::new("plane");
    let manifest = manifest_with(&root, flags)?;
    let driver = start(manifest, options).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    Some(Setup {
        driver,
        runtime,
        lease,
        _root: root,
    })
}

impl Setup {
    async fn open(&self, argv: &[&str]) -> Arc<dyn DuplexChannel> {
        let argv: Vec<String> = argv.iter().map(|a| (*a).to_owned()).collect();
        let channel = bounded("open", self.runtime.open_duplex_channel(&self.lease.id, &argv))
            .await
            .unwrap();
        Arc::from(channel)
    }

    /// Runs `sh -c script` in the lease; its exit code and stdout.
    async fn sh(&self, script: &str) -> (Option<i32>, Vec<u8>) {
        let request = ExecuteRequest::new("sh", ["-c", script]);
        let result = bounded("execute", self.runtime.execute(&self.lease.id, request))
            .await
            .unwrap();
        (result.exit_code, result.stdout)
    }

    async fn shutdown(self) {
        let pid = self.driver.worker_pid().unwrap();
        bounded("shutdown", self.driver.shutdown()).await;
        assert!(wait_gone(pid, Duration::from_secs(10)).await);
    }
}

/// Pseudo-random bytes (xorshift), so nothing compresses or repeats.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// `sha256sum` of `bytes` by the host's own coreutils, as the command prints it.
fn host_sha256(bytes: &[u8]) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let data = bytes.to_vec();
    let feeder = std::thread::spawn(move || stdin.write_all(&data).unwrap());
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

async fn read_all(channel: &dyn DuplexChannel) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(chunk) = bounded("read", channel.read()).await.unwrap() {
        out.extend(chunk);
    }
    out
}

#[tokio::test]
async fn large_transfers_cross_the_data_plane_intact_both_ways() {
    let Some(s) = setup(&[], SandboxOptions::default()).await else {
        return;
    };
    assert!(
        s.driver.supported_methods().contains(EXTENSION),
        "the reference worker takes the offer"
    );

    // echo: 24 MiB in writes of varied sizes, read back concurrently
    let sent = noise(24 << 20, 7);
    let channel = s.open(&["cat"]).await;
    let writer = {
        let (channel, sent) = (channel.clone(), sent.clone());
        tokio::spawn(async move {
            let mut offset = 0;
            let mut size = 1;
            while offset < sent.len() {
                let end = (offset + size).min(sent.len());
                channel.write(&sent[offset..end]).await.unwrap();
                offset = end;
                size = size * 7 % 400_009 + 1;
            }
            channel.close_input().await.unwrap();
        })
    };
    let echoed = read_all(channel.as_ref()).await;
    bounded("writer", writer).await.unwrap();
    assert_eq!(echoed.len(), sent.len());
    assert!(echoed == sent, "the echo differs from what was written");
    assert_eq!(
        bounded("wait", channel.wait()).await.unwrap(),
        DuplexExit {
            exit_code: Some(0),
            transport_closed: false
        }
    );
    channel.close().await.unwrap();

    // host → worker only: the command's checksum of 16 MiB matches the host's
    let data = noise(16 << 20, 11);
    let channel = s.open(&["sha256sum"]).await;
    for block in data.chunks(64 * 1024) {
        channel.write(block).await.unwrap();
    }
    channel.close_input().await.unwrap();
    let printed = String::from_utf8(read_all(channel.as_ref()).await).unwrap();
    assert_eq!(printed.split_whitespace().next().unwrap(), host_sha256(&data));
    assert_eq!(bounded("wait", channel.wait()).await.unwrap().exit_code, Some(0));
    channel.close().await.unwrap();

    // worker → host only: 16 MiB of the sandbox's randomness, checked against its checksum
    let channel = s
        .open(&[
            "sh",
            "-c",
            "head -c 16777216 /dev/urandom > /workspace/r.bin && sha256sum < /workspace/r.bin > /workspace/r.sum && cat /workspace/r.bin",
        ])
        .await;
    let got = read_all(channel.as_ref()).await;
    assert_eq!(got.len(), 16 << 20);
    assert_eq!(bounded("wait", channel.wait()).await.unwrap().exit_code, Some(0));
    channel.close().await.unwrap();
    let (_, sum) = s.sh("cat /workspace/r.sum").await;
    assert_eq!(
        String::from_utf8(sum).unwrap().split_whitespace().next().unwrap(),
        host_sha256(&got)
    );
    s.shutdown().await;
}

/// 4 MiB (ten times the default 384 KiB buffered bound) through `tee`, then a marker.
const SLOW_PRODUCER: &str = "head -c 4194304 /dev/urandom | tee /workspace/slow.bin; touch /workspace/slow.done";

#[tokio::test]
async fn a_slow_reader_slows_the_command_and_loses_nothing() {
    let Some(s) = setup(&[], SandboxOptions::default()).await else {
        return;
    };
    let channel = s.open(&["sh", "-c", SLOW_PRODUCER]).await;
    // nothing is read yet: the command is held by flow control, not the route ended
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (held, _) = s.sh("test -e /workspace/slow.done").await;
    assert_eq!(held, Some(1), "the command finished although nothing was read");
    // read slowly
    let mut got = Vec::new();
    while let Some(chunk) = bounded("read", channel.read()).await.unwrap() {
        got.extend(chunk);
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    assert_eq!(
        bounded("wait", channel.wait()).await.unwrap(),
        DuplexExit {
            exit_code: Some(0),
            transport_closed: false
        },
        "the route survived"
    );
    let (_, file) = s.sh("cat /workspace/slow.bin").await;
    assert_eq!(got.len(), 4 << 20);
    assert!(got == file, "the bytes read differ from what the command wrote");
    assert_eq!(s.sh("test -e /workspace/slow.done").await.0, Some(0));
    channel.close().await.unwrap();
    s.shutdown().await;
}

#[tokio::test]
async fn many_small_writes_held_unread_neither_pass_the_frame_bound_nor_get_lost() {
    let options = SandboxOptions {
        duplex_limits: DuplexLimits {
            max_buffered_frames: 16,
            ..DuplexLimits::default()
        },
        ..SandboxOptions::default()
    };
    let Some(s) = setup(&[], options).await else {
        return;
    };
    // 200 separate writes, each read by the worker on its own, all held unread: far more
    // frames than the 16 unread frames the route may hold (the JSON path ends it there)
    let channel = s
        .open(&["sh", "-c", "for i in $(seq 1 200); do echo $i; sleep 0.005; done"])
        .await;
    assert_eq!(bounded("wait", channel.wait()).await.unwrap().exit_code, Some(0));
    let got = String::from_utf8(read_all(channel.as_ref()).await).unwrap();
    let expected: String = (1..=200).map(|i| format!("{i}\n")).collect();
    assert_eq!(got, expected);
    channel.close().await.unwrap();
    s.shutdown().await;
}

#[tokio::test]
async fn without_the_data_plane_a_slow_reader_still_loses_the_route_at_the_bound() {
    // the worker declines (--no-data-plane), or the host does not offer
    let no_offer = SandboxOptions {
        data_plane: false,
        ..SandboxOptions::default()
    };
    for (flags, options) in [
        (&["--no-data-plane"][..], SandboxOptions::default()),
        (&[][..], no_offer),
    ] {
        let Some(s) = setup(flags, options).await else {
            return;
        };
        assert!(!s.driver.supported_methods().contains(EXTENSION));
        let channel = s.open(&["sh", "-c", SLOW_PRODUCER]).await;
        assert_eq!(
            bounded("wait", channel.wait()).await.unwrap(),
            DuplexExit {
                exit_code: None,
                transport_closed: false
            }
        );
        let err = channel.write(b"x").await.unwrap_err().to_string();
        assert!(
            err.starts_with("Duplex route duplex-route-")
                && err.ends_with(" was ended by the host: unread output passed the buffered byte bound"),
            "{err}"
        );
        channel.close().await.unwrap();
        // duplex still works over JSON frames
        let channel = s.open(&["cat"]).await;
        channel.write(b"json path").await.unwrap();
        channel.close_input().await.unwrap();
        assert_eq!(read_all(channel.as_ref()).await, b"json path");
        channel.close().await.unwrap();
        s.shutdown().await;
    }
}

#[tokio::test]
async fn a_writer_without_credit_waits_and_then_times_out_or_is_released_by_close() {
    let options = SandboxOptions {
        duplex_timeout: Duration::from_secs(2),
        ..SandboxOptions::default()
    };
    let Some(s) = setup(&[], options).await else {
        return;
    };
    // the command never reads its stdin: the pipe and the window fill, then writes wait
    let channel = s.open(&["sleep", "60"]).await;
    let err = bounded("write", channel.write(&vec![0u8; 8 << 20])).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "RPC call \"duplexChannelWrite\" timed out after 2000ms"
    );
    // a write waiting for credit is released by a close with the route's ended text
    let blocked = {
        let channel = channel.clone();
        tokio::spawn(async move { channel.write(&[1u8; 4096]).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    channel.close().await.unwrap();
    let err = bounded("blocked write", blocked).await.unwrap().unwrap_err();
    assert!(
        err.to_string()
            .ends_with(" was ended by the host: the channel is closed"),
        "{err}"
    );
    // the worker dropped the channel (and killed the command)
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while s.driver.health().await.unwrap()["details"]["openChannels"] != 0 {
        assert!(tokio::time::Instant::now() < deadline, "the worker kept the channel");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.shutdown().await;
}

#[tokio::test]
async fn writes_after_the_command_exited_fail_with_the_channel_closed_text() {
    let Some(s) = setup(&[], SandboxOptions::default()).await else {
        return;
    };
    let channel = s.open(&["true"]).await;
    assert_eq!(bounded("wait", channel.wait()).await.unwrap().exit_code, Some(0));
    // writes are pipelined: the failure of one comes back on a later one
    let block = vec![7u8; 64 * 1024];
    let mut failure = None;
    for _ in 0..1000 {
        if let Err(e) = bounded("write", channel.write(&block)).await {
            failure = Some(e);
            break;
        }
    }
    let err = failure.expect("a write to a command that is gone must fail");
    assert!(matches!(err, DriverError::ChannelClosed), "{err:?}");
    assert_eq!(err.to_string(), "Duplex channel is closed.");
    channel.close().await.unwrap();
    s.shutdown().await;
}

#[tokio::test]
async fn half_close_stop_and_close_work_on_the_data_plane() {
    let Some(s) = setup(&[], SandboxOptions::default()).await else {
        return;
    };
    // half-close: every byte before the EOF arrives, then the command ends with 0
    let channel = s.open(&["sh", "-c", "wc -c; echo done"]).await;
    for _ in 0..100 {
        channel.write(&[b'x'; 1000]).await.unwrap();
    }
    channel.close_input().await.unwrap();
    // stdin is closed: a write now fails as on the JSON path
    let err = channel.write(b"late").await.unwrap_err();
    assert!(matches!(err, DriverError::ChannelClosed), "{err:?}");
    assert_eq!(read_all(channel.as_ref()).await, b"100000\ndone\n");
    assert_eq!(bounded("wait", channel.wait()).await.unwrap().exit_code, Some(0));
    channel.close().await.unwrap();
    // stop: the command is killed, the exit has no code, and close still works
    let channel = s.open(&["cat"]).await;
    channel.write(b"ping").await.unwrap();
    assert_eq!(bounded("read", channel.read()).await.unwrap().unwrap(), b"ping");
    channel.stop().await.unwrap();
    assert_eq!(
        bounded("wait", channel.wait()).await.unwrap(),
        DuplexExit {
            exit_code: None,
            transport_closed: false
        }
    );
    assert_eq!(bounded("read", channel.read()).await.unwrap(), None);
    channel.close().await.unwrap();
    channel.close().await.unwrap();
    let err = channel.write(b"x").await.unwrap_err();
    assert!(
        err.to_string()
            .ends_with(" was ended by the host: the channel is closed"),
        "{err}"
    );
    // a worker killed mid-route ends it with the transport closed, as on the JSON path
    let channel = s.open(&["cat"]).await;
    let pid = s.driver.worker_pid().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert_eq!(
        bounded("wait", channel.wait()).await.unwrap(),
        DuplexExit {
            exit_code: None,
            transport_closed: true
        }
    );
    // its reads and writes fail with the worker's exit
    let killed = "Worker process exited (code=null, signal=SIGKILL)";
    let err = bounded("read", channel.read()).await.unwrap_err();
    assert!(err.to_string().starts_with(killed), "{err}");
    let err = bounded("write", channel.write(b"late")).await.unwrap_err();
    assert!(err.to_string().starts_with(killed), "{err}");
    channel.close().await.unwrap();
    assert!(wait_gone(pid, Duration::from_secs(10)).await);
    // the restarted worker takes the data plane again
    restarted(&s.driver, pid).await;
    let channel = s.open(&["cat"]).await;
    assert!(s.driver.supported_methods().contains(EXTENSION));
    channel.write(b"again").await.unwrap();
    assert_eq!(bounded("read", channel.read()).await.unwrap().unwrap(), b"again");
    channel.close().await.unwrap();
    s.shutdown().await;
}

#[tokio::test]
async fn an_sdk_worker_ignores_the_offer_and_keeps_json_frames() {
    let root = TempDir::new("plane-sdk");
    let driver = start(sdk_manifest(root.path()), SandboxOptions::default()).await;
    assert!(!driver.supported_methods().contains(EXTENSION));
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    let channel = bounded("open", runtime.open_duplex_channel(&lease.id, &["cat".to_owned()]))
        .await
        .unwrap();
    let payload = noise(300_000, 3);
    channel.write(&payload).await.unwrap();
    let mut echoed = Vec::new();
    while echoed.len() < payload.len() {
        echoed.extend(bounded("read", channel.read()).await.unwrap().expect("cat output"));
    }
    assert!(echoed == payload);
    channel.close().await.unwrap();
    bounded("shutdown", driver.shutdown()).await;
}

#[tokio::test]
async fn no_sandboxed_command_holds_the_data_plane_socket() {
    let Some(s) = setup(&[], SandboxOptions::default()).await else {
        return;
    };
    assert!(s.driver.supported_methods().contains(EXTENSION));
    let list = "for f in /proc/self/fd/*; do readlink $f || true; done";
    let (code, out) = s.sh(list).await;
    assert_eq!(code, Some(0));
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("pipe:") && !out.contains("socket:"), "{out}");
    let channel = s.open(&["sh", "-c", list]).await;
    let out = String::from_utf8(read_all(channel.as_ref()).await).unwrap();
    assert!(out.contains("pipe:") && !out.contains("socket:"), "{out}");
    channel.close().await.unwrap();
    s.shutdown().await;
}
