//! What a sandboxed command cannot reach on the host, through the host and the reference
//! worker on real `bwrap`: no descriptor of the host program (a root-only file, the host's
//! root directory) however it was opened; the request's variables act on the command only
//! (not on the sandbox init, which sets the limits before anything of the request runs);
//! `HOME` is the workspace.

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

fn sh(script: &str) -> ExecuteRequest {
    ExecuteRequest::new("sh", ["-c", script])
}

/// A preload library whose constructor forks up to 1500 children (each waits to be
/// killed with its sandbox) and prints how many it got, built with gcc in `dir`.
fn fork_bomb_library(dir: &std::path::Path) -> Vec<u8> {
    let source = dir.join("bomb.c");
    std::fs::write(
        &source,
        r#"#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void bomb(void) {
    int n = 0;
    for (int i = 0; i < 1500; i++) {
        pid_t p = fork();
        if (p == 0) { pause(); _exit(0); }
        if (p < 0) break;
        n++;
    }
    fprintf(stderr, "forked %d\n", n);
}
"#,
    )
    .unwrap();
    let library = dir.join("bomb.so");
    let built = std::process::Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .output()
        .expect("gcc runs");
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    std::fs::read(&library).unwrap()
}

#[tokio::test]
async fn a_preloaded_library_runs_in_the_command_only_and_under_its_process_limit() {
    let root = TempDir::new("preload");
    let Some(manifest) = reference_manifest(&root.join("leases")) else {
        return;
    };
    let library = fork_bomb_library(root.path());
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver).await;
    let lease = acquire(&runtime).await;
    let mut upload = sh("cat > bomb.so");
    upload.stdin = Some(library);
    let r = bounded("upload", runtime.execute(&lease.id, upload)).await.unwrap();
    assert_eq!(r.exit_code, Some(0), "{}", String::from_utf8_lossy(&r.stderr));
    let mut bomb = ExecuteRequest::new("true", Vec::<String>::new());
    bomb.env.insert("LD_PRELOAD".into(), "/workspace/bomb.so".into());
    bomb.timeout = Some(std::time::Duration::from_secs(60));
    let r = bounded("execute", runtime.execute(&lease.id, bomb)).await.unwrap();
    let stderr = String::from_utf8_lossy(&r.stderr);
    let forked: Vec<u32> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("forked "))
        .map(|n| n.parse().unwrap())
        .collect();
    // the command's own constructor ran (and no other: the init never loaded it), and
    // with the init and the command counted, it got fewer than the 1024 processes
    assert_eq!(forked.len(), 1, "{stderr}");
    assert!(forked[0] > 0 && forked[0] < 1024, "{stderr}");
    assert_eq!(r.exit_code, Some(0), "{stderr}");
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

#[tokio::test]
async fn the_sandbox_init_holds_none_of_the_request_variables() {
    let root = TempDir::new("init-env");
    let Some(manifest) = reference_manifest(&root.join("leases")) else {
        return;
    };
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver).await;
    let lease = acquire(&runtime).await;
    // pid 2 of the sandbox's namespace is its init (pid 1 is bwrap's own)
    let mut request = sh("tr '\\0' ' ' < /proc/2/cmdline; echo; tr '\\0' '\\n' < /proc/2/environ; echo \"end $PROBE\"");
    request.env.insert("PROBE".into(), "request-value".into());
    request.env.insert("LD_PRELOAD".into(), "".into());
    let r = bounded("execute", runtime.execute(&lease.id, request)).await.unwrap();
    let out = String::from_utf8_lossy(&r.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("/.envrt-init --sandbox-init "), "{out}");
    // The init is not dumpable: the command cannot even open its variables (which hold
    // nothing but the PWD bwrap sets, as `tests/worker_uids.rs` reads from the host), then
    // the command's own line (it has the variable).
    assert_eq!(&lines[1..], ["end request-value"], "{out}");
    assert_eq!(
        String::from_utf8_lossy(&r.stderr),
        "sh: 1: cannot open /proc/2/environ: Permission denied\n"
    );
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

#[tokio::test]
async fn home_is_the_workspace_unless_the_request_sets_it() {
    let root = TempDir::new("home");
    let Some(manifest) = reference_manifest(&root.join("leases")) else {
        return;
    };
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver).await;
    let lease = acquire(&runtime).await;
    let r = bounded(
        "execute",
        runtime.execute(&lease.id, sh("echo \"$HOME\"; cd && pwd && touch .profile-probe")),
    )
    .await
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        "/workspace\n/workspace\n",
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert_eq!(r.exit_code, Some(0));
    let mut request = sh("echo \"$HOME\"");
    request.env.insert("HOME".into(), "/tmp".into());
    let r = bounded("execute", runtime.execute(&lease.id, request)).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&r.stdout), "/tmp\n");
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}
