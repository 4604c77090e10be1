//! Watches what the host process itself writes to its standard output and standard error
//! (descriptors 1 and 2), so a check can prove that a secret never reaches them: a driver
//! that `println!`s or `eprintln!`s a request's env, or a child it starts with the
//! host's descriptors, writes there, and no tracing or `log` capture sees it.
//!
//! While a [`Tee`] is open, descriptors 1 and 2 point at pipes; one thread per pipe scans
//! what arrives for the needles and passes every byte on, unchanged and in order, to the
//! original descriptor, so the test harness's own output still shows (only later by the
//! time a pipe takes). Closing puts the originals back and has each thread report at an
//! end mark the kit writes into its pipe; the thread then goes on passing on whatever a
//! process started meanwhile (which inherited the pipe) still writes, until the last
//! writer is gone. One tee at a time in the process (a lock).
//!
//! Output that never reaches the descriptors cannot be seen: a test harness that captures
//! `print!` per test (libtest without `--nocapture`) keeps it in memory. A tee proves that
//! it sees the process's output with a probe line printed from the suite's async runtime
//! (where a driver's code runs); without it the check reports "not checked".

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::Receiver;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// One tee at a time: two would restore each other's descriptors out of order.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// How long a closing tee waits for a pipe's thread to reach its end mark.
const DRAIN: Duration = Duration::from_secs(10);

/// Which of the two descriptors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fd {
    Stdout,
    Stderr,
}

impl Fd {
    fn name(self) -> &'static str {
        match self {
            Fd::Stdout => "standard output",
            Fd::Stderr => "standard error",
        }
    }

    fn point_at(self, fd: impl AsFd) -> std::io::Result<()> {
        match self {
            Fd::Stdout => rustix::stdio::dup2_stdout(fd),
            Fd::Stderr => rustix::stdio::dup2_stderr(fd),
        }
        .map_err(std::io::Error::from)
    }

    fn current(self) -> std::io::Result<OwnedFd> {
        let fd = match self {
            Fd::Stdout => rustix::stdio::stdout(),
            Fd::Stderr => rustix::stdio::stderr(),
        };
        // Close-on-exec: the saved original must not reach what the host starts.
        rustix::io::fcntl_dupfd_cloexec(fd, 3).map_err(std::io::Error::from)
    }

    fn flush(self) {
        let _ = match self {
            Fd::Stdout => std::io::stdout().flush(),
            Fd::Stderr => std::io::stderr().flush(),
        };
    }
}

/// What one pipe's thread found: per needle, whether it was seen.
type Found = Vec<bool>;

/// One redirected descriptor.
struct Redirect {
    fd: Fd,
    original: OwnedFd,
    /// The pipe's write end the kit keeps, to write the end mark.
    writer: File,
    found: Receiver<Found>,
}

/// Descriptors 1 and 2 redirected through scanning pipes, until [`Tee::close`].
pub(crate) struct Tee {
    redirects: Vec<Redirect>,
    end_mark: Vec<u8>,
    _turn: MutexGuard<'static, ()>,
}

/// Where each needle was seen after a tee closed.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Per needle: the descriptors it reached.
    pub(crate) per_needle: Vec<Vec<&'static str>>,
}

impl Seen {
    /// The descriptors needle `i` reached (empty when none).
    pub(crate) fn of(&self, i: usize) -> &[&'static str] {
        self.per_needle.get(i).map(Vec::as_slice).unwrap_or(&[])
    }
}

impl Tee {
    /// Points descriptors 1 and 2 at pipes scanned for `needles`; `end_mark` (unique to the
    /// call, never printed by anyone else) ends each pipe's scan. Fails, leaving both
    /// descriptors as they were, when a pipe or a redirect cannot be made.
    pub(crate) fn open(needles: Vec<String>, end_mark: String) -> Result<Tee, String> {
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let mut tee = Tee {
            redirects: Vec::new(),
            end_mark: end_mark.into_bytes(),
            _turn: turn,
        };
        for fd in [Fd::Stdout, Fd::Stderr] {
            // On an error the redirects made so far are undone by Drop.
            let redirect = redirect(fd, needles.clone(), tee.end_mark.clone())
                .map_err(|e| format!("cannot redirect the host's {}: {e}", fd.name()))?;
            tee.redirects.push(redirect);
        }
        Ok(tee)
    }

    /// Puts the original descriptors back, lets each pipe's thread pass on and scan what
    /// is left up to the end mark, and answers where each needle was seen; an error when
    /// a thread did not reach the end mark in time (then nothing can be said).
    pub(crate) fn close(mut self) -> Result<Seen, String> {
        let redirects = std::mem::take(&mut self.redirects);
        let mut seen = Seen::default();
        let mut failure = None;
        for redirect in redirects.into_iter().rev() {
            let fd = redirect.fd;
            match restore(redirect, &self.end_mark) {
                Ok(found) => {
                    if seen.per_needle.len() < found.len() {
                        seen.per_needle.resize(found.len(), Vec::new());
                    }
                    for (i, hit) in found.into_iter().enumerate() {
                        if hit {
                            seen.per_needle[i].insert(0, fd.name());
                        }
                    }
                }
                Err(e) => failure = Some(format!("the host's {}: {e}", fd.name())),
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(seen),
        }
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        for redirect in std::mem::take(&mut self.redirects).into_iter().rev() {
            let _ = restore(redirect, &self.end_mark);
        }
    }
}

fn redirect(fd: Fd, needles: Vec<String>, end_mark: Vec<u8>) -> std::io::Result<Redirect> {
    let original = fd.current()?;
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(std::io::Error::from)?;
    let passed_on = File::from(original.try_clone()?);
    let (tx, found) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(format!("envrt host {}", fd.name()))
        .spawn(move || {
            let mut pipe = File::from(read);
            let mut passed_on = passed_on;
            let (found, after) = scan(&mut pipe, &mut passed_on, &needles, &end_mark);
            let _ = tx.send(found);
            // A process started while the tee was open may hold the pipe still: keep
            // passing on what it writes (closing the read end would kill it with SIGPIPE)
            // until the last writer is gone.
            let _ = passed_on.write_all(&after);
            let _ = std::io::copy(&mut pipe, &mut passed_on);
        })?;
    fd.flush();
    fd.point_at(&write)?;
    Ok(Redirect {
        fd,
        original,
        writer: File::from(write),
        found,
    })
}

fn restore(mut redirect: Redirect, end_mark: &[u8]) -> Result<Found, String> {
    redirect.fd.flush();
    redirect
        .fd
        .point_at(&redirect.original)
        .map_err(|e| format!("cannot put the descriptor back: {e}"))?;
    redirect
        .writer
        .write_all(end_mark)
        .map_err(|e| format!("cannot write the end mark: {e}"))?;
    drop(redirect.writer);
    redirect
        .found
        .recv_timeout(DRAIN)
        .map_err(|_| format!("its pipe did not reach the end mark within {} s", DRAIN.as_secs()))
}

/// Reads `pipe` until `end_mark` (or the end of the pipe), passing every byte before the
/// mark on to `out`, and answers which needles the bytes held (also across reads), and
/// what was read after the mark.
fn scan(pipe: &mut File, out: &mut File, needles: &[String], end_mark: &[u8]) -> (Found, Vec<u8>) {
    let mut found = vec![false; needles.len()];
    // What is kept back from a read: the longest a needle or the mark may reach into the
    // next one.
    let overlap = needles
        .iter()
        .map(String::len)
        .chain([end_mark.len()])
        .max()
        .unwrap_or(1)
        .saturating_sub(1);
    let mut window: Vec<u8> = Vec::new();
    // How much of `window`'s front has been passed on already.
    let mut passed = 0;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => {
                let _ = out.write_all(&window[passed..]);
                return (found, Vec::new());
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return (found, Vec::new()),
        };
        window.extend_from_slice(&buf[..n]);
        let end = find(&window, end_mark);
        let text = &window[..end.unwrap_or(window.len())];
        for (i, needle) in needles.iter().enumerate() {
            found[i] |= find(text, needle.as_bytes()).is_some();
        }
        if let Some(end) = end {
            let _ = out.write_all(&window[passed..end]);
            return (found, window[end + end_mark.len()..].to_vec());
        }
        // Pass on all but what may be the start of the end mark.
        let safe = (window.len() - mark_start(&window, end_mark)).max(passed);
        let _ = out.write_all(&window[passed..safe]);
        passed = safe;
        let keep_from = window.len().saturating_sub(overlap).min(passed);
        window.drain(..keep_from);
        passed -= keep_from;
    }
}

/// The length of the longest end of `window` that is the start of `mark` (shorter than
/// the mark: a whole one is found by [`find`]).
fn mark_start(window: &[u8], mark: &[u8]) -> usize {
    (1..mark.len().min(window.len() + 1))
        .rev()
        .find(|&n| window.ends_with(&mark[..n]))
        .unwrap_or(0)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scan across reads: a needle split between two writes is found, every byte
    /// before the end mark is passed on in order, nothing from the mark on.
    #[test]
    fn the_scan_finds_split_needles_and_passes_everything_before_the_mark_on() {
        let (read, write) = rustix::pipe::pipe().unwrap();
        let (out_read, out_write) = rustix::pipe::pipe().unwrap();
        let needles = vec!["secret-needle".to_owned(), "absent".to_owned()];
        let scanner = std::thread::spawn(move || {
            let (mut pipe, mut out) = (File::from(read), File::from(out_write));
            scan(&mut pipe, &mut out, &needles, b"<END>")
        });
        let mut write = File::from(write);
        let mut expected = Vec::new();
        for part in [
            &b"hello sec"[..],
            b"ret-nee",
            b"dle and more ",
            b"<EN",
            b"D> not passed",
        ] {
            write.write_all(part).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        expected.extend_from_slice(b"hello secret-needle and more ");
        drop(write);
        assert_eq!(
            scanner.join().unwrap(),
            (vec![true, false], b" not passed".to_vec()),
            "the needles, and what came after the mark"
        );
        let mut passed = Vec::new();
        File::from(out_read).read_to_end(&mut passed).unwrap();
        assert_eq!(String::from_utf8_lossy(&passed), String::from_utf8_lossy(&expected));
    }

    #[test]
    fn only_a_possible_start_of_the_mark_is_held_back() {
        assert_eq!(mark_start(b"line\n", b"<END>"), 0);
        assert_eq!(mark_start(b"line\n<E", b"<END>"), 2);
        assert_eq!(mark_start(b"<", b"<END>"), 1);
        assert_eq!(mark_start(b"", b"<END>"), 0);
    }

    #[test]
    fn the_scan_ends_at_the_end_of_the_pipe_without_a_mark() {
        let (read, write) = rustix::pipe::pipe().unwrap();
        let (out_read, out_write) = rustix::pipe::pipe().unwrap();
        let mut write = File::from(write);
        write.write_all(b"abc <EN").unwrap();
        drop(write);
        let (mut pipe, mut out) = (File::from(read), File::from(out_write));
        let found = scan(&mut pipe, &mut out, &["abc".to_owned()], b"<END>");
        drop(out);
        assert_eq!(found, (vec![true], Vec::new()));
        let mut passed = Vec::new();
        File::from(out_read).read_to_end(&mut passed).unwrap();
        assert_eq!(passed, b"abc <EN");
    }
}
