//! Descriptors a local command inherits: its stdio, nothing else. Any descriptor the host
//! program holds without close-on-exec would otherwise reach the command, and with it
//! whatever the program opened as root: a command dropped to another user (`allowedUsers`)
//! reads and appends to a root-only file through it, or lists a directory it may not
//! enter.

use std::ffi::CString;
use std::io;
use std::process::Command;

pub(crate) use envrt_driver_files::fds::inherit_only;

/// The program, argv and environment of a command, ready for `execve` in the child.
struct Exec {
    program: CString,
    _strings: Vec<CString>,
    argv: Vec<*const nix::libc::c_char>,
    envp: Vec<*const nix::libc::c_char>,
}

// SAFETY: the pointers point into the heap buffers of `_strings` (and `program`), owned by
// the same value and never changed after it is built; moving the value does not move them.
#[allow(unsafe_code)]
unsafe impl Send for Exec {}
#[allow(unsafe_code)]
unsafe impl Sync for Exec {}

/// [`inherit_only`] with nothing kept, and then the hook itself `execve`s the program with
/// `arg0` and the command's arguments and (cleared, then set) environment. A hook makes
/// the standard library start the child with `fork` and `execvp`, whose `PATH` search and
/// `/bin/sh` fallback for a file without `#!` the driver does not want (it resolves the
/// program itself, and a file named with a `/` that cannot be executed is an error):
/// `execve` keeps `posix_spawn`'s exact behaviour. Call it once every argument and
/// variable is set; an `execve` error comes back as the spawn's error.
#[allow(unsafe_code)]
pub(crate) fn exec_with_stdio_only(command: &mut Command, arg0: &std::ffi::OsStr) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    let c = |s: &[u8]| CString::new(s).map_err(|_| io::Error::from_raw_os_error(nix::libc::EINVAL));
    let program = c(command.get_program().as_bytes())?;
    let mut strings = vec![c(arg0.as_bytes())?];
    for arg in command.get_args() {
        strings.push(c(arg.as_bytes())?);
    }
    let argc = strings.len();
    for (name, value) in command.get_envs() {
        if let Some(value) = value {
            let mut pair = name.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            strings.push(c(&pair)?);
        }
    }
    let pointers = |s: &[CString]| {
        s.iter()
            .map(|s| s.as_ptr())
            .chain([std::ptr::null()])
            .collect::<Vec<_>>()
    };
    let exec = Exec {
        argv: pointers(&strings[..argc]),
        envp: pointers(&strings[argc..]),
        program,
        _strings: strings,
    };
    inherit_only(command, &[]);
    // SAFETY: the closure runs in the forked child before the standard library's own
    // exec, after its stdio, identity and cwd set-up. It makes one async-signal-safe
    // system call (execve) on NUL-terminated arrays built before the fork, allocates
    // nothing, and returns only when execve failed, as a raw OS error.
    unsafe {
        command.pre_exec(move || {
            // the whole value is captured (not its fields, which are not Send)
            let exec = &exec;
            nix::libc::execve(exec.program.as_ptr(), exec.argv.as_ptr(), exec.envp.as_ptr());
            Err(io::Error::last_os_error())
        });
    }
    Ok(())
}
