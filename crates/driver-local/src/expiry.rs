//! Lease expiry on this host: a detached watchdog per expiring lease that, at the expiry,
//! kills everything the lease runs and removes its workspace (unless the policy keeps it),
//! whether or not the program that took the lease is still alive.
//!
//! The watchdog is `/bin/sh` running [`SCRIPT`] in a process group of its own (so it gets
//! no terminal signal and a single `killpg` ends it and its `sleep`), started by the
//! driver's process, never inside the lease's cgroup. Its process group id is written to
//! `{root}/.watchdog-lease-{id}`; release and destroy kill that group (after checking that
//! the process still is this lease's watchdog) and remove the file, so an early release
//! leaves no watchdog behind. A watchdog that fires removes its file itself.

use std::path::{Path, PathBuf};

use envrt_driver_api::{DriverError, Timestamp};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// What the watchdog runs: `$1` seconds to sleep, `$2` the lease's cgroup (empty without
/// cgroups), `$3` the workspace, `$4` `remove` or `keep`, `$5` its own pid file. At expiry
/// it kills the cgroup (or, without one, every process whose working directory lies in the
/// workspace or whose `HOME` is the workspace), waits (bounded) for the cgroup to empty,
/// removes the workspace when asked, then the empty cgroups and its pid file.
pub(crate) const SCRIPT: &str = r#"sleep "$1" || exit 0
cg="$2"; ws="$3"
if [ -n "$cg" ]; then
  [ -d "$cg" ] && echo 1 > "$cg/cgroup.kill" 2>/dev/null
  i=0
  while [ $i -lt 100 ] && grep -q "populated 1" "$cg/cgroup.events" 2>/dev/null; do sleep 0.02; i=$((i+1)); done
else
  for p in /proc/[0-9]*; do
    c=$(readlink "$p/cwd" 2>/dev/null)
    case "$c" in "$ws"|"$ws"/*) kill -9 "${p#/proc/}" 2>/dev/null; continue;; esac
    tr '\0' '\n' < "$p/environ" 2>/dev/null | grep -qxF "HOME=$ws" && kill -9 "${p#/proc/}" 2>/dev/null
  done
fi
if [ "$4" = remove ]; then chmod -R u+rwx "$ws" 2>/dev/null; rm -rf "$ws"; fi
if [ -n "$cg" ]; then rmdir "$cg"/* 2>/dev/null; rmdir "$cg" 2>/dev/null; fi
rm -f "$5"
"#;

/// The name every watchdog carries as its `$0` (visible in `ps`).
const NAME: &str = "envrt-local-expiry";

/// Where the watchdog of a lease records its process group id.
pub(crate) fn pid_file(root: &Path, lease_dir_name: &str) -> PathBuf {
    root.join(format!(".watchdog-{lease_dir_name}"))
}

/// What a watchdog needs to know.
pub(crate) struct Watch<'a> {
    /// When the lease expires.
    pub(crate) at: Timestamp,
    /// The lease's cgroup, when the driver contains commands in cgroups.
    pub(crate) cgroup: Option<&'a Path>,
    /// The lease's workspace.
    pub(crate) workspace: &'a Path,
    /// Whether the workspace is removed at expiry (every policy but `reuse_by_environment`).
    pub(crate) remove: bool,
    /// The watchdog's pid file.
    pub(crate) pid_file: &'a Path,
}

/// Starts the watchdog of a lease. The child is not waited for: tokio reaps it in the
/// background once it exits, and once the driver's process is gone, whoever inherits it.
pub(crate) fn start(watch: &Watch<'_>) -> Result<(), DriverError> {
    let left = watch.at.0.saturating_sub(Timestamp::now().0);
    let seconds = format!("{}.{:03}", left / 1000, left % 1000);
    let text = |p: &Path| p.to_str().map(str::to_owned).unwrap_or_default();
    let mut command = tokio::process::Command::new("/bin/sh");
    // the watchdog outlives calls: it holds nothing of the host program's but stdio
    crate::process::fds::inherit_only(command.as_std_mut(), &[]);
    let child = command
        .arg("-c")
        .arg(SCRIPT)
        .arg(NAME)
        .arg(seconds)
        .arg(watch.cgroup.map(text).unwrap_or_default())
        .arg(text(watch.workspace))
        .arg(if watch.remove { "remove" } else { "keep" })
        .arg(text(watch.pid_file))
        .process_group(0)
        .env_clear()
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| DriverError::io("cannot start the lease's expiry watchdog", e))?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or_default();
    // The start time is there from the fork on (the command line only once exec is done),
    // so it is what tells this watchdog from a later process with the same pid.
    let record = match start_time(pid) {
        Some(start) => format!("{pid} {start}"),
        None => pid.to_string(),
    };
    if let Err(e) = std::fs::write(watch.pid_file, record) {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        return Err(DriverError::io(
            format!("cannot record the expiry watchdog in {}", watch.pid_file.display()),
            e,
        ));
    }
    Ok(())
}

/// Ends the lease's watchdog, if it has one that is still waiting, and forgets it.
pub(crate) fn stop(pid_file: &Path, workspace: &Path) {
    let Ok(text) = std::fs::read_to_string(pid_file) else {
        return;
    };
    let mut fields = text.split_whitespace();
    let pid = fields.next().and_then(|p| p.parse::<i32>().ok()).unwrap_or(0);
    let recorded_start = fields.next().and_then(|s| s.parse::<u64>().ok());
    let ours = match recorded_start {
        Some(start) => start_time(pid) == Some(start),
        None => is_watchdog_of(pid, workspace),
    };
    if pid > 0 && ours {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let _ = std::fs::remove_file(pid_file);
}

/// The start time of process `pid` (clock ticks since boot, field 22 of its `stat`).
pub(crate) fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(22 - 3).and_then(|t| t.parse().ok())
}

/// Whether process `pid` is a watchdog for `workspace` (not an unrelated process that
/// reused the pid).
fn is_watchdog_of(pid: i32, workspace: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    args.get(3) == Some(&NAME.as_bytes()) && args.get(6) == Some(&workspace.as_os_str().as_encoded_bytes())
}
