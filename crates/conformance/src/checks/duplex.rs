//! Duplex channels (contract section 7): either the round trip works or the exact refusal
//! comes (the refusal side is in the honesty checks). A channel carries the command's
//! stderr with its stdout, in the order the command wrote them.

use std::time::Duration;

use envrt_runtime_core::{DuplexChannel, Lease, LeasePolicy};
use proptest::prelude::*;

use super::{Check, has_duplex_granted, property};
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[
    Check::new("duplex_chunks_roundtrip", has_duplex_granted, chunks_roundtrip)
        .promise("Bytes written to a duplex channel come back from the command in order, none lost."),
    Check::new("duplex_close_input_ends_cat", has_half_close, close_input_ends_cat)
        .promise("Closing a channel's input gives the command EOF while output still reads."),
    Check::new("duplex_exit_code", has_duplex_granted, exit_code)
        .promise("A channel's wait reports the command's own exit code."),
    Check::new("duplex_late_reader_loses_nothing", has_duplex_granted, late_reader)
        .promise("Output produced before the first read is held, not lost."),
    Check::new("duplex_close_is_idempotent", has_duplex_granted, close_idempotent)
        .promise("Closing a channel twice succeeds."),
    Check::new("duplex_stderr_in_order", has_duplex_granted, stderr_in_order)
        .promise("A channel carries stdout and stderr together, in the order the command wrote them."),
];

fn has_half_close(p: &crate::Profile) -> bool {
    has_duplex_granted(p) && p.half_close
}

/// Opens a channel to `argv` on the lease; a failure becomes the check's message.
async fn open(ctx: &Ctx, lease: &Lease, argv: &[&str]) -> Result<Box<dyn DuplexChannel>, String> {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    ctx.runtime
        .open_duplex_channel(&lease.id, &argv)
        .await
        .map_err(|e| format!("open: {e}"))
}

async fn read_all(channel: &dyn DuplexChannel) -> Result<Vec<u8>, String> {
    read_up_to(channel, usize::MAX).await
}

/// Reads until `len` bytes came or the output ends, within 60 s.
pub(super) async fn read_up_to(channel: &dyn DuplexChannel, len: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while out.len() < len {
        let next = tokio::time::timeout_at(deadline, channel.read()).await.map_err(|_| {
            if len == usize::MAX {
                format!("no end of output within 60 s after {} bytes", out.len())
            } else {
                format!("only {} of {len} bytes within 60 s", out.len())
            }
        })?;
        match next.map_err(|e| format!("read: {e}"))? {
            Some(chunk) => out.extend(chunk),
            None => break,
        }
    }
    Ok(out)
}

async fn wait_exit(channel: &dyn DuplexChannel) -> Result<Option<i32>, String> {
    let exit = tokio::time::timeout(Duration::from_secs(60), channel.wait())
        .await
        .map_err(|_| "no exit within 60 s".to_string())?
        .map_err(|e| format!("wait: {e}"))?;
    Ok(exit.exit_code)
}

fn chunks_roundtrip(ctx: &Ctx) -> Result<(), String> {
    let chunks = proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..4096), 0..12);
    ctx.with_lease_blocking(LeasePolicy::Ephemeral, |lease| {
        property(ctx, chunks, |chunks| {
            ctx.block_on(async {
                let channel = open(ctx, &lease, &["cat"]).await?;
                let expected: Vec<u8> = chunks.concat();
                let half_close = ctx.profile.half_close;
                let outcome = async {
                    let reader = async {
                        if half_close {
                            read_all(channel.as_ref()).await
                        } else {
                            read_up_to(channel.as_ref(), expected.len()).await
                        }
                    };
                    let writer = async {
                        for chunk in &chunks {
                            channel.write(chunk).await.map_err(|e| format!("write: {e}"))?;
                        }
                        if half_close {
                            channel.close_input().await.map_err(|e| format!("close_input: {e}"))?;
                        }
                        Ok::<(), String>(())
                    };
                    let (got, wrote) = tokio::join!(reader, writer);
                    wrote?;
                    let got = got?;
                    ensure(got == expected, || {
                        format!("got {} bytes back for {}", got.len(), expected.len())
                    })?;
                    if half_close {
                        ensure_eq(wait_exit(channel.as_ref()).await?, Some(0), "exit code of cat")?;
                    }
                    Ok(())
                }
                .await;
                let _ = channel.close().await;
                outcome
            })
        })
    })
}

fn close_input_ends_cat(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let channel = open(ctx, &lease, &["cat"]).await?;
        let outcome = async {
            channel.close_input().await.map_err(|e| format!("close_input: {e}"))?;
            ensure_eq(
                read_all(channel.as_ref()).await?,
                Vec::new(),
                "output of cat with no input",
            )?;
            ensure_eq(wait_exit(channel.as_ref()).await?, Some(0), "exit code")
        }
        .await;
        let _ = channel.close().await;
        outcome
    })
}

fn exit_code(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let channel = open(ctx, &lease, &["sh", "-c", "exit 7"]).await?;
        let outcome = wait_exit(channel.as_ref()).await;
        let _ = channel.close().await;
        ensure_eq(outcome?, Some(7), "exit code")
    })
}

fn late_reader(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let channel = open(ctx, &lease, &["sh", "-c", "printf hello; printf ' world'"]).await?;
        // Let the command finish before anyone reads.
        let exit = wait_exit(channel.as_ref()).await;
        let got = read_all(channel.as_ref()).await;
        let _ = channel.close().await;
        ensure_eq(exit?, Some(0), "exit code")?;
        ensure_eq(
            String::from_utf8_lossy(&got?).as_ref(),
            "hello world",
            "output read late",
        )
    })
}

fn close_idempotent(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let channel = open(ctx, &lease, &["cat"]).await?;
        channel.close().await.map_err(|e| format!("close #1: {e}"))?;
        channel.close().await.map_err(|e| format!("close #2: {e}"))?;
        ensure(channel.write(b"late").await.is_err(), || {
            "write after close succeeded".into()
        })
    })
}

/// What the command writes to stderr comes out of the channel too, between its stdout
/// writes exactly where it wrote it (one stream, as a terminal shows it).
fn stderr_in_order(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let script = "echo out-1; echo err-1 >&2; echo out-2; echo err-2 >&2; echo out-3";
        let channel = open(ctx, &lease, &["sh", "-c", script]).await?;
        let expected = "out-1\nerr-1\nout-2\nerr-2\nout-3\n";
        let exit = wait_exit(channel.as_ref()).await;
        let got = read_up_to(channel.as_ref(), expected.len()).await;
        let _ = channel.close().await;
        ensure_eq(exit?, Some(0), "exit code")?;
        ensure_eq(
            String::from_utf8_lossy(&got?).as_ref(),
            expected,
            "stdout and stderr read from the channel",
        )
    })
}
