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
/// `FD [NPROC:AS] -- PROGRAM [ARGS...]`. The limits, when given, are applied to this
/// process first (see [`super::policy::apply_limits`]), so the program inherits them.
pub(crate) fn run(args: &[String]) -> ExitCode {
    let (limits, rest) = match args.get(1).map(String::as_str) {
        Some("--") => (None, 1),
        Some(limits) => (Some(limits), 2),
        None => (None, 1),
    };
    let (Some(fd), Some("--"), Some(program)) = (args.first(), args.get(rest).map(String::as_str), args.get(rest + 1))
    else {
        eprintln!("usage: {INIT_FLAG} FD [NPROC:AS] -- PROGRAM [ARGS...]");
        return ExitCode::from(2);
    };
    if let Some(Err(e)) = limits.map(super::policy::apply_limits) {
        eprintln!("envrt sandbox init: {e}");
        return ExitCode::from(126);
    }
    let program_args = &args[rest + 2..];
    let fd = fd.clone();
    // The status pipe is reopened through /proc (no raw-fd handling needed); a command
    // that writes to it can only misreport its own status.
    let report = move |line: String| {
        if let Ok(mut pipe) = std::fs::OpenOptions::new()
            .write(true)
            .open(format!("/proc/self/fd/{fd}"))
        {
            // Nobody to tell if the worker is gone.
            let _ = pipe.write_all(line.as_bytes());
        }
    };
    let child = Command::new(program).args(program_args).spawn();
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
