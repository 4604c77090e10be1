//! Killing a command's process tree from the host, when the engine runs on this machine:
//! a container's processes are host processes, visible in the host's `/proc`, and the
//! driver (root) signals them without starting anything inside the container. A command
//! that fills the container's pids limit cannot stop this (the in-container killer of
//! [`crate::process`] needs a fork there), nor can a command that signals every process
//! it sees (it sees none of the host's).
//!
//! A host process belongs to the container when its cgroup path names the container's
//! full id (a process cannot move itself out of its cgroup without `CAP_SYS_ADMIN`). Of
//! those, the tree is what the in-container killer takes, in the container's pid
//! namespace numbers from `/proc/<pid>/status` (`NSpid`, `NSpgid`, `NSsid`, last field):
//! every process whose session or group is the command's pid, every process holding one
//! of its output pipes, and every descendant of those (by host parent pid). All are
//! stopped (repeatedly, until no new one appears, so nobody forks while it looks), then
//! signalled. Each pid is checked to still be in the container right before a signal.
//!
//! Everything here is synchronous and quick (reads of `/proc`, no engine call), so a
//! dropped execute can run it in its `Drop` even while the async runtime shuts down.

use std::collections::BTreeSet;
use std::path::Path;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::process::Target;

/// Rounds of stopping after which the tree is signalled even if new members still appear.
const STOP_ROUNDS: usize = 64;

/// One host process of the container.
#[derive(Debug)]
struct Proc {
    host_pid: i32,
    host_ppid: i32,
    /// Pid, group and session in the container's pid namespace.
    ns_pid: u32,
    ns_pgid: u32,
    ns_sid: u32,
    /// `stat` state letter.
    state: char,
    holds_pipe: bool,
}

/// Whether host process `pid`'s cgroup names `container` (a full 64-hex id).
fn in_container(pid: i32, container: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|text| text.contains(container))
}

fn last_field(status: &str, key: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().last())
        .and_then(|v| v.parse().ok())
}

fn read_proc(dir: &Path, host_pid: i32, target: &Target) -> Option<Proc> {
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let state = stat.rsplit_once(") ")?.1.chars().next()?;
    let holds_pipe = !target.pipes.is_empty()
        && ["1", "2"].iter().any(|fd| {
            std::fs::read_link(dir.join("fd").join(fd))
                .is_ok_and(|link| target.pipes.iter().any(|p| Path::new(p) == link))
        });
    Some(Proc {
        host_pid,
        host_ppid: last_field(&status, "PPid:")? as i32,
        ns_pid: last_field(&status, "NSpid:")?,
        ns_pgid: last_field(&status, "NSpgid:")?,
        ns_sid: last_field(&status, "NSsid:")?,
        state,
        holds_pipe,
    })
}

/// Every host process of `container`.
fn container_processes(container: &str, target: &Target) -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let host_pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            if !in_container(host_pid, container) {
                return None;
            }
            read_proc(&entry.path(), host_pid, target)
        })
        .collect()
}

/// The host pids of the command's tree among `procs`.
fn tree(procs: &[Proc], target: &Target) -> BTreeSet<i32> {
    let root = target.pid;
    let mut members: BTreeSet<i32> = procs
        .iter()
        .filter(|p| p.ns_sid == root || p.ns_pgid == root || p.ns_pid == root || p.holds_pipe)
        .map(|p| p.host_pid)
        .collect();
    loop {
        let before = members.len();
        for p in procs {
            if members.contains(&p.host_ppid) {
                members.insert(p.host_pid);
            }
        }
        if members.len() == before {
            return members;
        }
    }
}

fn signal_member(container: &str, pid: i32, signal: Signal) {
    if in_container(pid, container) {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

/// Whether this host sees `container`'s processes (its engine is local): at least its
/// init is there.
pub(crate) fn sees(container: &str) -> bool {
    container.len() == 64
        && container.bytes().all(|b| b.is_ascii_hexdigit())
        && container_processes(container, &Target::default())
            .iter()
            .any(|p| p.ns_pid == 1)
}

/// What to do to the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Stop everything, send `SIGTERM`, continue.
    Term,
    /// Stop everything, send `SIGKILL`.
    Kill,
    /// Only count.
    List,
}

/// Applies `mode` to the tree of `target` in `container`; returns how many of its
/// processes are alive (not zombies) at the last look.
pub(crate) fn apply(container: &str, target: &Target, mode: Mode) -> u64 {
    let mut members = tree(&container_processes(container, target), target);
    if mode != Mode::List {
        let mut stopped = BTreeSet::new();
        for _ in 0..STOP_ROUNDS {
            let fresh: Vec<i32> = members.difference(&stopped).copied().collect();
            if fresh.is_empty() {
                break;
            }
            for pid in fresh {
                signal_member(container, pid, Signal::SIGSTOP);
                stopped.insert(pid);
            }
            members = tree(&container_processes(container, target), target);
            members.extend(stopped.iter().copied());
        }
        match mode {
            Mode::Kill => members
                .iter()
                .for_each(|p| signal_member(container, *p, Signal::SIGKILL)),
            _ => {
                members
                    .iter()
                    .for_each(|p| signal_member(container, *p, Signal::SIGTERM));
                members
                    .iter()
                    .for_each(|p| signal_member(container, *p, Signal::SIGCONT));
            }
        }
    }
    let procs = container_processes(container, target);
    let now = tree(&procs, target);
    procs
        .iter()
        .filter(|p| now.contains(&p.host_pid) && p.state != 'Z' && p.state != 'X')
        .count() as u64
}

/// Kills the tree whose session leader is host process `host_pid` (an exec's own process,
/// as the engine reports it), when it is in `container`.
pub(crate) fn apply_host_session(container: &str, host_pid: i32) -> u64 {
    if !in_container(host_pid, container) {
        return 0;
    }
    let status = std::fs::read_to_string(format!("/proc/{host_pid}/status")).unwrap_or_default();
    match last_field(&status, "NSpid:") {
        Some(pid) => apply(container, &Target { pid, pipes: Vec::new() }, Mode::Kill),
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(host_pid: i32, host_ppid: i32, ns: (u32, u32, u32), holds_pipe: bool) -> Proc {
        Proc {
            host_pid,
            host_ppid,
            ns_pid: ns.0,
            ns_pgid: ns.1,
            ns_sid: ns.2,
            state: 'S',
            holds_pipe,
        }
    }

    #[test]
    fn the_tree_is_the_session_the_pipe_holders_and_their_descendants() {
        let target = Target {
            pid: 7,
            pipes: vec!["pipe:[1]".into()],
        };
        let procs = vec![
            proc(100, 0, (1, 1, 1), false),      // init
            proc(101, 100, (2, 1, 1), false),    // the container's main process
            proc(107, 100, (7, 7, 7), false),    // the command
            proc(108, 107, (8, 7, 7), false),    // its child
            proc(109, 100, (9, 9, 9), true),     // a setsid escapee holding the output
            proc(110, 109, (10, 9, 9), false),   // the escapee's child
            proc(111, 100, (11, 11, 11), false), // another exec
        ];
        assert_eq!(tree(&procs, &target), BTreeSet::from([107, 108, 109, 110]));
    }

    #[test]
    fn status_fields_take_the_innermost_namespace() {
        let status = "Name:\tsleep\nPPid:\t42\nNSpid:\t1840\t7\nNSsid:\t1840\t7\n";
        assert_eq!(last_field(status, "NSpid:"), Some(7));
        assert_eq!(last_field(status, "PPid:"), Some(42));
        assert_eq!(last_field(status, "NSpgid:"), None);
    }
}
