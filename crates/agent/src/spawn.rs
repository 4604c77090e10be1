//! Starting a process: pipes or a pseudo-terminal, its own process group (or session, with a
//! terminal), and its identity read back from `/proc`.
//!
//! A process with a terminal is started through the agent's own binary in its `__tty-exec`
//! mode ([`tty_exec`]): it calls `setsid`, makes the terminal on its stdin the controlling
//! terminal (`TIOCSCTTY`) and `exec`s the command, so the pid stays the same and no `unsafe`
//! `pre_exec` hook is needed.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use rustix::fs::{Mode, OFlags};
use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;

use crate::proto::{SpawnRequest, StdinMode, Stream};

/// The argument that puts the binary in its terminal-exec mode.
pub const TTY_EXEC: &str = "__tty-exec";

/// A started process's file descriptors and pid.
pub(crate) struct Started {
    pub(crate) pid: i32,
    /// The output streams, each a non-blocking descriptor to read.
    pub(crate) outputs: Vec<(Stream, OwnedFd)>,
    /// Where `write_stdin` writes (the pipe, or the terminal's master).
    pub(crate) stdin: Option<OwnedFd>,
    /// The terminal's master, for resize.
    pub(crate) master: Option<OwnedFd>,
    /// The output pipes' names as `/proc/PID/fd` shows them (`pipe:[N]`).
    pub(crate) pipes: Vec<String>,
}

/// A pipe's name as `/proc/PID/fd` shows it, from either end.
fn pipe_name(fd: &OwnedFd) -> Option<String> {
    rustix::fs::fstat(fd).ok().map(|stat| format!("pipe:[{}]", stat.st_ino))
}

fn nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    rustix::fs::fcntl_setfl(fd, flags | OFlags::NONBLOCK)?;
    Ok(())
}

pub(crate) fn winsize(rows: u16, cols: u16) -> Winsize {
    Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

fn command(request: &SpawnRequest, ids: Option<(u32, u32)>, program: &str, args: &[String]) -> Command {
    let mut command = Command::new(program);
    command.args(args);
    if let Some((uid, gid)) = ids {
        // In the child before `exec`: supplementary groups cleared, then gid, then uid.
        command.gid(gid).uid(uid);
    }
    if request.clear_env {
        command.env_clear();
    }
    command.envs(&request.env);
    if let Some(cwd) = &request.cwd {
        command.current_dir(cwd);
    }
    command
}

/// Starts `request` (already checked) as `ids` (uid, gid; the agent's own when `None`).
/// `shim` is the agent's binary, for a terminal.
pub(crate) fn start(request: &SpawnRequest, ids: Option<(u32, u32)>, shim: &Path) -> io::Result<Started> {
    match request.tty {
        None => start_piped(request, ids),
        Some(size) => start_tty(request, ids, shim, winsize(size.rows, size.cols)),
    }
}

fn start_piped(request: &SpawnRequest, ids: Option<(u32, u32)>) -> io::Result<Started> {
    let mut command = command(request, ids, &request.argv[0], &request.argv[1..]);
    command.process_group(0);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    command.stdin(match request.stdin {
        StdinMode::Null => Stdio::null(),
        StdinMode::Piped => Stdio::piped(),
    });
    let mut child = command.spawn()?;
    let stdout = OwnedFd::from(child.stdout.take().expect("piped stdout"));
    let stderr = OwnedFd::from(child.stderr.take().expect("piped stderr"));
    let stdin = child.stdin.take().map(OwnedFd::from);
    for fd in [Some(&stdout), Some(&stderr), stdin.as_ref()].into_iter().flatten() {
        nonblocking(fd)?;
    }
    // The child is reaped by the agent's reaper (waitpid on any child), not through `child`.
    let pipes = [&stdout, &stderr].into_iter().filter_map(pipe_name).collect();
    Ok(Started {
        pipes,
        pid: child.id() as i32,
        outputs: vec![(Stream::Stdout, stdout), (Stream::Stderr, stderr)],
        stdin,
        master: None,
    })
}

fn start_tty(request: &SpawnRequest, ids: Option<(u32, u32)>, shim: &Path, size: Winsize) -> io::Result<Started> {
    let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    let name = rustix::pty::ptsname(&master, Vec::new())?;
    let slave = rustix::fs::open(
        name.as_c_str(),
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    rustix::termios::tcsetwinsize(&slave, size)?;
    let mut args = vec![TTY_EXEC.to_owned()];
    args.extend(request.argv.iter().cloned());
    let mut command = command(request, ids, &shim.to_string_lossy(), &args);
    if let Some((uid, _)) = ids {
        // The terminal becomes the user's (its controlling terminal), as a login's does.
        let _ = rustix::fs::fchown(&slave, Some(rustix::fs::Uid::from_raw(uid)), None);
    }
    command.stdin(Stdio::from(slave.try_clone()?));
    command.stdout(Stdio::from(slave.try_clone()?));
    command.stderr(Stdio::from(slave));
    let child = command.spawn()?;
    let pid = child.id() as i32;
    wait_for_terminal(pid);
    // Our copies of the slave are closed now (moved into the Command, dropped with it), so
    // the master reads EOF (EIO) once the session's last holder closes it.
    drop(command);
    nonblocking(&master)?;
    let reader = master.try_clone()?;
    let writer = master.try_clone()?;
    Ok(Started {
        pid,
        outputs: vec![(Stream::Tty, reader)],
        stdin: Some(writer),
        master: Some(master),
        pipes: Vec::new(),
    })
}

/// The terminal-exec mode: a new session, the terminal on stdin as its controlling
/// terminal, then `exec` of `argv`. Returns only on failure.
pub fn tty_exec(argv: &[String]) -> io::Error {
    if argv.is_empty() {
        return io::Error::other("no command to run");
    }
    if let Err(error) = rustix::process::setsid() {
        return error.into();
    }
    if let Err(error) = rustix::process::ioctl_tiocsctty(rustix::stdio::stdin()) {
        return error.into();
    }
    Command::new(&argv[0]).args(&argv[1..]).exec()
}

/// Fields 5 to 8 of `/proc/PID/stat` (pgrp, session, tty_nr, tpgid) and the state.
fn stat_fields(pid: i32) -> Option<(String, Vec<i64>)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?.to_owned();
    let numbers = rest.take(5).filter_map(|f| f.parse().ok()).collect();
    Some((state, numbers))
}

/// Waits until the shim has made the terminal its controlling terminal with its own group in
/// the foreground (then it `exec`s at once), so that a `^C` written right after spawn
/// reaches the process. The child is unreaped meanwhile (the caller holds the table), so
/// its `/proc` entry stays; a shim that died (state Z) ends the wait.
fn wait_for_terminal(pid: i32) {
    for _ in 0..10_000 {
        match stat_fields(pid) {
            Some((state, fields)) if state == "Z" || fields.len() < 5 => return,
            Some((_, fields)) if fields[1] == pid as i64 && fields[4] == pid as i64 => return,
            Some(_) => std::thread::sleep(std::time::Duration::from_micros(200)),
            None => return,
        }
    }
}

/// The start time (field 22 of `/proc/PID/stat`, clock ticks since boot).
pub(crate) fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces or parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}
