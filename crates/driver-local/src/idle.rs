//! Idle timeouts of local leases (contract section 8, "Idle timeout and keep-alive").
//!
//! Arming a lease's idle timeout creates its activity stamp `{root}/.idle-lease-{id}` and
//! starts a detached idle watchdog, `/bin/sh` in a process group of its own started by
//! the driver's process (never inside the lease's cgroup), its process group id and start
//! time in `{root}/.idle-watchdog-lease-{id}`. The stamp's modification time is the last
//! activity; it holds `paused` while the lease is paused. The watchdog reads the stamp's
//! time (a `stat` and a `date`) and sleeps until the stamp could be due, a minute at
//! most; only a due stamp makes it look further. The time has whole seconds and the
//! facade touches at most once a second, so a stamp is due once its time is at least the
//! timeout plus 2 s behind: a lease ends no sooner than its idle timeout, and about 3 s
//! later at most, after its last activity. A paused stamp, or a process of the lease
//! other than its `envrt-agent` (in the lease's cgroups, or tied to the workspace as
//! release's scan finds them), counts as activity and resets the stamp. Otherwise the
//! watchdog removes the stamp (so the facade learns that the lease ended) and ends the
//! lease exactly as the expiry watchdog does at the expiry
//! ([`expiry::SCRIPT`](crate::expiry) with no wait). Release, destroy and `gc` end the
//! idle watchdog with the expiry one; it also exits by itself at its next look (within a
//! minute) once the workspace or the stamp is gone.
//!
//! Touching the stamp is one `stat`, and, at most once a second (or when the paused state
//! changes), an `open` and a `futimens`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use envrt_driver_api::driver::touch_stamp;
use envrt_driver_api::{DriverError, IdleClock, IdleTimeout, LeaseContext, LeasePolicy, OnIdle};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::LocalDriver;
use crate::workspace::lease_dir_name;

/// The watchdog's loop: `$1` idle seconds, `$2` the stamp, `$3` the workspace, `$4` the
/// lease's cgroup (empty without cgroups), `$5` `remove` or `keep`, `$6` its pid file,
/// `$7` the expiry script it ends the lease with, `$8` `release` or `pause` (what an idle
/// lease gets: with `pause` it writes `idle-paused` to the stamp, freezes the cgroup and
/// stops every process tied to the workspace, as `pause` does, and goes on watching).
const SCRIPT: &str = r#"idle="$1"; st="$2"; ws="$3"; cg="$4"
while :; do
  if [ ! -d "$ws" ] || ! last=$(stat -c %Y "$st" 2>/dev/null); then rm -f "$6"; exit 0; fi
  left=$(( last + idle + 2 - $(date +%s) ))
  if [ "$left" -gt 0 ]; then [ "$left" -gt 60 ] && left=60; sleep "$left"; continue; fi
  if [ -s "$st" ]; then touch -c "$st"; continue; fi
  busy=
  if [ -n "$cg" ]; then
    for p in $(cat "$cg/cgroup.procs" "$cg"/*/cgroup.procs 2>/dev/null); do
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = envrt-agent ] || { busy=1; break; }
    done
  fi
  if [ -z "$busy" ]; then
    for p in /proc/[0-9]*; do
      c=$(readlink "$p/cwd" 2>/dev/null)
      case "$c" in "$ws"|"$ws"/*) ;; *) tr '\0' '\n' < "$p/environ" 2>/dev/null | grep -qxF "HOME=$ws" || continue;; esac
      [ "$(cat "$p/comm" 2>/dev/null)" = envrt-agent ] || { busy=1; break; }
    done
  fi
  if [ -n "$busy" ]; then touch -c "$st"; continue; fi
  if [ "$8" = pause ]; then
    [ -f "$st" ] || continue
    printf idle-paused > "$st"
    [ -n "$cg" ] && echo 1 > "$cg/cgroup.freeze" 2>/dev/null
    for p in /proc/[0-9]*; do
      c=$(readlink "$p/cwd" 2>/dev/null)
      case "$c" in "$ws"|"$ws"/*) ;; *) tr '\0' '\n' < "$p/environ" 2>/dev/null | grep -qxF "HOME=$ws" || continue;; esac
      kill -STOP "${p#/proc/}" 2>/dev/null
    done
    continue
  fi
  rm -f "$st"
  exec /bin/sh -c "$7" envrt-local-expiry 0 "$cg" "$ws" "$5" "$6"
done
"#;

/// The name the watchdog carries as its `$0` (visible in `ps`).
const NAME: &str = "envrt-local-idle";

/// The shortest and longest idle timeout the local driver arms.
const MIN: Duration = Duration::from_secs(1);
const MAX: Duration = Duration::from_secs(30 * 24 * 3600);

fn stamp(root: &Path, name: &str) -> PathBuf {
    root.join(format!(".idle-{name}"))
}

fn pid_file(root: &Path, name: &str) -> PathBuf {
    root.join(format!(".idle-watchdog-{name}"))
}

impl LocalDriver {
    /// Ends the lease's idle watchdog, if any, and removes its stamp.
    pub(crate) fn stop_idle(&self, name: &str) {
        let file = pid_file(self.root(), name);
        if let Ok(text) = std::fs::read_to_string(&file) {
            let mut fields = text.split_whitespace();
            let pid = fields.next().and_then(|p| p.parse::<i32>().ok()).unwrap_or(0);
            let start = fields.next().and_then(|s| s.parse::<u64>().ok());
            if pid > 0 && start.is_some() && crate::expiry::start_time(pid) == start {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        let _ = std::fs::remove_file(&file);
        let _ = std::fs::remove_file(stamp(self.root(), name));
    }
}

fn ended(id: &str) -> DriverError {
    DriverError::invalid(format!(
        "lease {id} has no idle timeout armed (or it has ended the lease)"
    ))
}

#[async_trait]
impl IdleTimeout for LocalDriver {
    async fn arm_idle(&self, context: &LeaseContext, idle: Duration, on_idle: OnIdle) -> Result<(), DriverError> {
        if !(MIN..=MAX).contains(&idle) {
            return Err(DriverError::invalid(format!(
                "the local driver's idle timeout lies between 1 s and 30 days, not {} ms",
                idle.as_millis()
            )));
        }
        let workspace = self.live_workspace(context)?;
        let name = lease_dir_name(&context.lease.id)?;
        self.stop_idle(&name);
        let stamp = stamp(self.root(), &name);
        let pid_file = pid_file(self.root(), &name);
        std::fs::write(&stamp, b"")
            .map_err(|e| DriverError::io(format!("cannot create the idle stamp {}", stamp.display()), e))?;
        let text = |p: &Path| p.to_str().map(str::to_owned).unwrap_or_default();
        let cgroup = self.containment_mode().lease_dir(&context.lease.id);
        let remove = context.lease.lease_policy != LeasePolicy::ReuseByEnvironment;
        let mut command = tokio::process::Command::new("/bin/sh");
        crate::process::fds::inherit_only(command.as_std_mut(), &[]);
        let spawned = command
            .arg("-c")
            .arg(SCRIPT)
            .arg(NAME)
            .arg(idle.as_secs_f64().ceil().to_string())
            .arg(text(&stamp))
            .arg(text(&workspace))
            .arg(cgroup.as_deref().map(text).unwrap_or_default())
            .arg(if remove { "remove" } else { "keep" })
            .arg(text(&pid_file))
            .arg(crate::expiry::SCRIPT)
            .arg(match on_idle {
                OnIdle::Release => "release",
                OnIdle::Pause => "pause",
            })
            .process_group(0)
            .current_dir("/")
            .env_clear()
            .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_file(&stamp);
                return Err(DriverError::io("cannot start the lease's idle watchdog", e));
            }
        };
        let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or_default();
        let record = format!("{pid} {}", crate::expiry::start_time(pid).unwrap_or_default());
        if let Err(e) = std::fs::write(&pid_file, record) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            let _ = std::fs::remove_file(&stamp);
            return Err(DriverError::io(
                format!("cannot record the idle watchdog in {}", pid_file.display()),
                e,
            ));
        }
        Ok(())
    }

    async fn touch_idle(&self, context: &LeaseContext, paused: bool) -> Result<IdleClock, DriverError> {
        let name = lease_dir_name(&context.lease.id)?;
        let stamp = stamp(self.root(), &name);
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
