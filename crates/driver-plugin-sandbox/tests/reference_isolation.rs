//! What a sandboxed command cannot reach on the host, through the host and the reference
//! worker on real `bwrap`: no descriptor of the host program (a root-only file, the host's
//! root directory) however it was opened.

mod host_common;

use std::os::fd::AsRawFd;

use envrt_driver_plugin_sandbox::SandboxOptions;
use envrt_runtime_core::{ExecuteRequest, LeaseStatus};
use host_common::*;

/// The targets of the descriptors above 2 in an `ls -l /proc/self/fd/` listing, less
/// the directory `ls` itself reads.
fn descriptors_beyond_stdio(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|l| l.split_once(" -> "))
        .filter(|(left, _)| {
            left.rsplit(' ')
                .next()
                .is_some_and(|n| n.parse::<u32>().is_ok_and(|n| n > 2))
        })
        .map(|(_, target)| target.to_owned())
        .filter(|t| !(t.starts_with("/proc/") && t.ends_with("/fd")))
        .collect()
}

#[tokio::test]
async fn a_sandboxed_command_inherits_no_host_descriptor() {
    let root = TempDir::new("descriptors");
    let secret = root.join("root-only");
    std::fs::write(&secret, "root only\n").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    // no O_CLOEXEC, opened before the worker starts: it would inherit them
    let file = rustix::fs::open(&secret, rustix::fs::OFlags::RDWR, rustix::fs::Mode::empty()).unwrap();
    let host_root = rustix::fs::open(
        "/",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    let (f, d) = (file.as_raw_fd(), host_root.as_raw_fd());
    let Some(manifest) = reference_manifest(&root.join("leases")) else {
        return;
    };
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver).await;
    let lease = acquire(&runtime).await;
    let script = format!(
        "ls -l /proc/self/fd/; [ -e /proc/self/fd/{f} ] && cat <&{f}; [ -e /proc/self/fd/{d} ] && ls /proc/self/fd/{d}/; echo end"
    );
    let r = bounded(
        "execute",
        runtime.execute(&lease.id, ExecuteRequest::new("sh", ["-c", script.as_str()])),
    )
    .await
    .unwrap();
    let out = String::from_utf8_lossy(&r.stdout);
    assert_eq!(out.lines().last(), Some("end"), "{out}");
    assert!(!out.contains("root only"), "{out}");
    assert_eq!(descriptors_beyond_stdio(&out), Vec::<String>::new(), "{out}");
    drop((file, host_root));
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}
