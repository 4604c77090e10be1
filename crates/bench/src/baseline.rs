//! The bare baselines that need no driver: a tokio spawn, a shell pipe (also read into a
//! buffer), `cp -a`, `tar | tar`.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::measure::{q, time_sh};

/// A bare `tokio::process` spawn of `program` with piped stdout/stderr, waited for with
/// its output collected (what execute does, minus everything else).
pub(crate) async fn spawn(program: &str, args: &[&str]) -> Result<(), String> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("spawning {program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{program} exited {}", out.status))
    }
}

/// The floor of an execute: a bare blocking `std::process::Command` spawn (`posix_spawn`
/// on glibc, `fork`+`exec` where it cannot) and wait, no output read, no async runtime.
/// It blocks the calling tokio worker for the spawn's duration, which is what it measures.
pub(crate) fn posix_spawn(program: &str, args: &[&str]) -> Result<(), String> {
    let status = std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("spawning {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{program} exited {status}"))
    }
}

/// `head -c bytes /dev/zero | cat > /dev/null`; returns the time.
pub(crate) async fn pipe(bytes: u64) -> Result<Duration, String> {
    time_sh(&format!("head -c {bytes} /dev/zero | cat > /dev/null")).await
}

/// `head -c bytes /dev/zero | cat` spawned by the bench and its stdout read into one
/// buffer (allocated up front) to the end; returns the time from the spawn to the exit.
pub(crate) async fn pipe_into_buffer(bytes: u64) -> Result<Duration, String> {
    use tokio::io::AsyncReadExt;
    let mut buffer = Vec::with_capacity(bytes as usize);
    let start = std::time::Instant::now();
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", &format!("head -c {bytes} /dev/zero | cat")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawning sh: {e}"))?;
    let mut out = child.stdout.take().ok_or("no stdout")?;
    out.read_to_end(&mut buffer).await.map_err(|e| e.to_string())?;
    let status = child.wait().await.map_err(|e| e.to_string())?;
    let took = start.elapsed();
    if !status.success() || buffer.len() as u64 != bytes {
        return Err(format!("pipe read: {} of {bytes} bytes, {status}", buffer.len()));
    }
    Ok(took)
}

/// `cp -a from to`.
pub(crate) async fn cp_a(from: &Path, to: &Path) -> Result<Duration, String> {
    time_sh(&format!("cp -a {} {}", q(from), q(to))).await
}

/// `tar -C from -cf - . | tar -C to -xf -` (`to` is created first, outside the timing).
pub(crate) async fn tar_tar(from: &Path, to: &Path) -> Result<Duration, String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    time_sh(&format!("tar -C {} -cf - . | tar -C {} -xf -", q(from), q(to))).await
}

/// Removes a file or a tree if present.
pub(crate) fn remove(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            let _ = std::fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(path);
        }
        Err(_) => {}
    }
}

/// Writes the small-file tree: `count` files of 1 KiB in directories of 100.
pub(crate) fn make_small_tree(root: &Path, count: usize) -> Result<(), String> {
    let content = vec![b'x'; 1024];
    for i in 0..count {
        let dir = root.join(format!("d{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let file = dir.join(format!("f{i:05}.txt"));
        std::fs::write(&file, &content).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    Ok(())
}

/// Writes one file of `bytes` (pseudo-random blocks, so nothing can be elided).
pub(crate) fn make_big_file(path: &Path, bytes: u64) -> Result<(), String> {
    use std::io::Write;
    let mut file = std::io::BufWriter::with_capacity(
        1 << 20,
        std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?,
    );
    let mut block = vec![0u8; 1 << 20];
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for chunk in block.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
    let mut left = bytes;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        file.write_all(&block[..n])
            .map_err(|e| format!("{}: {e}", path.display()))?;
        block[0] = block[0].wrapping_add(1);
        left -= n as u64;
    }
    file.flush().map_err(|e| format!("{}: {e}", path.display()))
}
