//! Keeping track of everything a lease's commands start, including what leaves their
//! process group on purpose (`setsid`, double forks).
//!
//! Where a cgroup v2 hierarchy is mounted and writable (the driver runs as root, or has
//! been delegated a subtree), every command is moved into a cgroup of its own,
//! `{cgroup2 mount}/envrt-local/lease-{id}/cmd-{pid}`, right after it starts. Nothing a
//! command forks can leave it, so `cgroup.kill` ends the whole tree: the command's cgroup
//! when the command ends or times out, the lease's when it is released or destroyed, and
//! the same path (derived from the lease id alone) when `envrt gc` releases the lease of
//! a holder that died. Elsewhere the driver falls back to the process-group kill plus, on
//! release and destroy, a scan of `/proc` for processes whose `HOME` is the workspace or
//! whose working directory lies in it.
//!
//! The standard library gives no safe way to start a child inside a cgroup, so a contained
//! command is started through `/bin/sh -c JOIN_SCRIPT`, which joins the cgroup and then
//! `exec`s the command in place: the command never runs outside it. (The command's
//! `argv[0]` is then the resolved program path.)

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Run by `/bin/sh` in front of a contained command: the shell writes its own pid into the
/// command's `cgroup.procs` (given as `$1`), then `exec`s the command (same pid), so the
/// command is inside the cgroup before it runs a single instruction of its own and nothing
/// it forks can start outside. Should the write fail, the command still runs (contained
/// by its process group only).
/// The shell's own exported `PWD` is removed again unless the request set it.
pub(crate) const JOIN_SCRIPT: &str =
    "echo $$ > \"$1\" 2>/dev/null; [ \"$2\" = keep ] || unset PWD; shift 2; exec \"$@\"";

/// The directory of the driver's cgroups under the cgroup v2 mount.
const BASE_NAME: &str = "envrt-local";

/// How long a kill waits for a cgroup to empty.
const EMPTY_WAIT: Duration = Duration::from_secs(2);

/// How the lease's processes are contained.
#[derive(Debug, Clone)]
pub(crate) enum Containment {
    /// cgroup v2: the base directory holding one cgroup per lease.
    Cgroup(PathBuf),
    /// No writable cgroup v2: process groups, and a `/proc` scan on release.
    ProcessScan,
}

/// The mount point of the cgroup v2 hierarchy, from `/proc/self/mountinfo`.
fn cgroup2_mount() -> Option<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        // "... mount-point options - fstype source super-options"
        let (left, right) = line.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        left.split_whitespace().nth(4).map(PathBuf::from)
    })
}

impl Containment {
    /// cgroup v2 when `enabled`, mounted, and the driver may create its base directory
    /// there; the process scan otherwise.
    pub(crate) fn detect(enabled: bool) -> Containment {
        if !enabled {
            return Containment::ProcessScan;
        }
        let Some(mount) = cgroup2_mount() else {
            return Containment::ProcessScan;
        };
        let base = mount.join(BASE_NAME);
        match fs::create_dir(&base) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(_) => return Containment::ProcessScan,
        }
        if base.join("cgroup.kill").exists() {
            sweep(&base);
            Containment::Cgroup(base)
        } else {
            // A kernel without cgroup.kill (before 5.14): no atomic kill, so no cgroups.
            Containment::ProcessScan
        }
    }

    /// A short description for diagnostics and docs.
    pub(crate) fn describe(&self) -> String {
        match self {
            Containment::Cgroup(base) => format!("cgroup v2 under {}", base.display()),
            Containment::ProcessScan => "process groups and a /proc scan on release".to_owned(),
        }
    }

    /// The cgroup of a lease (whether or not it exists); none in the fallback.
    pub(crate) fn lease_dir(&self, lease: &str) -> Option<PathBuf> {
        match self {
            Containment::Cgroup(base) => Some(base.join(format!("lease-{lease}"))),
            Containment::ProcessScan => None,
        }
    }

    /// Creates a fresh cgroup for one command under the lease's; none in the fallback or
    /// when it cannot be created. The command joins it through [`JOIN_SCRIPT`].
    pub(crate) fn prepare(&self, lease: &str) -> Option<PathBuf> {
        let lease_dir = self.lease_dir(lease)?;
        match fs::create_dir(&lease_dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(_) => return None,
        }
        let cmd = lease_dir.join(format!("cmd-{}", uuid::Uuid::new_v4().simple()));
        match fs::create_dir(&cmd) {
            Ok(()) => Some(cmd),
            // Swept by another driver's start between the two calls: make it again.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let _ = fs::create_dir(&lease_dir);
                fs::create_dir(&cmd).ok().map(|()| cmd)
            }
            Err(_) => None,
        }
    }

    /// Kills everything in the lease's cgroups (and, in the fallback, every process tied
    /// to `workspace`), waits (bounded) until they are gone, and removes the cgroups.
    pub(crate) async fn kill_lease(&self, lease: &str, workspace: &Path) {
        match self.lease_dir(lease) {
            Some(dir) => {
                if dir.is_dir() {
                    kill_cgroup(&dir).await;
                    // A cgroup whose last process is still exiting cannot be removed yet.
                    for _ in 0..5 {
                        if remove_cgroup_tree(&dir) {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            None => {
                kill_tied_to(workspace);
            }
        }
    }
}

/// Removes the empty lease cgroups under `base` (left by leases never released, e.g. of a
/// holder that died and was never collected). `rmdir` refuses a cgroup that has a child or
/// a process, so a lease in use is never touched; one whose next command starts meanwhile
/// is made again by [`Containment::prepare`].
fn sweep(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with("lease-") && entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = fs::remove_dir(entry.path());
        }
    }
}

/// Kills every process of the cgroup `dir` and its descendants and waits (bounded) until
/// it is empty; then removes it.
pub(crate) async fn kill_command(dir: &Path) {
    kill_cgroup(dir).await;
    let _ = fs::remove_dir(dir);
}

async fn kill_cgroup(dir: &Path) {
    // Usually the command's cgroup is already empty when it exits: nothing to kill.
    if !populated(dir) {
        return;
    }
    if fs::write(dir.join("cgroup.kill"), "1").is_err() {
        return;
    }
    let until = Instant::now() + EMPTY_WAIT;
    while Instant::now() < until && populated(dir) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether the cgroup (or a descendant) still has a process.
fn populated(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.events"))
        .map(|events| events.lines().any(|l| l == "populated 1"))
        .unwrap_or(false)
}

/// Removes a cgroup and its (empty) children, deepest first; whether it is gone.
fn remove_cgroup_tree(dir: &Path) -> bool {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = fs::remove_dir(entry.path());
            }
        }
    }
    fs::remove_dir(dir).is_ok() || !dir.exists()
}

/// Whether process `pid` was started for `workspace`: its initial `HOME` is the
/// workspace (every command starts so) or its working directory lies in it.
pub(crate) fn tied_to(pid: u32, workspace: &Path) -> bool {
    let mut home = b"HOME=".to_vec();
    home.extend_from_slice(workspace.as_os_str().as_encoded_bytes());
    let by_home = fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|environ| environ.split(|b| *b == 0).any(|var| var == home.as_slice()));
    by_home || fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(workspace))
}

/// SIGKILLs every process tied to `workspace` (never this process); returns how many.
/// Also what recovery calls after a dead holder, whose process table died with it.
pub fn kill_tied_to(workspace: &Path) -> usize {
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return 0;
    };
    let mut killed = 0;
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || !tied_to(pid, workspace) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_is_off_when_disabled_and_describes_itself() {
        assert!(matches!(Containment::detect(false), Containment::ProcessScan));
        assert_eq!(
            Containment::ProcessScan.describe(),
            "process groups and a /proc scan on release"
        );
    }
}
