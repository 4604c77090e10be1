//! Measures a local template capture and a lease started from it against `cp -a` on the
//! same file system, in one run: `cp --reflink=never` (a byte copy) and
//! `cp --reflink=always` (shared blocks, where the file system can).
//!
//! ```text
//! cargo run --release -p envrt-driver-local --example template_capture -- ROOT [MIB] [FILES]
//! ```
//!
//! ROOT is where the driver keeps workspaces and templates (put it on btrfs or XFS with
//! reflink to see `FICLONE` at work); MIB (default 256) is spread over FILES (default 64).

use std::sync::Arc;
use std::time::{Duration, Instant};

use envrt_driver_local::{LocalConfig, LocalDriver};
use envrt_runtime_core::{AcquireRequest, Environment, EnvironmentRuntime, LeaseStatus};

fn cp(flag: &str, from: &std::path::Path, to: &std::path::Path) -> Duration {
    let started = Instant::now();
    let status = std::process::Command::new("cp")
        .args(["-a", flag])
        .arg(from.join("."))
        .arg(to)
        .status()
        .expect("cp");
    assert!(status.success(), "cp {flag} failed");
    started.elapsed()
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let root = std::path::PathBuf::from(args.next().ok_or("usage: template_capture ROOT [MIB] [FILES]")?);
    let mib: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(256);
    let files: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(64);
    let driver = Arc::new(LocalDriver::new(LocalConfig {
        root: Some(root.join(format!("bench-{}", std::process::id()))),
        ..LocalConfig::default()
    })?);
    let runtime = EnvironmentRuntime::new();
    runtime.register_driver(driver.clone());
    runtime
        .put_environment(Environment::new("bench", "Bench", "local"))
        .await?;
    let source = runtime.acquire_lease(AcquireRequest::new("bench", "acme")).await?;
    let workspace = driver.workspace_of(&source.id)?;
    let chunk: Vec<u8> = (0..mib * 1024 * 1024 / files).map(|i| (i % 251) as u8).collect();
    for n in 0..files {
        std::fs::write(workspace.join(format!("file-{n}")), &chunk)?;
    }
    // Written back first: a clone of dirty pages waits for their write-back, which would
    // be charged to whichever measurement comes first.
    std::process::Command::new("sync").status()?;
    // Baselines on the same file system.
    let scratch = driver.root().join("cp-baseline");
    std::fs::create_dir(&scratch)?;
    let never = cp("--reflink=never", &workspace, &scratch);
    std::fs::remove_dir_all(&scratch)?;
    std::fs::create_dir(&scratch)?;
    let always = std::process::Command::new("cp")
        .args(["-a", "--reflink=always"])
        .arg(workspace.join("file-0"))
        .arg(&scratch)
        .status()?
        .success()
        .then(|| {
            std::fs::remove_dir_all(&scratch).ok();
            std::fs::create_dir(&scratch).ok();
            cp("--reflink=always", &workspace, &scratch)
        });
    std::fs::remove_dir_all(&scratch)?;

    let started = Instant::now();
    let template = runtime.capture_template(&source.id, None).await?;
    let capture = started.elapsed();
    let mut request = AcquireRequest::new("bench", "acme");
    request.template = Some(template.id.clone());
    let started = Instant::now();
    let lease = runtime.acquire_lease(request).await?;
    let seeded = started.elapsed();

    println!("{mib} MiB in {files} files under {}", root.display());
    println!(
        "capture:            {} ({} files cloned, {} copied)",
        ms(capture),
        template.metadata["filesCloned"],
        template.metadata["filesCopied"]
    );
    println!("acquire from it:    {}", ms(seeded));
    println!("cp --reflink=never: {}", ms(never));
    match always {
        Some(always) => println!("cp --reflink=always: {}", ms(always)),
        None => println!("cp --reflink=always: not supported on this file system"),
    }
    println!(
        "capture / cp --reflink=never: {:.3}",
        capture.as_secs_f64() / never.as_secs_f64()
    );
    for l in [&source, &lease] {
        runtime.release_lease(&l.id, LeaseStatus::Released).await?;
    }
    runtime.delete_template("bench", "acme", &template.id).await?;
    std::fs::remove_dir(driver.root())?;
    Ok(())
}
