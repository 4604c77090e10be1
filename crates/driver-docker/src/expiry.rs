//! Expiry the command cannot evade, for a local engine: a detached host watchdog per
//! expiring lease that kills the container's init at the expiry (the container then stops
//! and, unless the policy keeps it, the engine removes it), whether or not the program
//! that took the lease is still alive. The command cannot reach it: the watchdog is a host
//! process outside the container's pid namespace. The in-container `sleep` stays as a
//! second line (and the only one with a remote engine), but a command running as the
//! container's user can stop that `sleep` with `SIGSTOP`.
//!
//! The watchdog is `/bin/sh` running [`SCRIPT`] in a process group of its own, with the
//! container's full id and its init's host pid as arguments. Once a second it checks that
//! this pid still is the container's (its cgroup names the container): when the container
//! has stopped or is gone (a release or destroy), it exits, so no watchdog outlives its
//! container by more than a second; the pid is checked once more right before the kill.
//! Acquire starts it; resume starts it again when the container's init has no watchdog (a
//! reused lease's container is stopped at release, and started with a new init at resume).

use envrt_driver_api::Timestamp;

use crate::engine::Engine;

/// `$1` the container's full id, `$2` its init's host pid, `$3` the seconds left until the
/// expiry, counted from the watchdog's start on the boot clock (`/proc/uptime`, which no
/// change of the wall clock moves and which runs on through a suspend), never against the
/// wall clock: a wall clock stepped forward or back (NTP, a hand-set date, the host
/// program's own faked clock) neither ends the lease early nor keeps it past its expiry.
/// A paused container's init is frozen and a `SIGKILL` lands only once it thaws (always
/// so under a cgroup v1 freezer), so after the kill the watchdog thaws the init's freezer
/// cgroup (v1 `freezer.state`) and its cgroup v2 (`cgroup.freeze`), found through
/// `/proc/$2/cgroup` and the mounts in `/proc/self/mountinfo`.
const SCRIPT: &str = r#"mine() { grep -q "$1" "/proc/$2/cgroup" 2>/dev/null; }
up() { read -r u _ < /proc/uptime; echo "${u%%.*}"; }
end=$(( $(up) + $3 + 1 ))
while [ "$(up)" -lt "$end" ]; do mine "$1" "$2" || exit 0; sleep 1; done
mine "$1" "$2" || exit 0
m='s/^[^ ]* [^ ]* [^ ]* [^ ]* \([^ ]*\) .* - '
fz=$(sed -n "${m}cgroup [^ ]* [^ ]*freezer.*/\1/p" /proc/self/mountinfo | head -n 1)
u2=$(sed -n "${m}cgroup2 .*/\1/p" /proc/self/mountinfo | head -n 1)
f=$(sed -n 's/^[0-9]*:freezer:\(.*\)/\1/p' "/proc/$2/cgroup")
u=$(sed -n 's/^0::\(.*\)/\1/p' "/proc/$2/cgroup")
kill -KILL "$2"
[ -n "$fz" ] && [ -n "$f" ] && echo THAWED > "$fz$f/freezer.state" 2>/dev/null
[ -n "$u2" ] && [ -n "$u" ] && echo 0 > "$u2$u/cgroup.freeze" 2>/dev/null
exit 0
"#;

/// The `$0` of every watchdog (visible in `ps`, followed by the container id).
const NAME: &str = "envrt-docker-expiry";

/// Starts the watchdog of `container` whose init has host pid `init_pid`, firing `seconds`
/// from now (by the boot clock); its pid. The child is not waited for: tokio reaps it once it exits, and once
/// the driver's process is gone, whoever inherits it.
pub(crate) fn start(container: &str, init_pid: i64, seconds: u64) -> std::io::Result<Option<u32>> {
    tokio::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg(NAME)
        .arg(container)
        .arg(init_pid.to_string())
        .arg(seconds.to_string())
        .process_group(0)
        .env_clear()
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(false)
        .spawn()
        .map(|child| child.id())
}

/// Whether a watchdog of `container` whose init has host pid `init_pid` already runs (a
/// lease resumed again while its container kept running keeps its one watchdog).
fn watched(container: &str, init_pid: i64) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    let pid = init_pid.to_string();
    entries.flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline")).is_ok_and(|cmdline| {
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.len() > 5 && args[3] == NAME.as_bytes() && args[4] == container.as_bytes() && args[5] == pid.as_bytes()
        })
    })
}

/// Ends every expiry watchdog of `container` but the one whose pid is `keep` (extend,
/// once the watchdog for the new time runs). Each runs in a process group of its own,
/// which is killed whole.
pub(crate) fn stop_others(container: &str, keep: u32) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(watchdog) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if watchdog as u32 == keep {
            continue;
        }
        let other = std::fs::read(entry.path().join("cmdline")).is_ok_and(|cmdline| {
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.len() > 6 && args[3] == NAME.as_bytes() && args[4] == container.as_bytes()
        });
        if other {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(watchdog), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// With a local engine, makes sure a host watchdog ends `container` at `at` even if its
/// command stopped the in-container `sleep`: starts one unless one already watches the
/// container's current init (a resumed lease whose container was stopped and started
/// again has a new init, which no watchdog watches yet). With a remote engine the
/// in-container `sleep` alone keeps the expiry.
pub(crate) async fn watch(engine: &Engine, container: &str, at: Timestamp) {
    let init = match engine.retry(|| engine.docker.inspect_container(container, None)).await {
        Ok(inspected) => inspected.state.and_then(|s| s.pid).filter(|pid| *pid > 0),
        Err(error) => {
            tracing::warn!(container, %error, "cannot read the container's init pid for its expiry watchdog");
            None
        }
    };
    if let Some(pid) = init
        && crate::process::hostkill::sees(container)
        && !watched(container, pid)
        && let Err(error) = start(container, pid, seconds_until(at))
    {
        tracing::warn!(container, %error, "cannot start the container's expiry watchdog");
    }
}

/// Whole seconds from now to `at` by this program's wall clock, rounded up (the one
/// reading of the wall clock a watchdog takes; the boot clock counts them down).
pub(crate) fn seconds_until(at: Timestamp) -> u64 {
    at.0.saturating_sub(Timestamp::now().0).div_ceil(1000)
}

/// Whether a host watchdog watches `container`'s current init (starting one first where
/// [`watch`] would): what lets a paused container, whose in-container `sleep` is frozen
/// with it, still end at its expiry.
pub(crate) async fn guarded(engine: &Engine, container: &str, at: Timestamp) -> bool {
    watch(engine, container, at).await;
    match engine.retry(|| engine.docker.inspect_container(container, None)).await {
        Ok(inspected) => inspected
            .state
            .and_then(|s| s.pid)
            .filter(|pid| *pid > 0)
            .is_some_and(|pid| watched(container, pid)),
        Err(_) => false,
    }
}
