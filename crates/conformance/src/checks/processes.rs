//! Persistent process sessions (contract section 9), registered where the driver has the
//! group and the lease grants `persistentProcessSessions`: processes outlive the runtime
//! that spawned them, replay from absolute offsets, count what they drop, take signals to
//! their whole group, stdin and terminals, keep their exit status, honour idempotency
//! keys and timeouts, and die with their lease. The refusal texts are in
//! `processes_refusals`.

use std::time::Duration;

use envrt_runtime_core::{
    EnvironmentRuntime, Lease, LeasePolicy, LeaseStatus, Offsets, OutputEvent, ProcessInfo, ProcessStatus,
    ProcessStream, SpawnRequest, StdinMode, TtySize,
};

use super::Check;
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[
    Check::new("processes_survive_their_caller", granted, survive_caller)
        .promise("A process spawned through one runtime is found by id and read from offset 0 through another on the same store after the first is dropped."),
    Check::new("processes_replay_from_zero", granted, replay_from_zero)
        .promise("Output read from offset 0 is every byte of each stream, in order, at contiguous offsets, then the exit."),
    Check::new("processes_replay_from_a_middle_offset", granted, replay_from_middle)
        .promise("Output read from offset N starts at byte N of that stream."),
    Check::new("processes_count_dropped_bytes_at_the_bound", granted, dropped_at_bound)
        .promise("A stream past its keep bound holds its newest keep bytes and counts the rest as dropped."),
    Check::new("processes_signal_reaches_the_group", granted, signal_group)
        .promise("A signal by name reaches the process's whole group and its status reports it."),
    Check::new("processes_stdin_round_trip_with_eof", granted, stdin_round_trip)
        .promise("Bytes written to a piped stdin reach the process whole and in order, and closing it gives EOF."),
    Check::new("processes_tty_size_and_resize", granted, tty_resize)
        .promise("A process with a terminal sees its size, and resize changes it."),
    Check::new("processes_keep_exit_status", granted, exit_status_kept)
        .promise("After its exit a process keeps its exit code in process, processes and wait."),
    Check::new("processes_end_with_release", granted, end_with_release)
        .promise("Releasing the lease kills its processes, setsid grandchildren included."),
    Check::new("processes_end_with_destroy", granted_and_destroy, end_with_destroy)
        .promise("Destroying the lease kills its processes, setsid grandchildren included."),
    Check::new("processes_idempotent_spawn", granted, idempotent_spawn)
        .promise("The same idempotency key with the same request returns the same process; with another request it is refused."),
    Check::new("processes_concurrent_readers_see_the_same_bytes", granted, concurrent_readers)
        .promise("Two readers at once see identical bytes at identical offsets."),
    Check::new("processes_timeout_kills_the_group", granted, timeout_kills)
        .promise("A spawn timeout kills the process's whole group and the status says it was signalled."),
    Check::new("processes_are_listed", granted, listed)
        .promise("processes lists every process of the lease with its status, running ones as running."),
];

pub(super) fn granted(p: &crate::Profile) -> bool {
    p.has_processes && p.ephemeral.persistent_process_sessions
}

fn granted_and_destroy(p: &crate::Profile) -> bool {
    granted(p) && p.has_destroy
}

const LIMIT: Duration = Duration::from_secs(60);

pub(super) fn sh(script: &str) -> SpawnRequest {
    SpawnRequest::new(["sh", "-c", script])
}

pub(super) async fn spawn(rt: &EnvironmentRuntime, lease: &Lease, request: SpawnRequest) -> Result<String, String> {
    let info = rt.spawn(&lease.id, request).await.map_err(|e| format!("spawn: {e}"))?;
    ensure_eq(info.id.lease_id.as_str(), lease.id.as_str(), "the process id's lease")?;
    Ok(info.id.to_string())
}

/// Every chunk from `from` until the exit: (stream, offset, bytes), and the final state.
pub(super) async fn drain(
    rt: &EnvironmentRuntime,
    id: &str,
    from: &Offsets,
) -> Result<(Vec<(ProcessStream, u64, Vec<u8>)>, ProcessInfo), String> {
    let mut output = rt.output(id, from).await.map_err(|e| format!("output: {e}"))?;
    let mut chunks = Vec::new();
    loop {
        let next = tokio::time::timeout(LIMIT, output.next())
            .await
            .map_err(|_| "no exit within 60 s".to_owned())?
            .map_err(|e| format!("output: {e}"))?;
        match next {
            Some(OutputEvent::Chunk(c)) => chunks.push((c.stream, c.offset, c.bytes)),
            Some(OutputEvent::Exit(info)) => return Ok((chunks, info)),
            None => return Err("the output ended without the exit".into()),
        }
    }
}

/// The bytes of `stream`, checking that its chunks' offsets are contiguous from `start`.
pub(super) fn joined(
    chunks: &[(ProcessStream, u64, Vec<u8>)],
    stream: ProcessStream,
    start: u64,
) -> Result<Vec<u8>, String> {
    let mut at = start;
    let mut out = Vec::new();
    for (s, offset, bytes) in chunks.iter().filter(|c| c.0 == stream) {
        ensure_eq(*offset, at, &format!("the offset of the next {s} chunk"))?;
        at += bytes.len() as u64;
        out.extend_from_slice(bytes);
    }
    Ok(out)
}

async fn wait(rt: &EnvironmentRuntime, id: &str) -> Result<ProcessStatus, String> {
    tokio::time::timeout(LIMIT, rt.wait_process(id, None))
        .await
        .map_err(|_| "no exit within 60 s".to_owned())?
        .map_err(|e| format!("wait: {e}"))
}

/// The first chunk of `id`'s output, from 0 (a process says it is ready).
async fn first_chunk(rt: &EnvironmentRuntime, id: &str) -> Result<Vec<u8>, String> {
    let mut output = rt
        .output(id, &Offsets::zero())
        .await
        .map_err(|e| format!("output: {e}"))?;
    match tokio::time::timeout(LIMIT, output.next()).await {
        Ok(Ok(Some(OutputEvent::Chunk(c)))) => Ok(c.bytes),
        other => Err(format!("expected the first chunk, got {other:?}")),
    }
}

fn survive_caller(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let first = EnvironmentRuntime::with_store(ctx.runtime.store().clone());
        first.register_driver(ctx.recorder.clone());
        let id = spawn(&first, &lease, sh("echo survived; exec sleep 300")).await?;
        drop(first);
        let second = EnvironmentRuntime::with_store(ctx.runtime.store().clone());
        second.register_driver(ctx.recorder.clone());
        let info = second
            .process(&id)
            .await
            .map_err(|e| format!("process from a second runtime: {e}"))?;
        ensure_eq(info.status, ProcessStatus::Running, "its status")?;
        ensure_eq(
            first_chunk(&second, &id).await?,
            b"survived\n".to_vec(),
            "its output from 0",
        )?;
        second.signal(&id, "KILL").await.map_err(|e| format!("signal: {e}"))?;
        Ok(())
    })
}

fn replay_from_zero(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let id = spawn(
            &ctx.runtime,
            &lease,
            sh("for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done"),
        )
        .await?;
        let (chunks, exit) = drain(&ctx.runtime, &id, &Offsets::zero()).await?;
        ensure_eq(
            String::from_utf8_lossy(&joined(&chunks, ProcessStream::Stdout, 0)?).into_owned(),
            "out1\nout2\nout3\nout4\nout5\n".to_owned(),
            "stdout from 0",
        )?;
        ensure_eq(
            String::from_utf8_lossy(&joined(&chunks, ProcessStream::Stderr, 0)?).into_owned(),
            "err1\nerr2\nerr3\nerr4\nerr5\n".to_owned(),
            "stderr from 0",
        )?;
        ensure_eq(exit.status, ProcessStatus::Exited { code: 0 }, "the exit")
    })
}

fn replay_from_middle(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let id = spawn(&ctx.runtime, &lease, sh("printf 0123456789")).await?;
        wait(&ctx.runtime, &id).await?;
        let from = Offsets::default().with(ProcessStream::Stdout, 4);
        let (chunks, _) = drain(&ctx.runtime, &id, &from).await?;
        ensure_eq(
            joined(&chunks, ProcessStream::Stdout, 4)?,
            b"456789".to_vec(),
            "stdout from 4",
        )
    })
}

fn dropped_at_bound(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let mut request = sh("i=0; while [ $i -lt 100 ]; do printf %02d $i; i=$((i+1)); done");
        request.keep = Some(50);
        let id = spawn(&ctx.runtime, &lease, request).await?;
        wait(&ctx.runtime, &id).await?;
        let info = ctx.runtime.process(&id).await.map_err(|e| format!("process: {e}"))?;
        let stdout = info.stream(ProcessStream::Stdout).ok_or("no stdout accounting")?;
        ensure_eq((stdout.written, stdout.dropped), (200, 150), "(written, dropped)")?;
        let (chunks, _) = drain(&ctx.runtime, &id, &Offsets::default()).await?;
        let expected: String = (75..100).map(|i| format!("{i:02}")).collect();
        ensure_eq(
            String::from_utf8_lossy(&joined(&chunks, ProcessStream::Stdout, 150)?).into_owned(),
            expected,
            "the bytes held",
        )
    })
}

fn signal_group(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let marker = ctx.marker("group");
        let script = format!("sh -c 'sleep 300; : {marker}' >/dev/null 2>&1 & echo ready; wait");
        let id = spawn(&ctx.runtime, &lease, sh(&script)).await?;
        ensure_eq(
            first_chunk(&ctx.runtime, &id).await?,
            b"ready\n".to_vec(),
            "the first line",
        )?;
        ensure(!ctx.processes(&marker)?.is_empty(), || {
            "the group's child never ran".into()
        })?;
        ctx.runtime
            .signal(&id, "SIGTERM")
            .await
            .map_err(|e| format!("signal: {e}"))?;
        ensure_eq(
            wait(&ctx.runtime, &id).await?,
            ProcessStatus::Signalled { signal: 15 },
            "the status",
        )?;
        survivors(ctx, &marker).await
    })
}

/// Fails when a process carrying `marker` is still alive after a bounded wait.
pub(super) async fn survivors(ctx: &Ctx, marker: &str) -> Result<(), String> {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = ctx.processes(marker)?;
        if left.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() > until {
            return Err(format!("processes survived: {left:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn stdin_round_trip(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let mut request = SpawnRequest::new(["cat"]);
        request.stdin = StdinMode::Piped;
        let id = spawn(&ctx.runtime, &lease, request).await?;
        let sent: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        ctx.runtime
            .write_stdin(&id, &sent)
            .await
            .map_err(|e| format!("write_stdin: {e}"))?;
        ctx.runtime
            .write_stdin(&id, b"end")
            .await
            .map_err(|e| format!("write_stdin: {e}"))?;
        ctx.runtime
            .close_stdin(&id)
            .await
            .map_err(|e| format!("close_stdin: {e}"))?;
        let (chunks, exit) = drain(&ctx.runtime, &id, &Offsets::zero()).await?;
        let got = joined(&chunks, ProcessStream::Stdout, 0)?;
        ensure(
            got.len() == sent.len() + 3 && got.starts_with(&sent) && got.ends_with(b"end"),
            || format!("cat returned {} bytes of {}", got.len(), sent.len() + 3),
        )?;
        ensure_eq(exit.status, ProcessStatus::Exited { code: 0 }, "cat's exit after EOF")
    })
}

fn tty_resize(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let mut request = sh("stty size; read line; stty size");
        request.tty = Some(TtySize { rows: 24, cols: 80 });
        let id = spawn(&ctx.runtime, &lease, request).await?;
        let mut output = ctx
            .runtime
            .output(&id, &Offsets::zero())
            .await
            .map_err(|e| format!("output: {e}"))?;
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains("24 80") {
            match tokio::time::timeout(LIMIT, output.next()).await {
                Ok(Ok(Some(OutputEvent::Chunk(c)))) => seen.extend(c.bytes),
                other => {
                    return Err(format!(
                        "expected `24 80`, got {other:?} after {:?}",
                        String::from_utf8_lossy(&seen)
                    ));
                }
            }
        }
        ctx.runtime
            .resize(&id, 40, 100)
            .await
            .map_err(|e| format!("resize: {e}"))?;
        ctx.runtime
            .write_stdin(&id, b"go\r")
            .await
            .map_err(|e| format!("write: {e}"))?;
        let (chunks, _) = drain(&ctx.runtime, &id, &Offsets::zero()).await?;
        let text = String::from_utf8_lossy(&joined(&chunks, ProcessStream::Tty, 0)?).into_owned();
        ensure(text.contains("40 100"), || format!("the size after resize: {text:?}"))
    })
}

fn exit_status_kept(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let id = spawn(&ctx.runtime, &lease, sh("exit 5")).await?;
        ensure_eq(
            wait(&ctx.runtime, &id).await?,
            ProcessStatus::Exited { code: 5 },
            "wait",
        )?;
        let later = spawn(&ctx.runtime, &lease, sh("true")).await?;
        wait(&ctx.runtime, &later).await?;
        let info = ctx.runtime.process(&id).await.map_err(|e| format!("process: {e}"))?;
        ensure_eq(info.status, ProcessStatus::Exited { code: 5 }, "process")?;
        let list = ctx
            .runtime
            .processes(&lease.id)
            .await
            .map_err(|e| format!("processes: {e}"))?;
        let listed = list
            .iter()
            .find(|p| p.id.to_string() == id)
            .ok_or("processes lost it")?;
        ensure_eq(listed.status, ProcessStatus::Exited { code: 5 }, "processes")?;
        ensure_eq(
            wait(&ctx.runtime, &id).await?,
            ProcessStatus::Exited { code: 5 },
            "wait again",
        )
    })
}

/// Spawns a process with a `setsid` grandchild that leaves the workspace; ends the lease
/// with `end`; no process of either may survive.
async fn ends_with_lease(ctx: &Ctx, destroy: bool) -> Result<(), String> {
    let lease = ctx.acquire(LeasePolicy::Ephemeral).await?;
    let marker = ctx.marker("lease-end");
    let script = format!("cd / && setsid sh -c 'sleep 300; : {marker}' & echo up; sleep 300; : {marker}");
    let result = async {
        let id = spawn(&ctx.runtime, &lease, sh(&script)).await?;
        ensure_eq(
            first_chunk(&ctx.runtime, &id).await?,
            b"up\n".to_vec(),
            "the first line",
        )?;
        let until = tokio::time::Instant::now() + Duration::from_secs(10);
        while ctx.processes(&marker)?.len() < 2 && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let running = ctx.processes(&marker)?.len();
        ensure(running >= 2, || {
            format!("{running} processes running before the end, expected 2")
        })?;
        if destroy {
            ctx.runtime
                .destroy_lease(&lease.id)
                .await
                .map_err(|e| format!("destroy: {e}"))?;
        } else {
            ctx.runtime
                .release_lease(&lease.id, LeaseStatus::Released)
                .await
                .map_err(|e| format!("release: {e}"))?;
        }
        survivors(ctx, &marker).await
    }
    .await;
    ctx.finish(&lease).await;
    result
}

fn end_with_release(ctx: &Ctx) -> Result<(), String> {
    ctx.block_on(ends_with_lease(ctx, false))
}

fn end_with_destroy(ctx: &Ctx) -> Result<(), String> {
    ctx.block_on(ends_with_lease(ctx, true))
}

fn idempotent_spawn(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let mut request = sh("sleep 300");
        request.idempotency_key = Some("once".into());
        let first = spawn(&ctx.runtime, &lease, request.clone()).await?;
        let again = spawn(&ctx.runtime, &lease, request.clone()).await?;
        ensure_eq(&again, &first, "the process of the same key and request")?;
        request.argv.push("other".into());
        let refused = ctx.runtime.spawn(&lease.id, request).await;
        let text = refused.map(|i| i.id.to_string()).map_err(|e| e.to_string());
        ensure_eq(
            text,
            Err(format!(
                "Idempotency key \"once\" was already used for process \"{first}\" with a different request."
            )),
            "another request under the same key",
        )?;
        ctx.runtime
            .signal(&first, "KILL")
            .await
            .map_err(|e| format!("signal: {e}"))?;
        Ok(())
    })
}

fn concurrent_readers(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let mut request = sh("read go; i=0; while [ $i -lt 200 ]; do echo line-$i; i=$((i+1)); done");
        request.stdin = StdinMode::Piped;
        let id = spawn(&ctx.runtime, &lease, request).await?;
        let a = ctx
            .runtime
            .output(&id, &Offsets::zero())
            .await
            .map_err(|e| format!("output: {e}"))?;
        let b = ctx
            .runtime
            .output(&id, &Offsets::zero())
            .await
            .map_err(|e| format!("output: {e}"))?;
        ctx.runtime
            .write_stdin(&id, b"go\n")
            .await
            .map_err(|e| format!("write: {e}"))?;
        let read = |mut out: envrt_runtime_core::ProcessOutputStream| async move {
            let mut chunks = Vec::new();
            loop {
                match tokio::time::timeout(LIMIT, out.next()).await {
                    Ok(Ok(Some(OutputEvent::Chunk(c)))) => chunks.push((c.stream, c.offset, c.bytes)),
                    Ok(Ok(Some(OutputEvent::Exit(_)))) => return Ok(chunks),
                    other => return Err(format!("a reader got {other:?}")),
                }
            }
        };
        let (a, b) = tokio::join!(read(a), read(b));
        let (a, b) = (
            joined(&a?, ProcessStream::Stdout, 0)?,
            joined(&b?, ProcessStream::Stdout, 0)?,
        );
        let expected: String = (0..200).map(|i| format!("line-{i}\n")).collect();
        ensure_eq(String::from_utf8_lossy(&a).into_owned(), expected, "the first reader")?;
        ensure(a == b, || "the two readers saw different bytes".into())
    })
}

fn timeout_kills(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let marker = ctx.marker("timeout");
        let mut request = sh(&format!(
            "sh -c 'sleep 300; : {marker}' >/dev/null 2>&1 & echo ready; wait"
        ));
        request.timeout = Some(Duration::from_millis(500));
        let id = spawn(&ctx.runtime, &lease, request).await?;
        ensure_eq(
            wait(&ctx.runtime, &id).await?,
            ProcessStatus::Signalled { signal: 9 },
            "the status",
        )?;
        survivors(ctx, &marker).await
    })
}

fn listed(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let id = spawn(&ctx.runtime, &lease, sh("exec sleep 300")).await?;
        let list = ctx
            .runtime
            .processes(&lease.id)
            .await
            .map_err(|e| format!("processes: {e}"))?;
        let shown: Vec<(String, ProcessStatus)> = list.iter().map(|p| (p.id.to_string(), p.status)).collect();
        ensure_eq(shown, vec![(id.clone(), ProcessStatus::Running)], "the processes")?;
        ctx.runtime
            .signal(&id, "KILL")
            .await
            .map_err(|e| format!("signal: {e}"))?;
        Ok(())
    })
}
