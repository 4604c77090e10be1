//! The remote side: every command the driver asks `sshd` to run, as POSIX `sh` text. The
//! login shell of the remote user must read POSIX `sh` (`sh`, `dash`, `bash`, `ksh`); the
//! remote host needs `env`, `head`, `setsid`, `tar`, `readlink -f`, `awk`, `tr`, `grep` and
//! `sleep` with fractions (GNU coreutils or BusyBox), and `flock` for persistent process
//! sessions (without it a host does not get them).
//!
//! Nothing secret is ever put in these texts: request variables travel on the channel's
//! stdin (see [`env_block`]), and command lines only carry paths, names and arguments.

use std::collections::BTreeMap;

use envrt_driver_api::EnvValue;
use envrt_driver_api::execute::is_shell_name;

/// Quotes `text` for `sh` as one word.
pub(crate) fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// The request's variables as the text the remote prologue reads from stdin: a decimal
/// length line, then that many bytes of `export NAME='value'` lines (evaluated by the
/// prologue, so the values never appear on a command line).
pub(crate) fn env_block(env: &BTreeMap<String, EnvValue>) -> Vec<u8> {
    let mut body = String::new();
    for (name, value) in env {
        body.push_str("export ");
        body.push_str(name);
        body.push('=');
        body.push_str(&quote(value.expose()));
        body.push('\n');
    }
    let mut out = format!("{}\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// A `sh` function, `envrt_kill SIGNAL PID RUN`, that sends SIGNAL to everything of one
/// command's run: its process group (PID, the command's pid); where there is a `/proc`,
/// also every process of the command's session (a job-control shell's jobs keep it) and
/// every process holding the command's stdin, stdout or stderr as one of its own
/// descriptors (a child that moved into a new session with `setsid`, keeping the output
/// open). The descriptors are recorded by the prologue in `RUN.fds`: its first line is the
/// pid of `sshd`'s session process, which holds the other end of those pipes and is never
/// signalled.
pub(crate) const KILL_FN: &str = r#"envrt_kill() {
  kill -"$1" "-$2" 2>/dev/null
  [ -d /proc/self ] || return 0
  for q in $(cat /proc/[0-9]*/stat 2>/dev/null | awk -v p="$2" '{ x = $0; sub(/.*\) /, "", x); split(x, a, " "); if (a[3] == p || a[4] == p) print $1 }'
    [ -s "$3.fds" ] && ls -l /proc/[0-9]*/fd 2>/dev/null | awk 'NR == FNR { if (FNR == 1) s = $0; else t[$0] = 1; next }
      /^\/proc\/[0-9]+\/fd:$/ { d = substr($0, 7); sub(/\/fd:$/, "", d); next }
      ($NF in t) && d != "" && d != s { print d }' "$3.fds" -); do
    kill -"$1" "$q" 2>/dev/null
  done
  return 0
}
"#;

/// Where each account keeps the process supervisor's binaries and the leases' supervisor
/// sockets, relative to the remote home (`0700`). The sockets are not in the lease
/// directories because a unix socket's path is bounded to 107 bytes, and a lease directory
/// under a deep root (the test roots are) already takes about that much.
pub(crate) const AGENT_CACHE: &str = ".cache/envrt-agent";

/// The first 16 hex digits of the SHA-256 of `bytes`: a short, stable name.
pub(crate) fn short_hash(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The supervisor socket of the lease at `lease_dir`, relative to the remote home:
/// `{AGENT_CACHE}/{hash of the lease directory}.sock`.
pub(crate) fn agent_socket(lease_dir: &str) -> String {
    format!("{AGENT_CACHE}/{}.sock", short_hash(lease_dir.as_bytes()))
}

/// A `sh` function, `envrt_agent_kill LEASE_DIR`, that kills the lease's process
/// supervisor and every process below it. The supervisor runs with `--subreaper`, so
/// everything it started stays its descendant however it forks or whatever session it
/// makes (`setsid` escapees included) until the supervisor is gone: it is stopped first
/// (it can start nothing more), its descendants (from `/proc`'s parent links) are killed
/// twice (for what forked meanwhile, which the still-living subreaper collects), then the
/// supervisor. The pid in `agent.pid` is only trusted while that process's working
/// directory lies in the lease directory (it is the workspace): a recycled pid is left
/// alone.
pub(crate) const AGENT_KILL_FN: &str = r#"envrt_agent_kill() {
  a=$(cat "$1/agent.pid" 2>/dev/null) || return 0
  case $a in ''|*[!0-9]*) return 0 ;; esac
  t=$(readlink "/proc/$a/cwd" 2>/dev/null) || return 0
  case "$t/" in "$1"/*) ;; *) return 0 ;; esac
  kill -STOP "$a" 2>/dev/null
  for i in 1 2; do
    for q in $(cat /proc/[0-9]*/stat 2>/dev/null | awk -v a="$a" '{ x = $0; sub(/.*\) /, "", x); split(x, f, " "); pp[$1] = f[2] }
      END { s[a] = 1; do { c = 0; for (p in pp) if (!(p in s) && (pp[p] in s)) { s[p] = 1; c = 1 } } while (c); for (p in s) if (p != a) print p }'); do
      kill -KILL "$q" 2>/dev/null
    done
  done
  kill -KILL "$a" 2>/dev/null
  return 0
}
"#;

/// The watchdog each command gets (arguments: the command's pid, which is its process
/// group and session; the pid of the `sshd` session that runs it; the run file prefix).
/// It lives in a session of its own, polls, and kills everything of the command's run
/// ([`KILL_FN`], twice, for what forked meanwhile) when the command has ended (whatever
/// it left behind: a background child holding stdout, in its group or a new session) or
/// when `sshd`'s session is gone (the connection broke). Then it removes the run files.
fn watchdog() -> String {
    format!(
        r#"{KILL_FN}p=$1 s=$2 r=$3
while kill -0 "$p" 2>/dev/null; do
  kill -0 "$s" 2>/dev/null || break
  sleep 0.2
done
envrt_kill KILL "$p" "$r"; envrt_kill KILL "$p" "$r"
rm -f "$r.pid" "$r.in" "$r.fds""#
    )
}

/// Exit code of a sync's remote side when the lease's workspace is gone.
pub(crate) const GONE_CODE: i32 = 124;

/// The error of a lease whose remote directory was deleted behind envrt's back, named by
/// its provider lease id (the lease directory's name). `dir` is the lease directory or
/// its workspace (`{lease dir}/work`).
pub(crate) fn lease_gone(dir: &str) -> envrt_driver_api::DriverError {
    let lease_dir = dir.strip_suffix("/work").unwrap_or(dir);
    envrt_driver_api::DriverError::ResourceGone {
        id: lease_dir.rsplit('/').next().unwrap_or_default().to_owned(),
    }
}

/// Exit code of the prologue when the requested cwd is refused; the reason is the first
/// line of stderr ([`CWD_OUTSIDE`], [`CWD_MISSING`] or [`LEASE_GONE`]).
pub(crate) const CWD_REFUSED_CODE: i32 = 120;
/// The prologue's stderr when the cwd resolves outside the workspace.
pub(crate) const CWD_OUTSIDE: &[u8] = b"envrt-ssh: cwd outside\n";
/// The prologue's stderr when the cwd does not exist.
pub(crate) const CWD_MISSING: &[u8] = b"envrt-ssh: cwd missing\n";
/// The prologue's stderr when the lease's workspace itself is gone (deleted behind
/// envrt's back): the lease is lost, not the cwd.
pub(crate) const LEASE_GONE: &[u8] = b"envrt-ssh: lease gone\n";

/// The inner prologue, run by a clean `/bin/sh` (arguments: workspace, run file prefix,
/// cwd or empty, stdin length or `stream`, then the command and its arguments): enters the
/// cwd (refusing one that resolves outside the workspace), records the channel's
/// descriptors and `sshd`'s pid (for [`KILL_FN`]), reads the variables from stdin, records
/// its pid, starts the watchdog, and becomes the command. `sshd` is its
/// parent and put it in a session and process group of its own, so the exit code is the
/// command's own.
///
/// With a stdin length, the command reads its stdin from a FIFO fed by a background
/// feeder, which copies exactly that many bytes from the channel, then waits for the
/// channel's stdin to end: the host keeps it open until the command has ended, so its end
/// means the channel is gone (the call was dropped, the host program died, the connection
/// broke), and the feeder kills the command's whole group. With `stream` (duplex), the
/// command reads the channel's stdin itself, and its stderr is its stdout (one pipe, so
/// the channel carries both in the order the command wrote them).
fn prologue() -> String {
    format!(
        r#"w=$1 r=$2 c=$3 m=$4; shift 4
[ -d "$w" ] || {{ printf 'envrt-ssh: lease gone\n' >&2; exit {code}; }}
if [ -n "$c" ]; then
  cd -P -- "$c" 2>/dev/null || {{ printf 'envrt-ssh: cwd missing\n' >&2; exit {code}; }}
  case "$(pwd -P)/" in "$w"/*) ;; *) printf 'envrt-ssh: cwd outside\n' >&2; exit {code};; esac
else
  cd -- "$w" || exit 125
fi
unset OLDPWD
if [ -d /proc/self ]; then
  {{ echo "$PPID"; for i in 0 1 2; do t=$(readlink "/proc/$$/fd/$i" 2>/dev/null) && case $t in pipe:*|socket:*) echo "$t";; esac; done; }} >"$r.fds"
fi
IFS= read -r n || exit 125
if [ "$n" -gt 0 ]; then eval "$(head -c "$n")" || exit 125; fi
echo $$ >"$r.pid"
setsid /bin/sh -c {watchdog} envrt-ssh-watch $$ $PPID "$r" </dev/null >/dev/null 2>&1 &
case $1 in
  */*) [ -e "$1" ] || nf=1 ;;
  *) command -v -- "$1" >/dev/null 2>&1 || nf=1 ;;
esac
if [ -n "${{nf:-}}" ]; then printf 'envrt: command not found: %s\n' "$1" >&2; exit 127; fi
if [ "$m" = stream ]; then exec "$@" 2>&1; fi
mkfifo -m 600 "$r.in" || exit 125
exec 3<&0
{{ if [ "$m" -gt 0 ]; then head -c "$m"; fi >"$r.in"; rm -f "$r.in"; cat >/dev/null; kill -KILL -$$; }} <&3 >/dev/null 2>&1 &
exec "$@" <"$r.in" 3<&-"#,
        code = CWD_REFUSED_CODE,
        watchdog = quote(&watchdog()),
    )
}

/// The default `PATH` when the remote login environment has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where one command runs.
pub(crate) struct Launch<'a> {
    /// The workspace (canonical, absolute).
    pub(crate) workspace: &'a str,
    /// The run file prefix (`{lease dir}/run/{run id}`).
    pub(crate) run: &'a str,
    /// The cwd to enter, already confined lexically; `None` for the workspace.
    pub(crate) cwd: Option<&'a str>,
    /// Remote login variables passed through when set.
    pub(crate) allowlist: &'a [String],
    /// The length of the command's stdin, sent after the variables; `None` for a duplex
    /// stream.
    pub(crate) stdin_len: Option<usize>,
}

/// `env -i` with what a command sees of the remote login: the allow-listed variables that
/// are set, `PATH` (a default when unset), `HOME` = the workspace. Followed by the program.
pub(crate) fn clean_env(allowlist: &[String], workspace: &str) -> String {
    let mut out = String::from("env -i");
    let mut has_path = false;
    for name in allowlist {
        // `export` refuses anything but a shell identifier.
        if !is_shell_name(name) || name == "HOME" {
            continue;
        }
        if name == "PATH" {
            has_path = true;
            out.push_str(&format!(" \"PATH=${{PATH:-{DEFAULT_PATH}}}\""));
        } else {
            out.push_str(&format!(" ${{{name}+\"{name}=${name}\"}}"));
        }
    }
    if !has_path {
        out.push_str(&format!(" PATH={DEFAULT_PATH}"));
    }
    out.push_str(" HOME=");
    out.push_str(&quote(workspace));
    out
}

/// The text `sshd` runs for one command: the login shell replaces itself by `env -i`
/// (the remote login environment is not inherited beyond the allow-list, `PATH` and
/// `HOME` = the workspace) and a clean `/bin/sh` running [`prologue`].
pub(crate) fn launch(at: &Launch<'_>, command: &str, args: &[String]) -> String {
    let mut out = format!("exec {}", clean_env(at.allowlist, at.workspace));
    out.push_str(" /bin/sh -c ");
    out.push_str(&quote(&prologue()));
    out.push_str(" envrt-ssh ");
    out.push_str(&quote(at.workspace));
    out.push(' ');
    out.push_str(&quote(at.run));
    out.push(' ');
    out.push_str(&quote(at.cwd.unwrap_or("")));
    out.push(' ');
    match at.stdin_len {
        Some(n) => out.push_str(&n.to_string()),
        None => out.push_str("stream"),
    }
    out.push(' ');
    out.push_str(&quote(command));
    for arg in args {
        out.push(' ');
        out.push_str(&quote(arg));
    }
    out
}

/// Sends `signal` to everything of the run recorded at `run`.pid ([`KILL_FN`]), if it is
/// still there; a `KILL` twice, for what forked meanwhile.
pub(crate) fn signal_run(run: &str, signal: &str) -> String {
    let again = if signal == "KILL" {
        format!("; envrt_kill KILL \"$p\" {r}", r = quote(run))
    } else {
        String::new()
    };
    format!(
        "{KILL_FN}p=$(cat {f} 2>/dev/null) && [ -n \"$p\" ] && {{ envrt_kill {signal} \"$p\" {r}{again}; }}; exit 0",
        f = quote(&format!("{run}.pid")),
        r = quote(run),
    )
}

/// Kills every command a lease runs: first its process supervisor and everything below it
/// ([`AGENT_KILL_FN`]; its socket, pid file and log are removed), holding the lease's
/// start lock so that a spawn starting one at the same time either finishes first (and
/// its supervisor is killed) or comes after (and finds the lease gone when this is a
/// removal, which keeps the lock until the directory is gone), then everything of each
/// recorded run ([`KILL_FN`]), then
/// every process of the remote user whose working directory lies in the lease directory
/// or whose `HOME` is the workspace (what left its run altogether: a double fork into a
/// new session that closed the command's descriptors), looked up in `/proc` where there
/// is one.
pub(crate) fn kill_lease(lease_dir: &str) -> String {
    format!(
        r#"{KILL_FN}{AGENT_KILL_FN}d={d}
if [ -d "$d/work" ] && [ ! -L "$d" ] && command -v flock >/dev/null 2>&1; then exec 9>>"$d/agent.lock" && flock -w 30 9; fi
envrt_agent_kill "$d"
rm -f -- "$HOME"/{socket} "$d/agent.pid" "$d/agent.log"
for f in "$d"/run/*.pid; do
  [ -f "$f" ] || continue
  p=$(cat "$f" 2>/dev/null) && [ -n "$p" ] && envrt_kill KILL "$p" "${{f%.pid}}"
done
if [ -d /proc/self ]; then
  for c in /proc/[0-9]*/cwd; do
    q=${{c#/proc/}}; q=${{q%/cwd}}
    [ "$q" = "$$" ] && continue
    t=$(readlink "$c" 2>/dev/null) || continue
    case "$t/" in "$d"/*) kill -KILL "$q" 2>/dev/null; continue ;; esac
    tr '\0' '\n' <"/proc/$q/environ" 2>/dev/null | grep -Fqx "HOME=$d/work" && kill -KILL "$q" 2>/dev/null
  done
fi
exit 0"#,
        d = quote(lease_dir),
        socket = quote(&agent_socket(lease_dir)),
    )
}

/// Creates the lease directory (`0700`, with `work` and `run`) under `root` (relative to
/// the remote home unless absolute) and prints the workspace's canonical path. Fails when
/// it exists already.
pub(crate) fn create_lease(root: &str, name: &str) -> String {
    format!(
        "set -e; umask 077; cd; mkdir -p -- {root}; cd -P -- {root}; mkdir -- {name}; mkdir -- {name}/work {name}/run; \
         cd -P -- {name}/work; pwd -P",
        root = quote(root),
        name = quote(name)
    )
}

/// Prints the workspace's canonical path when the lease directory exists, nothing
/// otherwise.
pub(crate) fn find_lease(root: &str, name: &str) -> String {
    format!(
        "cd && cd -P -- {root} 2>/dev/null && [ -d {name}/work ] && [ ! -L {name} ] && cd -P -- {name}/work && pwd -P; exit 0",
        root = quote(root),
        name = quote(name)
    )
}

/// Kills what the lease runs and removes its directory; succeeds when it is gone already.
pub(crate) fn remove_lease(lease_dir: &str) -> String {
    format!(
        "{kill}\nchmod -R u+rwx -- {d} 2>/dev/null; rm -rf -- {d}; [ ! -e {d} ]",
        kill = kill_lease(lease_dir).trim_end_matches("exit 0"),
        d = quote(lease_dir)
    )
}

/// Lists the lease directories under `root`, one absolute path per line.
/// Prints `present` when the directory `dir` exists on the remote host, else `gone`.
pub(crate) fn workspace_present(dir: &str) -> String {
    format!(
        "if [ -d {dir} ]; then echo present; else echo gone; fi",
        dir = quote(dir)
    )
}

pub(crate) fn list_leases(root: &str) -> String {
    format!(
        "cd && cd -P -- {root} 2>/dev/null || exit 0; for d in lease-*; do [ -d \"$d\" ] && printf '%s/%s\\n' \"$(pwd -P)\" \"$d\"; done; exit 0",
        root = quote(root)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use envrt_driver_api::{ExecuteRequest, NameRules};

    #[test]
    fn quoting_survives_a_real_shell() {
        let hostile = "a'b \"c\" $(x) `y` \\ \n\u{e9}";
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("printf %s {}", quote(hostile)))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), hostile);
    }

    #[test]
    fn every_kill_text_is_valid_sh() {
        let launch_text = launch(
            &Launch {
                workspace: "/w",
                run: "/l/run/x",
                cwd: None,
                allowlist: &[],
                stdin_len: Some(0),
            },
            "true",
            &[],
        );
        for script in [
            signal_run("/l/run/x", "TERM"),
            signal_run("/l/run/x", "KILL"),
            kill_lease("/l"),
            remove_lease("/l"),
            watchdog(),
            prologue(),
            launch_text,
        ] {
            let out = std::process::Command::new("/bin/sh")
                .args(["-n", "-c", &script])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{script}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    #[test]
    fn names_and_values_are_checked() {
        assert!(is_shell_name("ENVRT_P_1") && is_shell_name("_x"));
        assert!(!is_shell_name("1A") && !is_shell_name("A-B") && !is_shell_name(""));
        let mut request = ExecuteRequest::new("true", [""; 0]);
        request.env.insert("A-B".to_string(), EnvValue::from("x"));
        assert_eq!(
            request.validate(NameRules::Shell).unwrap_err().to_string(),
            "Invalid input: environment variable name \"A-B\" is not valid"
        );
        assert_eq!(
            ExecuteRequest::new("", [""; 0])
                .validate(NameRules::Shell)
                .unwrap_err()
                .to_string(),
            "Invalid input: the command is empty"
        );
    }

    #[test]
    fn the_env_block_is_read_back_by_sh() {
        let mut env = BTreeMap::new();
        env.insert("V".to_string(), EnvValue::from("it's\nmulti = line\n\n"));
        let mut input = env_block(&env);
        input.extend_from_slice(b"rest of stdin");
        let script = "IFS= read -r n; eval \"$(head -c \"$n\")\"; printf '%s|' \"$V\"; cat";
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(&input).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            "it's\nmulti = line\n\n|rest of stdin"
        );
    }
}
