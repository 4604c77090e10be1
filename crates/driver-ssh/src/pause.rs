//! Pause and unpause of an SSH lease (contract section 8, "Pause and unpause"): one
//! remote `sh` script sends `SIGSTOP` (or `SIGCONT`) to everything the lease runs, found
//! as release finds it ([`remote::kill_lease`]): the process supervisor (stopped first,
//! so it starts nothing more) and every descendant it has (it is a subreaper, so
//! `setsid` escapees stay below it), everything of each recorded execute run (its process
//! group, session and the holders of its descriptors), and every process of the remote
//! user whose working directory lies in the lease directory or whose `HOME` is the
//! workspace. A pause scans twice, for what forked while the first scan ran. Release and
//! destroy `SIGKILL` stopped processes as they do running ones. The driver bounds no
//! lease (no expiry), so there is no expiry to keep running.

use async_trait::async_trait;
use envrt_driver_api::{DriverError, LeaseContext, PauseLease};

use crate::SshDriver;
use crate::remote::{KILL_FN, quote};

/// The remote script that sends `signal` (`STOP` or `CONT`) to everything the lease at
/// `lease_dir` runs.
fn signal_lease(lease_dir: &str, signal: &str) -> String {
    format!(
        r#"{KILL_FN}d={d} g={signal}
envrt_agent_signal() {{
  a=$(cat "$d/agent.pid" 2>/dev/null) || return 0
  case $a in ''|*[!0-9]*) return 0 ;; esac
  t=$(readlink "/proc/$a/cwd" 2>/dev/null) || return 0
  case "$t/" in "$d"/*) ;; *) return 0 ;; esac
  kill -"$g" "$a" 2>/dev/null
  for q in $(cat /proc/[0-9]*/stat 2>/dev/null | awk -v a="$a" '{{ x = $0; sub(/.*\) /, "", x); split(x, f, " "); pp[$1] = f[2] }}
    END {{ s[a] = 1; do {{ c = 0; for (p in pp) if (!(p in s) && (pp[p] in s)) {{ s[p] = 1; c = 1 }} }} while (c); for (p in s) if (p != a) print p }}'); do
    kill -"$g" "$q" 2>/dev/null
  done
}}
for i in 1 2; do
  [ -d /proc/self ] && envrt_agent_signal
  for f in "$d"/run/*.pid; do
    [ -f "$f" ] || continue
    p=$(cat "$f" 2>/dev/null) && [ -n "$p" ] && envrt_kill "$g" "$p" "${{f%.pid}}"
  done
  if [ -d /proc/self ]; then
    for c in /proc/[0-9]*/cwd; do
      q=${{c#/proc/}}; q=${{q%/cwd}}
      [ "$q" = "$$" ] && continue
      t=$(readlink "$c" 2>/dev/null) || continue
      case "$t/" in "$d"/*) kill -"$g" "$q" 2>/dev/null; continue ;; esac
      tr '\0' '\n' <"/proc/$q/environ" 2>/dev/null | grep -Fqx "HOME=$d/work" && kill -"$g" "$q" 2>/dev/null
    done
  fi
  [ "$g" = STOP ] || break
done
exit 0"#,
        d = quote(lease_dir),
    )
}

impl SshDriver {
    async fn signal_lease(&self, context: &LeaseContext, signal: &str) -> Result<(), DriverError> {
        let place = self.find(context).await?.ok_or_else(|| DriverError::ResourceGone {
            id: context.lease.id.clone(),
        })?;
        let what = if signal == "STOP" {
            "pause the lease"
        } else {
            "unpause the lease"
        };
        place.host.run_ok(what, &signal_lease(&place.lease_dir, signal)).await?;
        Ok(())
    }
}

#[async_trait]
impl PauseLease for SshDriver {
    async fn pause_lease(&self, context: &LeaseContext) -> Result<(), DriverError> {
        self.signal_lease(context, "STOP").await
    }

    async fn unpause_lease(&self, context: &LeaseContext) -> Result<(), DriverError> {
        self.signal_lease(context, "CONT").await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_quotes_the_directory_and_names_the_signal() {
        let script = signal_lease("/r/lease-it's", "STOP");
        assert!(script.contains("d='/r/lease-it'\\''s' g=STOP\n"), "{script}");
    }
}
