//! Pause and unpause of a local lease (contract section 8, "Pause and unpause").
//!
//! Where the lease has a cgroup (cgroup v2 containment), `cgroup.freeze` freezes it and
//! everything below it: every command, everything they forked and the lease's
//! `envrt-agent` with the processes it supervises; the pause returns once
//! `cgroup.events` says `frozen 1`. Every process tied to the workspace (its `HOME` is
//! the workspace or its working directory lies in it, as release's scan finds them) is
//! also sent `SIGSTOP`, which covers the fallback without cgroups and commands run as
//! another user (which start outside the cgroup). The scan is repeated until a pass finds
//! no process it has not stopped yet (a stopped process cannot fork), bounded by
//! [`SCAN_PASSES`], and the pause waits (bounded) until each one shows state `T`.
//!
//! Unpause sends `SIGCONT` to the same set (which also drops a `SIGSTOP` still pending on
//! a frozen process) and then thaws the cgroup. The expiry watchdog runs outside the
//! lease's cgroup with no `HOME` and is never stopped: `cgroup.kill` and `SIGKILL` end
//! frozen and stopped processes alike, so expiry, release and destroy work on a paused
//! lease.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use envrt_driver_api::{DriverError, LeaseContext, PauseLease};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::LocalDriver;
use crate::process::containment::tied_to;

/// At most this many scans for processes forked while the previous scan ran.
const SCAN_PASSES: usize = 20;

/// How long a pause waits for the cgroup to report frozen and each process to stop.
const SETTLE: Duration = Duration::from_secs(15);

#[async_trait]
impl PauseLease for LocalDriver {
    async fn pause_lease(&self, context: &LeaseContext) -> Result<(), DriverError> {
        let workspace = self.live_workspace(context)?;
        let cgroup = self.containment_mode().lease_dir(&context.lease.id);
        if let Some(cgroup) = cgroup.as_deref().filter(|c| c.is_dir()) {
            freeze(cgroup, true).await?;
        }
        // The cgroup v2 mount: two levels above the lease's cgroup.
        let mount = cgroup.as_deref().and_then(Path::parent).and_then(Path::parent);
        signal_all(&workspace, Signal::SIGSTOP, mount).await
    }

    async fn unpause_lease(&self, context: &LeaseContext) -> Result<(), DriverError> {
        let workspace = self.live_workspace(context)?;
        signal_all(&workspace, Signal::SIGCONT, None).await?;
        if let Some(cgroup) = self.containment_mode().lease_dir(&context.lease.id)
            && cgroup.is_dir()
        {
            freeze(&cgroup, false).await?;
        }
        Ok(())
    }
}

/// Writes `cgroup.freeze` and waits (bounded) until `cgroup.events` agrees.
async fn freeze(cgroup: &Path, frozen: bool) -> Result<(), DriverError> {
    let value = if frozen { "1" } else { "0" };
    std::fs::write(cgroup.join("cgroup.freeze"), value)
        .map_err(|e| DriverError::io(format!("cannot write {}/cgroup.freeze", cgroup.display()), e))?;
    let want = format!("frozen {value}");
    let until = Instant::now() + SETTLE;
    loop {
        let events = std::fs::read_to_string(cgroup.join("cgroup.events")).unwrap_or_default();
        // A cgroup removed meanwhile (its last command ended) has nothing left to freeze.
        if events.is_empty() || events.lines().any(|l| l == want) {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(DriverError::other(format!(
                "the lease's cgroup {} did not report \"{want}\"",
                cgroup.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Sends `signal` to every process tied to `workspace` (never this process), scanning
/// again until a pass finds none it has not signalled; for `SIGSTOP`, then waits
/// (bounded) until each shows state `T`.
async fn signal_all(workspace: &Path, signal: Signal, mount: Option<&Path>) -> Result<(), DriverError> {
    let me = std::process::id();
    let mut signalled: HashSet<u32> = HashSet::new();
    for _ in 0..SCAN_PASSES {
        let fresh: Vec<u32> = tied_pids(workspace)
            .into_iter()
            .filter(|pid| *pid != me && !signalled.contains(pid))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for pid in fresh {
            if let Ok(raw) = i32::try_from(pid)
                && kill(Pid::from_raw(raw), signal).is_ok()
            {
                signalled.insert(pid);
            }
        }
    }
    if signal != Signal::SIGSTOP {
        return Ok(());
    }
    let until = Instant::now() + SETTLE;
    for pid in signalled {
        while !stopped_or_gone(pid, mount) {
            if Instant::now() >= until {
                return Err(DriverError::other(format!("process {pid} of the lease did not stop")));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    Ok(())
}

/// Every process tied to `workspace`.
fn tied_pids(workspace: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| tied_to(*pid, workspace))
        .collect()
}

/// Whether process `pid` is stopped (`T`), a zombie or gone; a frozen process counts as
/// stopped too (the cgroup reported it frozen).
fn stopped_or_gone(pid: u32, mount: Option<&Path>) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    let state = stat
        .rfind(')')
        .and_then(|end| stat[end + 1..].split_whitespace().next())
        .unwrap_or("");
    matches!(state, "T" | "t" | "Z" | "X") || mount.is_some_and(|m| frozen(pid, m))
}

/// Whether `pid` sits in a frozen cgroup (its signal stays pending until the thaw).
fn frozen(pid: u32, mount: &Path) -> bool {
    let Ok(line) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return false;
    };
    let Some(path) = line.lines().find_map(|l| l.strip_prefix("0::")) else {
        return false;
    };
    let events = mount.join(path.trim_start_matches('/')).join("cgroup.events");
    std::fs::read_to_string(events).is_ok_and(|events| events.lines().any(|l| l == "frozen 1"))
}
