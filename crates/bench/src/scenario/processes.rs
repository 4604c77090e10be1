//! Persistent process sessions (row 10, contract section 9), each against a baseline of the
//! same run:
//!
//! - spawn to first byte (`processes-spawn`, on every driver that grants
//!   `persistentProcessSessions`: local, Docker with the static supervisor, sandbox, SSH):
//!   `spawn(["sh", "-c", "echo x; exec sleep 60"])`, then `output()` until the first chunk,
//!   vs the same lease's buffered execute of `echo x`;
//! - replay of held output (`processes-replay`, local and Docker): 64 MiB written by a
//!   process that has exited, read back through `output()` from offset 0, vs a pipe read of
//!   the same bytes by the bench;
//! - supervisor memory (`processes-memory`, local): the supervisor's RSS with 1,000 live
//!   `sleep`s in one lease, per process, vs its RSS with none live.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::Config;
use crate::baseline;
use crate::facade::Leased;
use crate::measure::{Scratch, interleave_reported, mibps, rss_of, time};
use crate::report::{Figure, Row, Target};
use crate::targets::local::Local;
use crate::targets::{docker, sandbox, ssh};

/// The row number of every process session row.
pub(crate) const NUMBER: u8 = 10;
/// Spawn to first byte.
pub(crate) const SPAWN: &str = "processes-spawn";
/// Replay of held output.
pub(crate) const REPLAY: &str = "processes-replay";
/// Supervisor memory.
pub(crate) const MEMORY: &str = "processes-memory";

/// Bytes the replay rows hold and read back.
const REPLAY_BYTES: u64 = 64 << 20;
/// Live processes in the memory row.
const PROCESSES: usize = 1_000;
/// Bytes held per stream by each of them (nothing is written; the supervisor reserves
/// `keep` per stream against its 1 GiB bound, and its buffers grow only with bytes held).
const SMALL_KEEP: u64 = 4096;

const SPAWN_NOTE: &str = "p50 of the time from the `spawn` call to the first chunk of `output()` from offset 0 (the process goes on running: `sh -c 'echo x; exec sleep 60'`; killed after each round, untimed), interleaved with a buffered execute of `echo x` on the same lease (spawn, run, exit, output collected); the supervisor's first start is in the warm-up rounds. The ratio is the time to a persistent process's first byte over a whole buffered command's: below 1× a spawned process shows its first byte sooner than the same driver returns `echo x`";

/// Spawn to first byte on one lease, interleaved with its buffered execute.
async fn first_byte(config: &Config, leased: &Leased, name: &str, note: &str) -> Row {
    let measured = interleave_reported(2, 3, config.slow_exec_rounds(), |i| async move {
        match i {
            0 => leased.spawn_to_first_byte().await,
            _ => time(leased.run(&["echo", "x"])).await.map(|(took, ())| took),
        }
    })
    .await;
    match measured {
        Ok(m) => Row::new(SPAWN, NUMBER, name, Figure::ms(m.p(0, 50.0)))
            .baseline("buffered execute `echo x`", Figure::ms(m.p(1, 50.0)))
            .note(note),
        Err(e) => Row::missing(SPAWN, NUMBER, name, format!("error: {e}")),
    }
}

/// Row 10, spawn to first byte: local, Docker (static supervisor), sandbox, SSH.
pub(crate) async fn spawn_rows(config: &Config) -> Vec<Row> {
    let mut rows = Vec::new();
    let name = "local spawn to first byte p50";
    rows.push(match Local::open(None).await {
        Ok(local) => {
            let row = first_byte(config, &local.leased, name, SPAWN_NOTE).await;
            local.leased.close().await;
            row
        }
        Err(e) => Row::missing(SPAWN, NUMBER, name, format!("error: {e}")),
    });
    let name = "docker spawn to first byte p50";
    rows.push(match docker::open_sessions().await {
        Ok(d) => {
            let note = "as the local row; the supervisor is the static `envrt-agent` bind-mounted into the lease's container, reached through its socket on the host";
            let row = first_byte(config, &d.leased, name, note).await;
            d.leased.close().await;
            row
        }
        Err(e) => missing(SPAWN, name, e),
    });
    let name = "sandbox spawn to first byte p50";
    let opened = async {
        let scratch = Scratch::new("256m")?;
        let (leased, driver) = sandbox::open(&scratch.join("leases")).await?;
        Ok::<_, String>((scratch, leased, driver))
    }
    .await;
    rows.push(match opened {
        Ok((_scratch, leased, driver)) => {
            let note = "as the local row; the reference worker starts the supervisor inside the lease's bwrap";
            let row = first_byte(config, &leased, name, note).await;
            sandbox::close(leased, driver).await;
            row
        }
        Err(e) => missing(SPAWN, name, e),
    });
    let name = "ssh spawn to first byte p50";
    rows.push(match ssh::open().await {
        Ok(d) => {
            let note = "as the local row; the test sshd on 127.0.0.1, the supervisor on the far side of the driver's open master";
            let row = first_byte(config, &d.leased, name, note).await;
            d.close().await;
            row
        }
        Err(e) => missing(SPAWN, name, e),
    });
    rows
}

/// A row that could not be measured: `n/a (...)` as given, any other error as one.
fn missing(group: &'static str, name: &str, e: String) -> Row {
    let why = if e.starts_with("n/a") { e } else { format!("error: {e}") };
    Row::missing(group, NUMBER, name, why)
}

/// Replay on one lease: one process's 64 MiB (spawned and waited for untimed) read back
/// from offset 0 in every round, interleaved with the pipe read.
async fn replay(config: &Config, leased: &Leased, name: &str) -> Row {
    let id = match leased.spawn_held_output(REPLAY_BYTES).await {
        Ok(id) => id,
        Err(e) => return Row::missing(REPLAY, NUMBER, name, format!("error: {e}")),
    };
    let id = id.as_str();
    let rounds = if config.quick { 5 } else { 9 };
    let measured = interleave_reported(2, 1, rounds, |i| async move {
        match i {
            0 => leased.replay(id, REPLAY_BYTES).await,
            _ => baseline::pipe_into_buffer(REPLAY_BYTES).await,
        }
    })
    .await;
    match measured {
        Ok(m) => {
            let rate = |i: usize| mibps(REPLAY_BYTES, Duration::from_secs_f64(m.p(i, 50.0) / 1e3));
            Row::new(REPLAY, NUMBER, name, Figure::mibps(rate(0)))
                .baseline("pipe read into a buffer", Figure::mibps(rate(1)))
                .floor_is(0)
                .target(Target::RatioAtLeast(0, 0.5))
        }
        Err(e) => Row::missing(REPLAY, NUMBER, name, format!("error: {e}")),
    }
}

const REPLAY_NOTE: &str = "median of 5 interleaved rounds (9 in the full run) after one warm-up: a process `head -c 64M /dev/zero` (keep 64 MiB, so nothing is dropped) is spawned and waited for once, untimed; each round reads its stdout from offset 0 through `output()` into one buffer until the exit; the baseline spawns `sh -c 'head -c 64M /dev/zero | cat'` and reads its stdout into one buffer (spawn and writing included). The ratio is the replay's rate over the pipe's: at 1× held output comes back as fast as a fresh pipe delivers new output";

/// Row 10, replay of 64 MiB of held output: local and Docker.
pub(crate) async fn replay_rows(config: &Config) -> Vec<Row> {
    let mut rows = Vec::new();
    let name = "local replay of 64 MiB held output";
    rows.push(match Local::open(None).await {
        Ok(local) => {
            let row = replay(config, &local.leased, name).await.note(REPLAY_NOTE);
            local.leased.close().await;
            row
        }
        Err(e) => Row::missing(REPLAY, NUMBER, name, format!("error: {e}")),
    });
    let name = "docker replay of 64 MiB held output";
    rows.push(match docker::open_sessions().await {
        Ok(d) => {
            let row = replay(config, &d.leased, name)
                .await
                .note("as the local row; the supervisor runs in the container and its socket is reached through a bind mount, the baseline pipe runs on the host");
            d.leased.close().await;
            row
        }
        Err(e) => missing(REPLAY, name, e),
    });
    rows
}

/// The pid of the supervisor of the one lease under `root` (`.agent-{lease}/agent.pid`,
/// recorded by the local driver when it started it).
fn supervisor_pid(root: &Path) -> Result<String, String> {
    let dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(|e| format!("{}: {e}", root.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(".agent-"))
        })
        .collect();
    let [dir] = dirs.as_slice() else {
        return Err(format!("{} agent directories under {}", dirs.len(), root.display()));
    };
    let pid = std::fs::read_to_string(dir.join("agent.pid")).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(pid.trim().to_owned())
}

/// The supervisor's RSS (KiB) with one exited process and then with `count` live `sleep`s
/// more, and the bytes their buffers hold.
async fn memory(leased: &Leased, root: &Path, count: usize) -> Result<(f64, f64, u64), String> {
    // The first spawn starts the supervisor; its process exits at once.
    let first = leased.spawn(&["true"], SMALL_KEEP).await?;
    let _ = leased
        .runtime
        .wait_process(&first.id.to_string(), Some(Duration::from_secs(30)))
        .await;
    let pid = supervisor_pid(root)?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let idle = rss_of(&pid);
    for _ in 0..count {
        leased.spawn(&["sleep", "600"], SMALL_KEEP).await?;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let loaded = rss_of(&pid);
    let list = leased
        .runtime
        .processes(&leased.lease)
        .await
        .map_err(|e| format!("processes: {e}"))?;
    let running = list.iter().filter(|p| p.status.is_running()).count();
    if running != count || idle == 0.0 || loaded == 0.0 {
        return Err(format!(
            "{running} of {count} processes running; supervisor {pid} RSS {idle} / {loaded} KiB"
        ));
    }
    let held: u64 = list
        .iter()
        .flat_map(|p| &p.streams)
        .map(|s| s.written.saturating_sub(s.dropped))
        .sum();
    Ok((idle, loaded, held))
}

/// Row 10, supervisor memory with 1,000 live processes in one local lease.
pub(crate) async fn memory_rows(_config: &Config) -> Vec<Row> {
    let name = format!("local supervisor RSS with {PROCESSES} live processes");
    let per_name = format!("local supervisor memory per live process beyond its buffers ({PROCESSES} live)");
    let measured = async {
        let scratch = Scratch::new("256m")?;
        let root = scratch.join("leases");
        let local = Local::open(Some(root.clone())).await?;
        let measured = memory(&local.leased, &root, PROCESSES).await;
        local.leased.close().await;
        drop(scratch);
        measured
    }
    .await;
    match measured {
        Ok((idle, loaded, held)) => {
            let per_process = ((loaded - idle) - held as f64 / 1024.0) / PROCESSES as f64;
            vec![
                Row::new(MEMORY, NUMBER, name, Figure::kib(loaded))
                    .baseline("supervisor RSS with no live process", Figure::kib(idle))
                    .note(format!(
                        "VmRSS of the lease's supervisor (`envrt-agent`, pid from the local driver's `agent.pid`) after {PROCESSES} `sleep 600` spawned one after another with keep {SMALL_KEEP} bytes, against its VmRSS after the lease's first process (`true`, exited) started it"
                    )),
                Row::new(MEMORY, NUMBER, per_name, Figure::kib(per_process))
                    .target(Target::AtMost(64.0))
                    .note(format!(
                        "the row above: (RSS with them − RSS with none − the {held} bytes their buffers hold) ÷ {PROCESSES}"
                    )),
            ]
        }
        Err(e) => vec![
            Row::missing(MEMORY, NUMBER, name, format!("error: {e}")),
            Row::missing(MEMORY, NUMBER, per_name, format!("error: {e}")),
        ],
    }
}
