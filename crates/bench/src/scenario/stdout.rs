//! Output capture (row 4, `stdout`): bytes streamed through execute's sink on the local
//! target vs a bare pipe and a bare tokio pipe read.

use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use crate::Config;
use crate::baseline;
use crate::measure::{gbps, interleave};
use crate::report::{Figure, Row, Target};
use crate::targets::local::Local;

/// A bare tokio spawn of `head -c bytes /dev/zero` read through its stdout pipe with
/// 64 KiB reads (what a tokio-based reader can do at best, for comparison).
async fn tokio_pipe(bytes: u64) -> Result<Duration, String> {
    let start = Instant::now();
    let mut child = tokio::process::Command::new("head")
        .args(["-c", &bytes.to_string(), "/dev/zero"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawning head: {e}"))?;
    let mut out = child.stdout.take().ok_or("no stdout")?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen = 0u64;
    loop {
        let n = out.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        seen += n as u64;
    }
    child.wait().await.map_err(|e| e.to_string())?;
    if seen != bytes {
        return Err(format!("tokio pipe: read {seen} of {bytes}"));
    }
    Ok(start.elapsed())
}

/// Row 4: stdout through execute's streaming sink vs a bare pipe.
pub(crate) async fn local(config: &Config) -> Vec<Row> {
    let bytes = config.stream_bytes();
    let name = format!("stdout {} MiB via execute sink (local)", bytes >> 20);
    let local = match Local::open(None).await {
        Ok(l) => l,
        Err(e) => return vec![Row::missing("stdout", 4, name, e)],
    };
    let l = &local.leased;
    let measured = interleave(4, 0, config.reps(), |i| async move {
        match i {
            0 => l.stream_stdout(bytes).await.map(|_| ()),
            1 => baseline::pipe(bytes).await.map(|_| ()),
            2 => tokio_pipe(bytes).await.map(|_| ()),
            _ => baseline::pipe_into_buffer(bytes).await.map(|_| ()),
        }
    })
    .await;
    local.leased.close().await;
    match measured {
        Ok(m) => {
            let rate = |i: usize| gbps(bytes, Duration::from_secs_f64(m.p(i, 50.0) / 1e3));
            vec![
                Row::new("stdout", 4, name, Figure::gbps(rate(0)))
                    .baseline("bare pipe", Figure::gbps(rate(1)))
                    .baseline("tokio pipe read", Figure::gbps(rate(2)))
                    .floor("pipe read into a preallocated buffer", Figure::gbps(rate(3)))
                    .target(Target::RatioAtLeast(0, 0.8))
                    .note("median of the runs; \"tokio pipe read\" is a bare tokio spawn read with 64 KiB reads"),
            ]
        }
        Err(e) => vec![Row::missing("stdout", 4, name, format!("error: {e}"))],
    }
}
