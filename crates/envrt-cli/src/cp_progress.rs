//! The progress line `envrt cp` draws on stderr while a copy runs (only when stderr is a
//! terminal and `--quiet` is not given; nothing on a pipe): a spinner, the elapsed time,
//! and what is known of the size. Copying out of a lease into a host directory, the bytes
//! landed so far in the host staging directory are watched: their count and rate, and with
//! the source's size (the lease's `du -sk`, rounded to KiB) an ETA. Copying in, the host
//! source's size is shown (what has landed in the lease cannot be watched from here).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What the line knows about the copy.
#[derive(Debug, Default, Clone)]
pub(crate) struct Measure {
    /// The size of the source in bytes, when known.
    pub(crate) total: Option<u64>,
    /// A host path whose size grows as the copy lands, when there is one.
    pub(crate) landing: Option<PathBuf>,
}

/// The bytes of regular files under `path` (the path itself when it is a file); links are
/// not followed. Unreadable entries count 0.
pub(crate) fn tree_size(path: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_file() {
            total += meta.len();
        } else if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(&p)
        {
            stack.extend(entries.flatten().map(|e| e.path()));
        }
    }
    total
}

/// `1.5 MiB` style.
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The text after the spinner: bytes, rate and ETA as far as they are known.
pub(crate) fn status(done: Option<u64>, total: Option<u64>, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    match (done, total) {
        (Some(done), Some(total)) => {
            let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
            let eta = if rate > 0.0 && total > done {
                format!(", ETA {:.0} s", (total - done) as f64 / rate)
            } else {
                String::new()
            };
            format!(
                "{} of {}, {}/s{eta} ({secs:.1} s)",
                human_bytes(done.min(total)),
                human_bytes(total),
                human_bytes(rate as u64)
            )
        }
        (None, Some(total)) => format!("{} ({secs:.1} s)", human_bytes(total)),
        (Some(done), None) => {
            let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
            format!("{}, {}/s ({secs:.1} s)", human_bytes(done), human_bytes(rate as u64))
        }
        (None, None) => format!("({secs:.1} s)"),
    }
}

/// A spinner on stderr while the copy runs, drawn by its own thread (measuring a tree
/// blocks); stopped and cleared when dropped.
pub(crate) struct Progress {
    drawer: Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
}

impl Progress {
    pub(crate) fn start(show: bool, label: String, measure: Measure) -> Progress {
        if !show {
            return Progress { drawer: None };
        }
        const FRAMES: [char; 4] = ['|', '/', '-', '\\'];
        let started = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let drawer = std::thread::spawn(move || {
            // The first frame right away, so even a quick copy shows what it did.
            for i in 0.. {
                let done = measure.landing.as_deref().map(tree_size);
                let line = status(done, measure.total, started.elapsed());
                {
                    let mut err = std::io::stderr().lock();
                    let _ = write!(err, "\r\x1b[2K{} {label} {line}", FRAMES[i % FRAMES.len()]);
                    let _ = err.flush();
                }
                for _ in 0..4 {
                    if stopped.load(Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        });
        Progress {
            drawer: Some((stop, drawer)),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some((stop, drawer)) = self.drawer.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = drawer.join();
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_shows_bytes_rate_and_eta_when_the_total_is_known() {
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(
            status(Some(1024 * 1024), Some(4 * 1024 * 1024), Duration::from_secs(2)),
            "1.0 MiB of 4.0 MiB, 512.0 KiB/s, ETA 6 s (2.0 s)"
        );
        assert_eq!(status(None, Some(2048), Duration::from_millis(500)), "2.0 KiB (0.5 s)");
        assert_eq!(
            status(Some(2048), None, Duration::from_secs(2)),
            "2.0 KiB, 1.0 KiB/s (2.0 s)"
        );
        assert_eq!(status(None, None, Duration::from_millis(1500)), "(1.5 s)");
    }
}
