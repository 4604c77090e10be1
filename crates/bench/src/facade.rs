//! One lease through the `EnvironmentRuntime` facade, and the operations every driver's
//! rows time through it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use envrt_runtime_core::{
    AcquireRequest, Environment, EnvironmentDriver, EnvironmentRuntime, ExecuteRequest, JsonMap, LeaseStatus, Offsets,
    OutputEvent, OutputStream, ProcessInfo, ProcessStatus, ProcessStream, SpawnRequest, SyncFile, SyncOperation,
};

/// A runtime with one driver and one active lease on it.
pub(crate) struct Leased {
    pub(crate) runtime: Arc<EnvironmentRuntime>,
    pub(crate) lease: String,
    /// The provider's handle (the container id for Docker).
    pub(crate) provider_lease_id: Option<String>,
    /// The environment id, for acquiring more leases.
    pub(crate) environment: String,
}

impl Leased {
    /// Registers `driver`, puts an environment with `config`, acquires one lease.
    pub(crate) async fn open(driver: Arc<dyn EnvironmentDriver>, config: JsonMap) -> Result<Leased, String> {
        let key = driver.key().to_owned();
        let runtime = Arc::new(EnvironmentRuntime::new());
        runtime.register_driver(driver);
        let environment = format!("bench-{key}");
        runtime
            .put_environment(Environment::new(&environment, format!("bench {key}"), &key).with_config(config))
            .await
            .map_err(|e| e.to_string())?;
        let lease = runtime
            .acquire_lease(AcquireRequest::new(&environment, "bench"))
            .await
            .map_err(|e| format!("acquiring a {key} lease: {e}"))?;
        Ok(Leased {
            runtime,
            lease: lease.id,
            provider_lease_id: lease.provider_lease_id,
            environment,
        })
    }

    /// Releases the lease.
    pub(crate) async fn close(self) {
        let _ = self.runtime.release_lease(&self.lease, LeaseStatus::Released).await;
    }

    /// Runs `argv` and fails unless it exits 0.
    pub(crate) async fn run(&self, argv: &[&str]) -> Result<(), String> {
        run_on(&self.runtime, &self.lease, argv).await
    }

    /// Streams `bytes` of zeros from `head -c` through execute's sink; returns the time.
    pub(crate) async fn stream_stdout(&self, bytes: u64) -> Result<Duration, String> {
        let seen = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&seen);
        let mut request = ExecuteRequest::new("head", ["-c".to_string(), bytes.to_string(), "/dev/zero".into()]);
        request.sink = Some(Arc::new(move |stream: OutputStream, chunk: &[u8]| {
            if stream == OutputStream::Stdout {
                counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
        }));
        let start = Instant::now();
        let result = self
            .runtime
            .execute(&self.lease, request)
            .await
            .map_err(|e| e.to_string())?;
        let took = start.elapsed();
        let seen = seen.load(Ordering::Relaxed);
        if !result.success() || seen != bytes {
            return Err(format!(
                "streaming {bytes} bytes: exit {:?}, sink saw {seen}: {}",
                result.exit_code,
                String::from_utf8_lossy(&result.stderr)
            ));
        }
        Ok(took)
    }

    /// Reads `bytes` of zeros from `head -c` over a duplex channel; returns the time
    /// from opening to the end of output.
    pub(crate) async fn duplex_read(&self, bytes: u64) -> Result<Duration, String> {
        let argv = ["head".to_string(), "-c".into(), bytes.to_string(), "/dev/zero".into()];
        let start = Instant::now();
        let channel = self
            .runtime
            .open_duplex_channel(&self.lease, &argv)
            .await
            .map_err(|e| e.to_string())?;
        channel.close_input().await.map_err(|e| e.to_string())?;
        let mut seen = 0u64;
        while let Some(chunk) = channel.read().await.map_err(|e| e.to_string())? {
            seen += chunk.len() as u64;
        }
        let took = start.elapsed();
        let exit = channel.wait().await.map_err(|e| e.to_string())?;
        let _ = channel.close().await;
        if seen != bytes || exit.exit_code != Some(0) {
            return Err(format!("duplex read of {bytes} bytes: got {seen}, exit {exit:?}"));
        }
        Ok(took)
    }

    /// Writes `bytes` into `cat > /dev/null` over a duplex channel in 64 KiB writes;
    /// returns the time from opening to the command's exit.
    pub(crate) async fn duplex_write(&self, bytes: u64) -> Result<Duration, String> {
        let argv = ["sh".to_string(), "-c".into(), "exec cat > /dev/null".into()];
        let block = vec![0u8; 64 * 1024];
        let start = Instant::now();
        let channel = self
            .runtime
            .open_duplex_channel(&self.lease, &argv)
            .await
            .map_err(|e| e.to_string())?;
        let mut left = bytes;
        while left > 0 {
            let n = left.min(block.len() as u64) as usize;
            channel.write(&block[..n]).await.map_err(|e| e.to_string())?;
            left -= n as u64;
        }
        channel.close_input().await.map_err(|e| e.to_string())?;
        while channel.read().await.map_err(|e| e.to_string())?.is_some() {}
        let exit = channel.wait().await.map_err(|e| e.to_string())?;
        let took = start.elapsed();
        let _ = channel.close().await;
        if exit.exit_code != Some(0) {
            return Err(format!("duplex write of {bytes} bytes: exit {exit:?}"));
        }
        Ok(took)
    }

    /// Syncs one entry in (host `source` → environment `target`); returns the time.
    pub(crate) async fn sync_in(&self, entry: SyncFile) -> Result<Duration, String> {
        let operation = operation(entry);
        let start = Instant::now();
        self.runtime
            .sync_in(&self.lease, &[operation])
            .await
            .map_err(|e| format!("sync in: {e}"))?;
        Ok(start.elapsed())
    }

    /// Syncs one entry out (environment `source` → host `target`); returns the time.
    pub(crate) async fn sync_out(&self, entry: SyncFile) -> Result<Duration, String> {
        let operation = operation(entry);
        let start = Instant::now();
        self.runtime
            .sync_out(&self.lease, &[operation])
            .await
            .map_err(|e| format!("sync out: {e}"))?;
        Ok(start.elapsed())
    }
}

/// What a process session row spawns: `argv`, holding `keep` bytes per stream.
fn spawn_request(argv: &[&str], keep: u64) -> SpawnRequest {
    let mut request = SpawnRequest::new(argv.iter().copied());
    request.keep = Some(keep);
    request
}

impl Leased {
    /// Spawns `argv` (a persistent process, contract section 9) holding `keep` bytes per
    /// stream.
    pub(crate) async fn spawn(&self, argv: &[&str], keep: u64) -> Result<ProcessInfo, String> {
        self.runtime
            .spawn(&self.lease, spawn_request(argv, keep))
            .await
            .map_err(|e| format!("spawn: {e}"))
    }

    /// Spawns `sh -c 'echo x; exec sleep 60'` and reads its output from offset 0 until the
    /// first chunk; returns the time from the spawn call to that chunk. The process is
    /// then killed and waited for, untimed.
    pub(crate) async fn spawn_to_first_byte(&self) -> Result<Duration, String> {
        let start = Instant::now();
        let info = self.spawn(&["sh", "-c", "echo x; exec sleep 60"], 4096).await?;
        let id = info.id.to_string();
        let first = async {
            let mut output = self
                .runtime
                .output(&id, &Offsets::zero())
                .await
                .map_err(|e| format!("output: {e}"))?;
            loop {
                match output.next().await.map_err(|e| format!("output: {e}"))? {
                    Some(OutputEvent::Chunk(chunk)) if chunk.bytes.is_empty() => {}
                    Some(OutputEvent::Chunk(chunk)) => return Ok((start.elapsed(), chunk)),
                    Some(OutputEvent::Exit(info)) => {
                        return Err(format!("{id} ended before any output: {}", info.status));
                    }
                    None => return Err(format!("{id}: the output ended before any byte")),
                }
            }
        }
        .await;
        let _ = self.runtime.signal(&id, "KILL").await;
        let _ = self.runtime.wait_process(&id, Some(Duration::from_secs(10))).await;
        let (took, chunk) = first?;
        if chunk.stream != ProcessStream::Stdout || chunk.offset != 0 || !chunk.bytes.starts_with(b"x") {
            return Err(format!("{id}: unexpected first chunk {chunk:?}"));
        }
        Ok(took)
    }

    /// Spawns `head -c bytes /dev/zero` holding `bytes` per stream and waits (untimed)
    /// until it has exited with every byte held; answers its id.
    pub(crate) async fn spawn_held_output(&self, bytes: u64) -> Result<String, String> {
        let info = self
            .spawn(&["head", "-c", &bytes.to_string(), "/dev/zero"], bytes)
            .await?;
        let id = info.id.to_string();
        let status = self
            .runtime
            .wait_process(&id, Some(Duration::from_secs(120)))
            .await
            .map_err(|e| format!("wait: {e}"))?;
        let info = self.runtime.process(&id).await.map_err(|e| format!("process: {e}"))?;
        let held = info.stream(ProcessStream::Stdout).map(|s| (s.written, s.dropped));
        if status != (ProcessStatus::Exited { code: 0 }) || held != Some((bytes, 0)) {
            return Err(format!(
                "{id}: {status}, stdout (written, dropped) {held:?}, expected ({bytes}, 0)"
            ));
        }
        Ok(id)
    }

    /// Reads process `id`'s stdout from offset 0 into one buffer (allocated up front)
    /// through `output` until its exit; returns the time from the `output` call to the
    /// exit, and fails unless exactly `bytes` arrived.
    pub(crate) async fn replay(&self, id: &str, bytes: u64) -> Result<Duration, String> {
        let mut buffer = Vec::with_capacity(bytes as usize);
        let from = Offsets::default().with(ProcessStream::Stdout, 0);
        let start = Instant::now();
        let mut output = self
            .runtime
            .output(id, &from)
            .await
            .map_err(|e| format!("output: {e}"))?;
        loop {
            match output.next().await.map_err(|e| format!("output: {e}"))? {
                Some(OutputEvent::Chunk(chunk)) if chunk.stream == ProcessStream::Stdout => {
                    buffer.extend_from_slice(&chunk.bytes)
                }
                Some(OutputEvent::Chunk(_)) => {}
                Some(OutputEvent::Exit(_)) | None => break,
            }
        }
        let took = start.elapsed();
        if buffer.len() as u64 != bytes {
            return Err(format!("replay of {id}: {} of {bytes} bytes", buffer.len()));
        }
        Ok(took)
    }
}

fn operation(entry: SyncFile) -> SyncOperation {
    SyncOperation {
        operation_id: "bench".into(),
        files: vec![entry],
        post_upload_commands: Vec::new(),
    }
}

/// Runs `argv` on `lease` and fails unless it exits 0.
pub(crate) async fn run_on(runtime: &EnvironmentRuntime, lease: &str, argv: &[&str]) -> Result<(), String> {
    let request = ExecuteRequest::new(argv[0], argv[1..].iter().copied());
    let result = runtime.execute(lease, request).await.map_err(|e| e.to_string())?;
    if result.success() {
        Ok(())
    } else {
        Err(format!(
            "{argv:?} exited {:?}: {}",
            result.exit_code,
            String::from_utf8_lossy(&result.stderr).trim()
        ))
    }
}
