//! Descriptors a child of the worker inherits: its stdio and the ones deliberately passed,
//! nothing else. Any descriptor the worker holds without close-on-exec (one inherited
//! from whoever started it, or a library's) would otherwise reach `bwrap`, and through it
//! the sandboxed command: a directory descriptor lists the host's root past the mount
//! namespace, a file descriptor reads a root-only file.

use std::io;
use std::os::fd::RawFd;
use std::process::Command;

pub(crate) use envrt_driver_files::fds::inherit_only;

/// Makes the child a session leader of its own and, with `cgroup` (a parent cgroup's
/// `cgroup.procs` opened for writing), moves it there, before it runs the program: a
/// sandbox that is to outlive the worker (the lease's process supervisor). A move the
/// kernel refuses leaves the child where it is.
#[allow(unsafe_code)]
pub(crate) fn detach(command: &mut Command, cgroup: Option<RawFd>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec. It makes only
    // async-signal-safe system calls (setsid, write) on values prepared before the fork,
    // and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if nix::libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(fd) = cgroup {
                // "0": the writing process itself
                let _ = nix::libc::write(fd, b"0".as_ptr().cast(), 1);
            }
            Ok(())
        });
    }
}

/// Enters the network namespace `netns` in the child before it runs the program, then
/// (with `user`) drops to that uid and gid with no supplementary groups: the namespace must
/// be entered while the child is still root, so the user changes here rather than through
/// `Command::uid`, which the standard library applies before any hook.
#[allow(unsafe_code)]
pub(crate) fn join_net(command: &mut Command, netns: RawFd, user: Option<(u32, u32)>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec. It makes only
    // async-signal-safe system calls (setns, setgroups, setgid, setuid) on values prepared
    // before the fork, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if nix::libc::setns(netns, nix::libc::CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some((uid, gid)) = user {
                if nix::libc::setgroups(0, std::ptr::null()) != 0
                    || nix::libc::setgid(gid) != 0
                    || nix::libc::setuid(uid) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}
