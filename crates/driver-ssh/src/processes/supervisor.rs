//! The process supervisor (`envrt-agent`) on a remote host: this host's binary (its path,
//! content hash and architecture), the probe of a host (its architecture, boot time, home,
//! tools, and whether the binary is there and runs), the copy of the binary over the
//! master connection, and the start of one supervisor per lease.
//!
//! The binary is kept per remote account in `~/.cache/envrt-agent` (`0700`), named by its
//! content hash (`envrt-agent-{hash}`), written to a temporary name, checked for its length,
//! made `0700` and renamed into place: several programs placing it at once each rename a
//! whole file, and a binary built anew gets a name of its own.

use std::path::{Path, PathBuf};

use crate::remote::{self, AGENT_CACHE, quote};

/// The longest path a unix socket can be bound or reached at (`sun_path` less its NUL).
pub(crate) const SOCKET_PATH_MAX: usize = 107;

/// How many times the start script looks, 20 ms apart, for the supervisor to say it
/// listens (10 s in all; it usually has after one or two looks).
const START_POLLS: u32 = 500;

/// The supervisor binary of this host.
#[derive(Clone, Debug)]
pub(crate) struct Binary {
    pub(crate) path: PathBuf,
    /// The file name its copy has on a remote host: `envrt-agent-{hash}`.
    pub(crate) name: String,
    /// The architecture it is built for, as `uname -m` names it (normalized by [`arch_of`]).
    pub(crate) arch: &'static str,
}

/// Where the supervisor of a host's leases runs from, probed once per host.
#[derive(Clone, Debug)]
pub(crate) struct Site {
    /// The remote `$HOME`.
    pub(crate) home: String,
    /// The binary's absolute path on the host.
    pub(crate) binary: String,
    /// The host's boot time (seconds since the epoch), from its `/proc/stat`.
    pub(crate) boot_time: u64,
}

impl Site {
    /// The absolute path of the supervisor socket of the lease at `lease_dir`.
    pub(crate) fn socket(&self, lease_dir: &str) -> String {
        format!("{}/{}", self.home, remote::agent_socket(lease_dir))
    }
}

/// The binary's name on a remote host, from its bytes.
pub(crate) fn remote_name(bytes: &[u8]) -> String {
    format!("envrt-agent-{}", remote::short_hash(bytes))
}

/// The supervisor binary: `configured` when given, else found as every driver finds it.
/// The error is the exact text of why it cannot be used.
pub(crate) fn local_binary(configured: Option<&Path>) -> Result<(Binary, Vec<u8>), String> {
    let path = match configured {
        Some(path) => path.to_path_buf(),
        None => envrt_driver_agent::locate()?,
    };
    let bytes =
        std::fs::read(&path).map_err(|e| format!("Process supervisor \"{}\" cannot be read: {e}.", path.display()))?;
    let arch = elf_arch(&bytes).ok_or_else(|| {
        format!(
            "Process supervisor \"{}\" is not a Linux executable of a known architecture.",
            path.display()
        )
    })?;
    Ok((
        Binary {
            name: remote_name(&bytes),
            path,
            arch,
        },
        bytes,
    ))
}

/// The architecture of an ELF executable (its `e_machine`), named as `uname -m` names it
/// after [`arch_of`].
fn elf_arch(head: &[u8]) -> Option<&'static str> {
    if head.len() < 20 || head[..4] != *b"\x7fELF" {
        return None;
    }
    let machine = match head[5] {
        1 => u16::from_le_bytes([head[18], head[19]]),
        2 => u16::from_be_bytes([head[18], head[19]]),
        _ => return None,
    };
    Some(match machine {
        0x3e => "x86_64",
        0xb7 => "aarch64",
        0x03 => "x86",
        0x28 => "arm",
        0xf3 => "riscv64",
        0x15 => "ppc64",
        0x16 => "s390x",
        _ => return None,
    })
}

/// `uname -m`'s answer, with the names one architecture goes by made one.
pub(crate) fn arch_of(uname: &str) -> &str {
    match uname {
        "arm64" | "aarch64_be" => "aarch64",
        "i386" | "i486" | "i586" | "i686" => "x86",
        "ppc64le" => "ppc64",
        m if m.starts_with("armv") => "arm",
        m => m,
    }
}

/// What [`probe`] found.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Probe {
    pub(crate) arch: String,
    pub(crate) boot_time: u64,
    pub(crate) home: String,
    /// `setsid` and `flock` are there.
    pub(crate) tools: bool,
    /// The binary is there.
    pub(crate) binary: bool,
    /// What running the binary without arguments said when it did not print its usage;
    /// `None` when it did (it runs).
    pub(crate) fails: Option<String>,
}

/// Prints `key=value` lines: `arch`, `btime`, `home`, `tools` (when `setsid` and `flock`
/// are there), `binary` (when `{AGENT_CACHE}/{name}` is a regular executable file) and,
/// for a binary, `runs` (its usage came out) or `fails=` and the first line it printed.
pub(crate) fn probe(name: &str) -> String {
    format!(
        r#"cd || exit 1
printf 'arch=%s\n' "$(uname -m)"
printf 'btime=%s\n' "$(awk '$1 == "btime" {{ print $2 }}' /proc/stat 2>/dev/null)"
printf 'home=%s\n' "$HOME"
command -v setsid >/dev/null 2>&1 && command -v flock >/dev/null 2>&1 && echo tools
b={binary}
if [ -f "$b" ] && [ ! -L "$b" ] && [ -x "$b" ]; then
  echo binary
  o=$("$b" 2>&1 </dev/null)
  case $o in *'usage: envrt-agent --socket'*) echo runs ;; *) printf 'fails=%s\n' "$(printf '%s' "$o" | head -n 1)" ;; esac
fi
exit 0"#,
        binary = quote(&format!("{AGENT_CACHE}/{name}")),
    )
}

/// Reads [`probe`]'s answer; `None` when it is not one (a login shell that printed
/// something of its own, a home with a newline).
pub(crate) fn parse_probe(text: &str) -> Option<Probe> {
    let mut probe = Probe::default();
    let (mut home, mut runs) = (false, false);
    for line in text.lines() {
        match line.split_once('=') {
            Some(("arch", value)) => probe.arch = value.to_owned(),
            Some(("btime", value)) => probe.boot_time = value.trim().parse().unwrap_or(0),
            Some(("home", value)) => {
                home = true;
                probe.home = value.to_owned();
            }
            Some(("fails", value)) => probe.fails = Some(value.to_owned()),
            Some(_) => return None,
            None => match line {
                "tools" => probe.tools = true,
                "binary" => probe.binary = true,
                "runs" => runs = true,
                _ => return None,
            },
        }
    }
    if probe.binary && !runs && probe.fails.is_none() {
        probe.fails = Some(String::new());
    }
    (home && probe.home.starts_with('/') && !probe.arch.is_empty()).then_some(probe)
}

/// Why `probe` of `shown` rules the supervisor out for `binary`, as the exact text; `None`
/// when it is fit (the binary itself may still be missing: [`Probe::binary`]).
pub(crate) fn unfit(shown: &str, binary: &Binary, probe: &Probe) -> Option<String> {
    if arch_of(&probe.arch) != binary.arch {
        return Some(format!(
            "The remote host {shown} is {} and the process supervisor \"{}\" is built for {}: persistent process sessions need an envrt-agent built for the remote architecture.",
            probe.arch,
            binary.path.display(),
            binary.arch
        ));
    }
    if !probe.tools {
        return Some(format!(
            "The remote host {shown} has no setsid or no flock (util-linux or BusyBox): persistent process sessions need both."
        ));
    }
    let socket = format!("{}/{}", probe.home, remote::agent_socket("/"));
    if socket.len() > SOCKET_PATH_MAX {
        return Some(format!(
            "The remote home \"{}\" on {shown} is too long for the process supervisor's socket path ({} bytes, at most {SOCKET_PATH_MAX}).",
            probe.home,
            socket.len()
        ));
    }
    None
}

/// The refusal of a probe answer that is not one; quotes at most 200 characters of what
/// the remote side said (a login shell's chatter, an rc file: anything).
pub(crate) fn unrecognised(shown: &str, said: &[u8]) -> String {
    let said: String = String::from_utf8_lossy(said).chars().take(200).collect();
    format!("The remote host {shown} answered the process supervisor's probe with something else: {said:?}")
}

/// The refusal of a copy that failed on the remote side (`err` is its stderr).
pub(crate) fn not_copied(shown: &str, code: i32, err: &[u8]) -> String {
    format!(
        "The process supervisor could not be copied to {shown}: exit code {code}: {}",
        String::from_utf8_lossy(err).trim()
    )
}

/// The refusal of a copy that does not run on the host (`said`: the first line it
/// printed when run, or why it is not there).
pub(crate) fn does_not_run(shown: &str, path: &str, said: &str) -> String {
    format!("The process supervisor copied to {shown} ({path}) does not run there: {said}")
}

/// Removes `{AGENT_CACHE}/{name}`.
pub(crate) fn uninstall(name: &str) -> String {
    format!("cd && rm -f -- {}; exit 0", quote(&format!("{AGENT_CACHE}/{name}")))
}

/// Writes stdin (exactly `len` bytes) to `{AGENT_CACHE}/{name}`: a temporary file, its
/// length checked, `0700`, renamed into place.
pub(crate) fn install(name: &str, len: usize) -> String {
    format!(
        r#"set -e; umask 077; cd
mkdir -p {cache}; chmod 700 {cache}
t={cache}/.tmp-$$
cat >"$t"
n=$(wc -c <"$t" | tr -d ' ')
if [ "$n" != {len} ]; then rm -f "$t"; echo "received $n of {len} bytes" >&2; exit 1; fi
chmod 700 "$t"; mv -f "$t" {target}"#,
        cache = quote(AGENT_CACHE),
        target = quote(&format!("{AGENT_CACHE}/{name}")),
    )
}

/// What [`start`] printed: the supervisor was already running, has started, or the lease
/// directory is gone.
pub(crate) const STARTED: &str = "started";
/// See [`STARTED`].
pub(crate) const RUNNING: &str = "running";
/// See [`STARTED`].
pub(crate) const GONE: &str = "gone";

/// Starts the supervisor of the lease at `lease_dir` unless it runs, under the lease's
/// `flock` (`{lease_dir}/agent.lock`), so one starts however many programs ask at once. It
/// runs detached from the channel (`setsid`, stdin from `/dev/null`, its output to
/// `{lease_dir}/agent.log`), so it outlives the connection, with `--subreaper`, in the
/// workspace, with a command's environment (`env` is [`remote::clean_env`]'s text);
/// its pid goes to `{lease_dir}/agent.pid`. Each supervisor of the lease numbers its
/// processes past every id an earlier one could give: the `n`th (counted in
/// `{lease_dir}/agent.generation`, outside the workspace) starts at `n * 2^32 + 1`
/// ([`envrt_driver_agent::id_args`]), so a supervisor killed and started again never gives
/// an id that named another process. One runs when that pid is alive, its cwd lies
/// in the lease directory (a recycled pid does not count) and its socket exists. Prints [`STARTED`], [`RUNNING`] or [`GONE`];
/// a supervisor that did not say it listens is killed and its log goes to stderr.
pub(crate) fn start(lease_dir: &str, socket: &str, binary: &str, env: &str) -> String {
    format!(
        r#"umask 077
d={d}; s={s}
[ -d "$d/work" ] && [ ! -L "$d" ] || {{ echo {GONE}; exit 0; }}
exec 9>"$d/agent.lock"
flock -w 30 9 || {{ echo 'the start lock was not free within 30 s' >&2; exit 3; }}
[ -d "$d/work" ] || {{ echo {GONE}; exit 0; }}
a=$(cat "$d/agent.pid" 2>/dev/null)
if [ -n "$a" ] && [ -S "$s" ] && kill -0 "$a" 2>/dev/null; then
  case "$(readlink "/proc/$a/cwd" 2>/dev/null)/" in "$d"/*) echo {RUNNING}; exit 0 ;; esac
fi
rm -f -- "$s"
g=$(head -c 20 "$d/agent.generation" 2>/dev/null)
case $g in ''|*[!0-9]*) g=0 ;; esac
[ ${{#g}} -le 15 ] || g=0
echo $((g + 1)) >"$d/agent.generation" || exit 3
cd -- "$d/work" || exit 3
{env} setsid {b} --socket "$s" --subreaper --max-processes {held} --first-id $((g * {per} + 1)) </dev/null >"$d/agent.log" 2>&1 9>&- &
p=$!
echo "$p" >"$d/agent.pid"
i=0
while [ $i -lt {START_POLLS} ]; do
  if grep -Fqx "envrt-agent listening on $s" "$d/agent.log" 2>/dev/null; then echo {STARTED}; exit 0; fi
  kill -0 "$p" 2>/dev/null || break
  sleep 0.02; i=$((i+1))
done
kill -KILL "$p" 2>/dev/null
rm -f -- "$d/agent.pid"
head -c 2000 "$d/agent.log" >&2
exit 4"#,
        d = quote(lease_dir),
        s = quote(socket),
        b = quote(binary),
        per = envrt_driver_agent::IDS_PER_SUPERVISOR,
        held = envrt_driver_agent::HELD_PROCESSES,
    )
}

/// Prints `yes` when the supervisor socket `socket` exists.
pub(crate) fn socket_exists(socket: &str) -> String {
    format!("[ -S {} ] && echo yes; exit 0", quote(socket))
}

/// What [`resolve_cwd`] printed first.
pub(crate) const CWD_OK: &str = "ok";

/// Enters `cwd` and prints [`CWD_OK`] and its canonical path when that lies inside
/// `workspace`, `outside` when it does not, `missing` when it is not a directory.
pub(crate) fn resolve_cwd(workspace: &str, cwd: &str) -> String {
    format!(
        r#"cd -P -- {c} 2>/dev/null || {{ echo missing; exit 0; }}
p=$(pwd -P)
case "$p/" in {w}/*) printf '{CWD_OK}\n%s' "$p" ;; *) echo outside ;; esac
exit 0"#,
        c = quote(cwd),
        w = quote(workspace),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binary() -> Binary {
        Binary {
            path: PathBuf::from("/opt/envrt-agent"),
            name: "envrt-agent-0123456789abcdef".into(),
            arch: "x86_64",
        }
    }

    #[test]
    fn every_script_is_valid_sh() {
        for script in [
            probe("envrt-agent-x"),
            install("envrt-agent-x", 10),
            uninstall("envrt-agent-x"),
            start("/l", "/h/s.sock", "/h/b", "env -i PATH=/bin HOME=/l/work"),
            socket_exists("/h/s.sock"),
            resolve_cwd("/l/work", "/l/work/x"),
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
    fn the_probe_reads_its_own_answer_and_nothing_else() {
        let text = "arch=x86_64\nbtime=1700000000\nhome=/home/u\ntools\nbinary\nruns\n";
        assert_eq!(
            parse_probe(text),
            Some(Probe {
                arch: "x86_64".into(),
                boot_time: 1_700_000_000,
                home: "/home/u".into(),
                tools: true,
                binary: true,
                fails: None,
            })
        );
        let missing = parse_probe("arch=aarch64\nbtime=\nhome=/h\n").unwrap();
        assert!(!missing.binary && !missing.tools && missing.boot_time == 0);
        let broken = parse_probe("arch=x86_64\nhome=/h\ntools\nbinary\nfails=cannot execute\n").unwrap();
        assert_eq!(broken.fails.as_deref(), Some("cannot execute"));
        // A login shell's chatter, a relative home: not an answer.
        assert_eq!(parse_probe("Welcome!\narch=x86_64\nhome=/h\n"), None);
        assert_eq!(parse_probe("arch=x86_64\nhome=h\n"), None);
    }

    #[test]
    fn architectures_are_compared_by_their_one_name() {
        assert_eq!(arch_of("arm64"), "aarch64");
        assert_eq!(arch_of("armv7l"), "arm");
        assert_eq!(arch_of("i686"), "x86");
        assert_eq!(arch_of("x86_64"), "x86_64");
        let mut head = vec![0u8; 64];
        head[..6].copy_from_slice(b"\x7fELF\x02\x01");
        head[18..20].copy_from_slice(&0x3eu16.to_le_bytes());
        assert_eq!(elf_arch(&head), Some("x86_64"));
        head[18..20].copy_from_slice(&0xb7u16.to_le_bytes());
        assert_eq!(elf_arch(&head), Some("aarch64"));
        assert_eq!(elf_arch(b"#!/bin/sh\n"), None);
    }

    #[test]
    fn an_unfit_host_is_refused_with_its_exact_text() {
        let fit = Probe {
            arch: "x86_64".into(),
            boot_time: 1,
            home: "/home/u".into(),
            tools: true,
            binary: false,
            fails: None,
        };
        assert_eq!(unfit("u@h:22", &binary(), &fit), None);
        let arm = Probe {
            arch: "aarch64".into(),
            ..Probe::default()
        };
        assert_eq!(
            unfit("u@h:22", &binary(), &arm).unwrap(),
            "The remote host u@h:22 is aarch64 and the process supervisor \"/opt/envrt-agent\" is built for x86_64: persistent process sessions need an envrt-agent built for the remote architecture."
        );
        let bare = Probe { tools: false, ..fit };
        assert_eq!(
            unfit("u@h:22", &binary(), &bare).unwrap(),
            "The remote host u@h:22 has no setsid or no flock (util-linux or BusyBox): persistent process sessions need both."
        );
        let deep = Probe {
            home: format!("/{}", "h".repeat(70)),
            tools: true,
            ..bare
        };
        assert_eq!(
            unfit("u@h:22", &binary(), &deep).unwrap(),
            format!(
                "The remote home \"/{}\" on u@h:22 is too long for the process supervisor's socket path (112 bytes, at most 107).",
                "h".repeat(70)
            )
        );
    }

    #[test]
    fn a_probe_answer_a_copy_and_a_run_that_fail_are_refused_with_their_exact_texts() {
        let chatter = format!("Welcome to {}\n", "x".repeat(300));
        assert_eq!(
            unrecognised("u@h:22", chatter.as_bytes()),
            format!(
                "The remote host u@h:22 answered the process supervisor's probe with something else: \"Welcome to {}\"",
                "x".repeat(189)
            )
        );
        assert_eq!(
            not_copied("u@h:22", 1, b"received 10 of 20 bytes\n"),
            "The process supervisor could not be copied to u@h:22: exit code 1: received 10 of 20 bytes"
        );
        assert_eq!(
            does_not_run("u@h:22", "/h/.cache/envrt-agent/envrt-agent-x", "Exec format error"),
            "The process supervisor copied to u@h:22 (/h/.cache/envrt-agent/envrt-agent-x) does not run there: Exec format error"
        );
    }

    #[test]
    fn a_binary_that_cannot_be_read_or_is_no_executable_is_refused_with_its_exact_text() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("envrt-agent");
        assert_eq!(
            local_binary(Some(&missing)).unwrap_err(),
            format!(
                "Process supervisor \"{}\" cannot be read: No such file or directory (os error 2).",
                missing.display()
            )
        );
        std::fs::write(&missing, "#!/bin/sh\n").unwrap();
        assert_eq!(
            local_binary(Some(&missing)).unwrap_err(),
            format!(
                "Process supervisor \"{}\" is not a Linux executable of a known architecture.",
                missing.display()
            )
        );
    }
}
