//! Measuring helpers: percentiles, interleaved timing, shell baselines, resident memory,
//! and the private tmpfs the copy benchmarks run on.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The p-th percentile (0–100) of `samples` in milliseconds.
pub(crate) fn percentile_ms(samples: &[Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted: Vec<Duration> = samples.to_vec();
    sorted.sort();
    let index = ((sorted.len() as f64 - 1.0) * p / 100.0).round() as usize;
    sorted[index.min(sorted.len() - 1)].as_secs_f64() * 1e3
}

/// The median of `values` (the mean of the middle two for an even count).
pub(crate) fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

/// Latency samples of several contenders, taken interleaved (one run of each per round),
/// so that drift from other load on the machine hits every contender alike.
pub(crate) struct Interleaved {
    pub(crate) samples: Vec<Vec<Duration>>,
}

impl Interleaved {
    pub(crate) fn p(&self, contender: usize, p: f64) -> f64 {
        percentile_ms(&self.samples[contender], p)
    }
}

/// Runs `warmup` then `rounds` rounds; each round calls `run(i)` for every contender
/// `i < contenders` and records its wall time. The first error stops the measurement.
pub(crate) async fn interleave<F, Fut>(
    contenders: usize,
    warmup: usize,
    rounds: usize,
    mut run: F,
) -> Result<Interleaved, String>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    interleave_reported(contenders, warmup, rounds, |i| {
        let call = run(i);
        async move {
            let start = Instant::now();
            call.await?;
            Ok(start.elapsed())
        }
    })
    .await
}

/// [`interleave`] for contenders that report their own duration (a peer timed inside its
/// own process, without the pipe back to the bench).
pub(crate) async fn interleave_reported<F, Fut>(
    contenders: usize,
    warmup: usize,
    rounds: usize,
    mut run: F,
) -> Result<Interleaved, String>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<Duration, String>>,
{
    for _ in 0..warmup {
        for i in 0..contenders {
            run(i).await?;
        }
    }
    let mut samples = vec![Vec::with_capacity(rounds); contenders];
    for round in 0..rounds {
        for k in 0..contenders {
            // Rotate the order so no contender always runs right after another one.
            let i = (k + round) % contenders;
            samples[i].push(run(i).await?);
        }
    }
    Ok(Interleaved { samples })
}

/// Times one future.
pub(crate) async fn time<T, Fut: Future<Output = Result<T, String>>>(fut: Fut) -> Result<(Duration, T), String> {
    let start = Instant::now();
    let value = fut.await?;
    Ok((start.elapsed(), value))
}

/// Runs `sh -c script` with output discarded; fails unless it exits 0.
pub(crate) async fn sh(script: &str) -> Result<(), String> {
    let out = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .await
        .map_err(|e| format!("cannot run sh: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{script}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Times `sh -c script` (the shell's own start is included, a fraction of a millisecond).
pub(crate) async fn time_sh(script: &str) -> Result<Duration, String> {
    Ok(time(sh(script)).await?.0)
}

/// Quotes a path for `sh`.
pub(crate) fn q(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// This process's resident set size in KiB (`VmRSS` of /proc/self/status).
pub(crate) fn rss_kib() -> f64 {
    rss_of("self")
}

/// A process's resident set size in KiB; 0 when unreadable.
pub(crate) fn rss_of(pid: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0.0)
}

/// Bytes per second as GB/s.
pub(crate) fn gbps(bytes: u64, took: Duration) -> f64 {
    bytes as f64 / took.as_secs_f64() / 1e9
}

/// Bytes per second as MiB/s.
pub(crate) fn mibps(bytes: u64, took: Duration) -> f64 {
    bytes as f64 / (1u64 << 20) as f64 / took.as_secs_f64()
}

/// A private tmpfs mounted under a fresh temporary directory; unmounted on drop. When
/// mounting fails (not root), the plain temporary directory is used and
/// [`Scratch::is_tmpfs`] says so.
pub(crate) struct Scratch {
    dir: tempfile::TempDir,
    mounted: bool,
}

impl Scratch {
    pub(crate) fn new(size: &str) -> Result<Scratch, String> {
        let dir = tempfile::Builder::new()
            .prefix("envrt-bench-")
            .tempdir()
            .map_err(|e| format!("cannot create a temp dir: {e}"))?;
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "envrt-bench"])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        Ok(Scratch { dir, mounted })
    }

    pub(crate) fn join(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn is_tmpfs(&self) -> bool {
        self.mounted
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.mounted {
            let ok = std::process::Command::new("umount")
                .arg(self.dir.path())
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !ok {
                // Something still holds it: detach it so it goes when the holder does.
                let _ = std::process::Command::new("umount")
                    .arg("-l")
                    .arg(self.dir.path())
                    .status();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_medians() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile_ms(&samples, 50.0), 51.0);
        assert_eq!(percentile_ms(&samples, 99.0), 99.0);
        assert_eq!(percentile_ms(&samples, 100.0), 100.0);
        assert!(percentile_ms(&[], 50.0).is_nan());
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(q(Path::new("/a b/it's")), r"'/a b/it'\''s'");
    }

    #[tokio::test]
    async fn interleave_runs_every_contender_each_round() {
        let calls = std::sync::Mutex::new(Vec::new());
        let calls_ref = &calls;
        let m = interleave(3, 1, 4, |i| async move {
            calls_ref.lock().unwrap().push(i);
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!(m.samples.iter().map(Vec::len).collect::<Vec<_>>(), [4, 4, 4]);
        let calls = calls.into_inner().unwrap();
        assert_eq!(calls.len(), 15);
        // Rounds rotate the order: round 0 starts with 0, round 1 with 1.
        assert_eq!(&calls[3..9], &[0, 1, 2, 1, 2, 0]);
        let err = interleave(1, 0, 1, |_| async { Err::<(), _>("boom".to_string()) }).await;
        assert_eq!(err.err().as_deref(), Some("boom"));
    }
}
