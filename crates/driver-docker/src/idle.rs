//! Idle timeouts of Docker leases (contract section 8, "Idle timeout and keep-alive"),
//! enforced as the expiry is on a local engine: by a detached host watchdog that kills
//! the container's init, so a lease whose holder was killed still ends.
//!
//! Arming a lease's idle timeout creates its activity stamp `{tmp}/envrt-docker-idle/{id}`
//! (`{id}` the container's full id; the directory is root's, mode 0700, never mounted into
//! a container, so nothing in the lease can touch it) and starts the watchdog: `/bin/sh`
//! running [`SCRIPT`] in a process group of its own, `$0` `envrt-docker-idle`, with the
//! container id, its init's and its main process's host pids as arguments. The stamp's
//! modification time is the last activity; it holds `paused` while the lease is paused
//! (the facade's touch, [`touch_stamp`]). The watchdog sleeps until the stamp could be due
//! (10 s at most, then it checks that the init is still the container's and exits when
//! not). A stamp is due once its time is the timeout plus 2 s behind (whole seconds; the
//! facade touches at most once a second). A due stamp that holds `paused`, or a container
//! running any process but its init, its main process and the supervisor
//! (`/.envrt/agent`: the lease's `envrt-agent` and its egress forwarder) counts as
//! activity and is reset: a command from `execute`, a spawned process, a duplex channel
//! (an exec attached to its reader) and anything they left running. Otherwise the
//! watchdog removes the stamp (so the facade learns that the lease ended), kills the
//! init and thaws its freezer as the expiry watchdog does; the container stops and the
//! engine removes it (`AutoRemove`, every policy but `reuse_by_environment`, whose
//! container stays stopped as its release leaves it).
//!
//! With a remote engine the host sees no process of the container, so arming is refused
//! ([`REMOTE`]). Removing a container (release, destroy, `gc`) and a
//! `reuse_by_environment` release end its watchdog and remove its stamp.

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use envrt_driver_api::driver::touch_stamp;
use envrt_driver_api::{DriverError, IdleClock, IdleTimeout, LeaseContext, OnIdle};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::DockerDriver;

/// `$1` the container's full id, `$2` its init's host pid, `$3` its main process's host
/// pid, `$4` the idle seconds, `$5` the stamp.
const SCRIPT: &str = r#"id="$1"; init="$2"; main="$3"; idle="$4"; st="$5"
mine() { grep -q "$id" "/proc/$init/cgroup" 2>/dev/null; }
while :; do
  mine || exit 0
  last=$(stat -c %Y "$st" 2>/dev/null) || exit 0
  left=$(( last + idle + 2 - $(date +%s) ))
  if [ "$left" -gt 0 ]; then [ "$left" -gt 10 ] && left=10; sleep "$left"; continue; fi
  if [ -s "$st" ]; then touch -c "$st"; continue; fi
  busy=
  for f in $(grep -l "$id" /proc/[0-9]*/cgroup 2>/dev/null); do
    p=${f#/proc/}; p=${p%/cgroup}
    if [ "$p" = "$init" ] || [ "$p" = "$main" ]; then continue; fi
    [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = /.envrt/agent ] && continue
    grep -q '^State:[[:space:]]*Z' "/proc/$p/status" 2>/dev/null && continue
    busy=1; break
  done
  if [ -n "$busy" ]; then touch -c "$st"; continue; fi
  mine || exit 0
  rm -f "$st"
  m='s/^[^ ]* [^ ]* [^ ]* [^ ]* \([^ ]*\) .* - '
  fz=$(sed -n "${m}cgroup [^ ]* [^ ]*freezer.*/\1/p" /proc/self/mountinfo | head -n 1)
  u2=$(sed -n "${m}cgroup2 .*/\1/p" /proc/self/mountinfo | head -n 1)
  f=$(sed -n 's/^[0-9]*:freezer:\(.*\)/\1/p' "/proc/$init/cgroup")
  u=$(sed -n 's/^0::\(.*\)/\1/p' "/proc/$init/cgroup")
  kill -KILL "$init"
  [ -n "$fz" ] && [ -n "$f" ] && echo THAWED > "$fz$f/freezer.state" 2>/dev/null
  [ -n "$u2" ] && [ -n "$u" ] && echo 0 > "$u2$u/cgroup.freeze" 2>/dev/null
  exit 0
done
"#;

/// The `$0` of every idle watchdog (visible in `ps`, followed by the container id).
pub(crate) const WATCHDOG_NAME: &str = "envrt-docker-idle";

/// The refusal of an idle timeout where no host watchdog could enforce it.
pub(crate) const REMOTE: &str =
    "the Docker driver arms an idle timeout only on a local engine, where a host watchdog ends the idle container";

/// The refusal of `on_idle = "pause"` (not built on Docker yet).
pub(crate) const NO_PAUSE: &str =
    "the Docker driver does not pause an idle lease yet (on_idle = \"pause\"); its idle timeout ends the lease";

/// The shortest and longest idle timeout the Docker driver arms.
const MIN: Duration = Duration::from_secs(1);
const MAX: Duration = Duration::from_secs(30 * 24 * 3600);

/// The directory of the stamps.
fn stamps() -> PathBuf {
    std::env::temp_dir().join("envrt-docker-idle")
}

fn stamp(container: &str) -> PathBuf {
    stamps().join(container)
}

/// A full container id: the only thing that names a stamp (no path tricks).
fn full_id(container: &str) -> bool {
    container.len() == 64 && container.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The host pids of the idle watchdogs of `container`.
fn watchdogs(container: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            (args.len() > 4 && args[3] == WATCHDOG_NAME.as_bytes() && args[4] == container.as_bytes()).then_some(pid)
        })
        .collect()
}

/// Ends the idle watchdog of `container` (each leads its own process group) and removes
/// its stamp; nothing armed is fine.
pub(crate) fn stop(container: &str) {
    if !full_id(container) {
        return;
    }
    for pid in watchdogs(container) {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let _ = std::fs::remove_file(stamp(container));
}

/// The host pid of the container's main process: the child of its init with the lowest
/// pid in the container (docker-init forks it before anything else runs there).
pub(crate) fn main_process(init: i64) -> Option<i64> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let parent = format!("PPid:\t{init}");
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i64>().ok()?;
            let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
            if !status.lines().any(|l| l == parent) {
                return None;
            }
            let ns = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))?
                .split_whitespace()
                .last()?
                .parse::<u64>()
                .ok()?;
            Some((ns, pid))
        })
        .min()
        .map(|(_, pid)| pid)
}

fn ended(id: &str) -> DriverError {
    DriverError::invalid(format!(
        "lease {id} has no idle timeout armed (or it has ended the lease)"
    ))
}

#[async_trait]
impl IdleTimeout for DockerDriver {
    async fn arm_idle(&self, context: &LeaseContext, idle: Duration, on_idle: OnIdle) -> Result<(), DriverError> {
        if !(MIN..=MAX).contains(&idle) {
            return Err(DriverError::invalid(format!(
                "the Docker driver's idle timeout lies between 1 s and 30 days, not {} ms",
                idle.as_millis()
            )));
        }
        if on_idle == OnIdle::Pause {
            return Err(DriverError::invalid(NO_PAUSE));
        }
        let container = Self::container_of(context)?;
        let inspected = self.inspect_leased(container).await?;
        let id = inspected.id.unwrap_or_else(|| container.to_owned());
        let init = inspected.state.and_then(|s| s.pid).filter(|pid| *pid > 0);
        let (Some(init), true) = (init, full_id(&id) && crate::process::hostkill::sees(&id)) else {
            return Err(DriverError::invalid(REMOTE));
        };
        let main = main_process(init).ok_or_else(|| {
            DriverError::other(format!("cannot find the main process of container {id} on this host"))
        })?;
        stop(&id);
        let dir = stamps();
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| DriverError::io(format!("cannot create {}", dir.display()), e))?;
        }
        let stamp = stamp(&id);
        std::fs::write(&stamp, b"")
            .map_err(|e| DriverError::io(format!("cannot create the idle stamp {}", stamp.display()), e))?;
        let spawned = tokio::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(SCRIPT)
            .arg(WATCHDOG_NAME)
            .arg(&id)
            .arg(init.to_string())
            .arg(main.to_string())
            .arg(idle.as_secs_f64().ceil().to_string())
            .arg(&stamp)
            .process_group(0)
            .current_dir("/")
            .env_clear()
            .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(false)
            .spawn();
        if let Err(e) = spawned {
            let _ = std::fs::remove_file(&stamp);
            return Err(DriverError::io("cannot start the lease's idle watchdog", e));
        }
        Ok(())
    }

    async fn touch_idle(&self, context: &LeaseContext, paused: bool) -> Result<IdleClock, DriverError> {
        let container = Self::container_of(context)?;
        if !full_id(container) {
            return Err(ended(&context.lease.id));
        }
        let stamp = stamp(container);
        match touch_stamp(&stamp, paused) {
            Ok(Some(clock)) => Ok(clock),
            // A missing stamp means the watchdog has ended the lease.
            Ok(None) => Err(ended(&context.lease.id)),
            Err(e) => Err(DriverError::io(
                format!("cannot touch the idle stamp {}", stamp.display()),
                e,
            )),
        }
    }
}
