//! What a sandboxed command cannot reach of the worker and the host: no descriptor the
//! worker holds beyond its stdio (however it came by it), not the status pipe of its
//! sandbox init.

mod common;

use std::os::fd::AsRawFd;

use common::*;
use serde_json::{Value, json};

fn run(w: &mut Worker, lease: &str, script: &str) -> Value {
    w.ok(
        "environmentExecute",
        on_lease(
            lease,
            json!({"command": "sh", "args": ["-c", script], "timeoutMs": 20000}),
        ),
    )
}

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

#[test]
fn a_descriptor_the_worker_inherited_does_not_reach_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("root-only");
    std::fs::write(&secret, "root only\n").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    // no O_CLOEXEC: the worker inherits both from this process
    let file = rustix::fs::open(&secret, rustix::fs::OFlags::RDWR, rustix::fs::Mode::empty()).unwrap();
    let host_root = rustix::fs::open(
        "/",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    let (f, d) = (file.as_raw_fd(), host_root.as_raw_fd());
    let mut w = Worker::ready();
    drop((file, host_root));
    let lease = w.acquire();
    let r = run(
        &mut w,
        &lease,
        &format!(
            "ls -l /proc/self/fd/; [ -e /proc/self/fd/{f} ] && cat <&{f}; [ -e /proc/self/fd/{d} ] && ls /proc/self/fd/{d}/; echo end"
        ),
    );
    let out = r["stdout"].as_str().unwrap();
    assert_eq!(out.lines().last(), Some("end"), "{r}");
    assert!(!out.contains("root only"), "{r}");
    // not the host's descriptors, and not the init's status pipe either
    assert_eq!(descriptors_beyond_stdio(out), Vec::<String>::new(), "{r}");
}
