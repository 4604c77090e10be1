//! The worker binary's second role: the parent of each sandboxed command, inside the
//! sandbox (`/.envrt-init --sandbox-init FD -- PROGRAM ARGS...`). It starts the program,
//! waits for it, and writes `exit N` or `signal N` to the status pipe `FD`, so the worker
//! can tell a signal death from an exit code (bwrap folds both into one exit status). A
//! program that cannot be found is exit code 127 with `envrt: command not found: PROGRAM`
//! on stderr (the contract's text, the same on every driver).

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitCode};

/// The flag selecting this role (first argument).
pub(crate) const INIT_FLAG: &str = "--sandbox-init";

/// Runs the program given after `--`; `args` are the arguments after [`INIT_FLAG`]:
/// `FD [NPROC:AS [ENV_FD]] -- PROGRAM [ARGS...]`. The limits, when given, are applied to
/// this process first (see [`super::policy::apply_limits`]), so the program inherits them.
/// The init itself runs with an empty environment (whatever the request set, `LD_PRELOAD`
/// included, never acts on it); the program's variables are read from `ENV_FD`
/// (`NAME=VALUE` strings, each ended by a NUL) and given to the program only.
pub(crate) fn run(args: &[String]) -> ExitCode {
    let split = args.iter().position(|a| a == "--");
    let (Some(split), Some(program)) = (split, split.and_then(|at| args.get(at + 1))) else {
        eprintln!("usage: {INIT_FLAG} FD [NPROC:AS [ENV_FD]] -- PROGRAM [ARGS...]");
        return ExitCode::from(2);
    };
    let (fd, limits, env_fd) = match &args[..split] {
        [fd] => (fd, None, None),
        [fd, limits] => (fd, Some(limits), None),
        [fd, limits, env_fd] => (fd, Some(limits), Some(env_fd)),
        _ => {
            eprintln!("usage: {INIT_FLAG} FD [NPROC:AS [ENV_FD]] -- PROGRAM [ARGS...]");
            return ExitCode::from(2);
        }
    };
    if let Some(Err(e)) = limits.map(|l| super::policy::apply_limits(l)) {
        eprintln!("envrt sandbox init: {e}");
        return ExitCode::from(126);
    }
    // The init holds the command's variables: not dumpable, so no process (not even one of
    // its own uid, such as the command) may ptrace it or read its memory through /proc.
    // The command, once started, is dumpable again (execve resets it); its own host uid
    // keeps other leases and other host users from it.
    if let Err(e) = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable) {
        eprintln!("envrt sandbox init: cannot make itself non-dumpable: {e}");
        return ExitCode::from(126);
    }
    let env = match env_fd.map(|n| read_env(n)).transpose() {
        Ok(env) => env.unwrap_or_default(),
        Err(e) => {
            eprintln!("envrt sandbox init: cannot read the environment: {e}");
            return ExitCode::from(126);
        }
    };
    let program_args = &args[split + 2..];
    let fd = fd.clone();
    // The status pipe is reopened through /proc (no raw-fd handling needed); the command
    // does not inherit it.
    let report = move |line: String| {
        if let Ok(mut pipe) = std::fs::OpenOptions::new()
            .write(true)
            .open(format!("/proc/self/fd/{fd}"))
        {
            // Nobody to tell if the worker is gone.
            let _ = pipe.write_all(line.as_bytes());
        }
    };
    let mut command = Command::new(program);
    command.args(program_args).env_clear().envs(env);
    // nothing but stdio reaches the command: not the status pipe, not what bwrap passed
    super::fds::inherit_only(&mut command, &[]);
    let child = command.spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            let (code, text) = match e.kind() {
                std::io::ErrorKind::NotFound => (127, format!("envrt: command not found: {program}")),
                std::io::ErrorKind::PermissionDenied => (126, format!("{program}: permission denied")),
                _ => (126, format!("{program}: {e}")),
            };
            eprintln!("{text}");
            report(format!("exit {code}\n"));
            return ExitCode::from(code);
        }
    };
    match child.wait() {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => {
                report(format!("exit {code}\n"));
                ExitCode::from(u8::try_from(code).unwrap_or(255))
            }
            (None, Some(signal)) => {
                report(format!("signal {signal}\n"));
                ExitCode::from(u8::try_from(128 + signal).unwrap_or(255))
            }
            (None, None) => ExitCode::from(255),
        },
        Err(e) => {
            eprintln!("{program}: {e}");
            ExitCode::from(255)
        }
    }
}

/// The program's variables from the memfd `fd` (`NAME=VALUE\0` each), reopened through
/// `/proc` (no raw-descriptor handling needed).
fn read_env(fd: &str) -> std::io::Result<Vec<(String, String)>> {
    let data = std::fs::read(format!("/proc/self/fd/{fd}"))?;
    Ok(data
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .filter_map(|s| {
            let s = String::from_utf8_lossy(s);
            s.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .collect())
}

/// How the command ended, as the sandbox init reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reported {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it.
    Signaled(i32),
}

/// Parses the last status line written to the pipe.
pub(crate) fn parse_report(text: &str) -> Option<Reported> {
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
    let (kind, number) = line.split_once(' ')?;
    let number: i32 = number.trim().parse().ok()?;
    match kind {
        "exit" => Some(Reported::Exited(number)),
        "signal" => Some(Reported::Signaled(number)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports() {
        assert_eq!(parse_report("exit 3\n"), Some(Reported::Exited(3)));
        assert_eq!(parse_report("junk\nsignal 9\n"), Some(Reported::Signaled(9)));
        assert_eq!(parse_report(""), None);
        assert_eq!(parse_report("exit x\n"), None);
    }
}
