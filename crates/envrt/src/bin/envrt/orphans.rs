//! Finding what a dead holder left running in a local lease.
//!
//! The local driver keeps its process table in the holder's memory, so after the holder
//! is killed nothing knows the command's pids. Its documented behaviour gives them away:
//! every command starts with `HOME` set to the lease workspace and its working directory
//! inside it. A workspace path holds the lease's unique id, so a process whose initial
//! `HOME` is that path, or whose working directory lies under it, belongs to the lease.

use std::path::Path;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Whether process `pid` was started for `workspace`.
fn belongs_to(pid: u32, workspace: &Path) -> bool {
    let home = {
        let mut entry = b"HOME=".to_vec();
        entry.extend_from_slice(workspace.as_os_str().as_encoded_bytes());
        entry
    };
    let by_home = std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|environ| environ.split(|b| *b == 0).any(|var| var == home.as_slice()));
    by_home || std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(workspace))
}

/// SIGKILLs every process left running for `workspace`; returns how many.
pub(crate) fn kill_left_in(workspace: &Path) -> usize {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut killed = 0;
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || !belongs_to(pid, workspace) {
            continue;
        }
        if let Ok(raw) = i32::try_from(pid)
            && kill(Pid::from_raw(raw), Signal::SIGKILL).is_ok()
        {
            killed += 1;
        }
    }
    killed
}
