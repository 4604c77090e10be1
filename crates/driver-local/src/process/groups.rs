//! The process groups of a lease's running commands: a table per driver so that release
//! and destroy can kill what a lease still runs, and a guard per command that kills its
//! group (and its cgroup) when the command's call is dropped.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// How long release and destroy wait for a lease's killed commands to disappear.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// How long the call waits for a killed group to disappear before returning.
const REAP_WAIT: Duration = Duration::from_millis(200);

/// The process groups currently running, per lease, so that release and destroy can kill
/// what a lease still runs; and the leases being closed, whose new commands are killed at
/// once (an execute racing a release cannot outlive it).
#[derive(Debug, Default)]
pub(crate) struct ProcessTable {
    state: Mutex<TableState>,
}

#[derive(Debug, Default)]
struct TableState {
    running: HashMap<String, HashSet<i32>>,
    closed: HashSet<String>,
}

impl ProcessTable {
    fn state(&self) -> std::sync::MutexGuard<'_, TableState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn register(self: &Arc<Self>, lease: &str, pgid: i32) -> GroupGuard {
        let mut state = self.state();
        state.running.entry(lease.to_owned()).or_default().insert(pgid);
        if state.closed.contains(lease) {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
        GroupGuard {
            table: Arc::clone(self),
            lease: lease.to_owned(),
            pgid,
            cgroup: None,
            armed: true,
        }
    }

    fn deregister(&self, lease: &str, pgid: i32) {
        let mut state = self.state();
        if let Some(set) = state.running.get_mut(lease) {
            set.remove(&pgid);
            if set.is_empty() {
                state.running.remove(lease);
            }
        }
    }

    /// Marks the lease closed and sends `SIGKILL` to every process group it still runs;
    /// commands started later are killed at once until [`reopen`](Self::reopen). Waits
    /// (bounded) until those groups are gone, so that nothing still writes into the
    /// workspace while it is removed.
    pub(crate) async fn close(&self, lease: &str) {
        let groups: Vec<i32> = {
            let mut state = self.state();
            state.closed.insert(lease.to_owned());
            state
                .running
                .get(lease)
                .map(|s| s.iter().copied().collect())
                .unwrap_or_default()
        };
        for pgid in &groups {
            let _ = killpg(Pid::from_raw(*pgid), Signal::SIGKILL);
        }
        let until = Instant::now() + CLOSE_WAIT;
        while Instant::now() < until && groups.iter().any(|g| group_alive(*g)) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Lets the lease run commands again (acquire, resume), or forgets a removed lease.
    pub(crate) fn reopen(&self, lease: &str) {
        self.state().closed.remove(lease);
    }

    /// How many commands the lease is running.
    pub(crate) fn running(&self, lease: &str) -> usize {
        self.state().running.get(lease).map_or(0, HashSet::len)
    }
}

/// Whether a process group still has a member that is not a zombie. Zombies count for
/// `kill(-pgid, 0)` but run nothing; whoever inherited them reaps them in its own time.
fn group_alive(pgid: i32) -> bool {
    if killpg(Pid::from_raw(pgid), None).is_err() {
        return false;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        // "pid (comm) S ppid pgrp ..."; comm may contain anything, so parse after ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            return false;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("Z");
        let pgrp = fields.nth(1).and_then(|f| f.parse::<i32>().ok());
        pgrp == Some(pgid) && state != "Z" && state != "X"
    })
}

/// Owns one command's process group: `SIGKILL`s it when dropped while armed (the execute
/// future was dropped), and always leaves the process table.
pub(crate) struct GroupGuard {
    table: Arc<ProcessTable>,
    lease: String,
    pgid: i32,
    /// The command's own cgroup, when it has one: killed too.
    pub(crate) cgroup: Option<std::path::PathBuf>,
    armed: bool,
}

impl GroupGuard {
    /// Leaves the process table without killing: the group was already reaped.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

/// Signals a whole process group; true when at least one process received it.
pub(crate) fn signal_group(pgid: i32, signal: Signal) -> bool {
    killpg(Pid::from_raw(pgid), signal).is_ok()
}

/// Kills what is left of the group after the direct child exited, and waits (briefly,
/// bounded) until the group is gone.
pub(crate) async fn reap_group(pgid: i32) {
    if signal_group(pgid, Signal::SIGKILL) {
        let until = Instant::now() + REAP_WAIT;
        while group_alive(pgid) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
            if let Some(cgroup) = &self.cgroup {
                // No waiting in a destructor: the lease's release removes the empty cgroup.
                let _ = std::fs::write(cgroup.join("cgroup.kill"), "1");
            }
        }
        self.table.deregister(&self.lease, self.pgid);
    }
}
