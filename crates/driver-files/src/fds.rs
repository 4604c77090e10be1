//! The descriptors a child inherits: its stdio and the ones deliberately passed, nothing
//! else. Any descriptor a host program or worker holds without close-on-exec (one
//! inherited from whoever started it, or a library's) would otherwise reach the child, and
//! with it whatever was opened as root: a command dropped to another user reads a
//! root-only file through it, a directory descriptor lists the host's root past a mount
//! namespace. The local driver, the sandbox host (starting its worker) and the reference
//! worker (starting `bwrap`) all start children this way.
//!
//! The one module of the crate with `unsafe`: a `pre_exec` hook.

use std::io;
use std::os::fd::RawFd;
use std::process::Command;

/// Registers a hook that runs in the child before `exec`: every descriptor above 2 is
/// marked close-on-exec (one `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`; one at a time up
/// to the soft `RLIMIT_NOFILE` on kernels before 5.11), then `keep`
/// (deliberately passed) is cleared of it. Marked rather than closed so the standard
/// library's own exec-error pipe still works. Register it after any hook that opens a
/// descriptor meant to reach the program.
#[allow(unsafe_code)]
pub fn inherit_only(command: &mut Command, keep: &[RawFd]) {
    use std::os::unix::process::CommandExt;
    let keep = keep.to_vec();
    // SAFETY: the closure runs in the forked child before exec. It makes only
    // async-signal-safe system calls (close_range, fcntl) on values prepared before the
    // fork, and allocates nothing; an error is returned as a raw OS error.
    unsafe {
        command.pre_exec(move || {
            let rc = nix::libc::syscall(
                nix::libc::SYS_close_range,
                3 as nix::libc::c_uint,
                nix::libc::c_uint::MAX,
                nix::libc::CLOSE_RANGE_CLOEXEC,
            );
            if rc != 0 {
                // kernels before 5.11: one descriptor at a time, up to the soft limit
                let mut limit = std::mem::zeroed::<nix::libc::rlimit>();
                if nix::libc::getrlimit(nix::libc::RLIMIT_NOFILE, &mut limit) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // (bounded by the kernel's default `nr_open`, in case the limit is infinite)
                let top = RawFd::try_from(limit.rlim_cur.min(1 << 20)).unwrap_or(1 << 20);
                for fd in 3..top {
                    nix::libc::fcntl(fd, nix::libc::F_SETFD, nix::libc::FD_CLOEXEC);
                }
            }
            for &fd in &keep {
                if nix::libc::fcntl(fd, nix::libc::F_SETFD, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}
