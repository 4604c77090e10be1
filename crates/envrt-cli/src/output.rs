//! Writing to stdout and stderr without panicking (`println!` panics on a closed stdout
//! with `failed printing to stdout: Broken pipe`, exit 101).
//!
//! Every line the tool prints goes through [`out!`](crate::out) and every message through
//! [`say!`](crate::say). Once stdout turns out closed (`envrt lease list | head` after
//! `head` quit, or a terminal that hung up), the rest of the output is dropped quietly and
//! the command finishes what it does (a lease it holds is still released); `main` then
//! exits 141 (128 + SIGPIPE), as a shell reports `ls | head` whose reader quit, unless the
//! command already had a non-zero exit code. A failed write to stderr is ignored: a
//! hung-up terminal must not stop envrt before it releases what it holds.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Prints `bytes` on stdout, unless stdout was found closed.
pub(crate) fn write(bytes: &[u8]) {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if out.write_all(bytes).and_then(|()| out.flush()).is_err() {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
    }
}

/// Prints one line on stdout, unless stdout was found closed.
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    let mut text = args.to_string();
    text.push('\n');
    write(text.as_bytes());
}

/// Whether a write to stdout failed (the reader is gone).
pub(crate) fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// Prints one line on stderr; a failure is ignored.
pub(crate) fn say(args: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
    let _ = err.flush();
}

/// `println!` that never panics (see the module docs).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}

/// `eprintln!` that never panics (see the module docs).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::say(format_args!($($arg)*))
    };
}
