//! A spawn request's bounds, checked before anything starts, and signals by name or
//! number.

use crate::proto::{DEFAULT_KEEP, MAX_ARGS, MAX_KEEP, MAX_KEY, SpawnRequest, StdinMode};
use crate::refuse;

/// Parses a signal given by name (`TERM`, `SIGTERM`, any case) or number.
pub(crate) fn parse_signal(text: &str) -> Result<rustix::process::Signal, String> {
    use rustix::process::Signal;
    let named = [
        ("HUP", Signal::HUP),
        ("INT", Signal::INT),
        ("QUIT", Signal::QUIT),
        ("ILL", Signal::ILL),
        ("TRAP", Signal::TRAP),
        ("ABRT", Signal::ABORT),
        ("BUS", Signal::BUS),
        ("FPE", Signal::FPE),
        ("KILL", Signal::KILL),
        ("USR1", Signal::USR1),
        ("SEGV", Signal::SEGV),
        ("USR2", Signal::USR2),
        ("PIPE", Signal::PIPE),
        ("ALRM", Signal::ALARM),
        ("TERM", Signal::TERM),
        ("CHLD", Signal::CHILD),
        ("CONT", Signal::CONT),
        ("STOP", Signal::STOP),
        ("TSTP", Signal::TSTP),
        ("TTIN", Signal::TTIN),
        ("TTOU", Signal::TTOU),
        ("URG", Signal::URG),
        ("XCPU", Signal::XCPU),
        ("XFSZ", Signal::XFSZ),
        ("VTALRM", Signal::VTALARM),
        ("PROF", Signal::PROF),
        ("WINCH", Signal::WINCH),
        ("IO", Signal::IO),
        ("PWR", Signal::POWER),
        ("SYS", Signal::SYS),
    ];
    if let Ok(number) = text.parse::<i32>() {
        return Signal::from_named_raw(number).ok_or_else(|| refuse::signal(text));
    }
    let upper = text.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    named
        .iter()
        .find(|(candidate, _)| *candidate == name)
        .map(|(_, signal)| *signal)
        .ok_or_else(|| refuse::signal(text))
}

pub(crate) fn check_request(request: &SpawnRequest) -> Result<u64, String> {
    if request.argv.is_empty() {
        return Err(refuse::empty_argv());
    }
    if request.argv.len() > MAX_ARGS {
        return Err(refuse::too_many_args(request.argv.len()));
    }
    if request.argv.iter().any(|arg| arg.contains('\0')) {
        return Err(refuse::nul("argv"));
    }
    for (name, value) in &request.env {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(refuse::env_name(name));
        }
        if value.contains('\0') {
            return Err(refuse::nul(&format!("the value of {name}")));
        }
    }
    if request.cwd.as_deref().is_some_and(|cwd| cwd.contains('\0')) {
        return Err(refuse::nul("cwd"));
    }
    let keep = request.keep.unwrap_or(DEFAULT_KEEP);
    if keep == 0 || keep > MAX_KEEP {
        return Err(refuse::keep(keep));
    }
    if let Some(key) = &request.idempotency_key
        && (key.is_empty() || key.len() > MAX_KEY)
    {
        return Err(refuse::key_length(key.len()));
    }
    if request.hold && request.tty.is_some() {
        return Err(refuse::hold_tty());
    }
    if let Some(size) = request.tty {
        if size.rows == 0 || size.cols == 0 {
            return Err(refuse::tty_size());
        }
        if request.stdin == StdinMode::Piped {
            return Err(refuse::tty_stdin());
        }
    }
    Ok(keep)
}
