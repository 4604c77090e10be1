//! Disk full and read-only, on a small tmpfs each test mounts (the tests run as root, as
//! CI does): a sync out to a host directory there fails with one exact text and leaves no
//! partial file, on local and Docker; the lease store on such a file system refuses with an
//! exact text and keeps every lease it had acknowledged. Docker skips loudly without an
//! engine (fails with `ENVRT_REQUIRE_DOCKER=1`).

mod faults;

use std::path::{Path, PathBuf};
use std::process::Command;

use faults::{Scratch, environment, last_error_line};

/// A size-limited tmpfs mounted at a directory, unmounted (lazily) when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(at)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount: {}", String::from_utf8_lossy(&out.stderr));
        Tmpfs(at.to_owned())
    }

    fn remount(&self, mode: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,{mode}")])
            .arg(&self.0)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "remount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Fills the file system with one file until it refuses (ENOSPC).
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 64 * 1024];
        loop {
            if let Err(e) = file.write_all(&block) {
                assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
                return path;
            }
        }
    }

    fn entries(&self) -> Vec<String> {
        std::fs::read_dir(&self.0)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Sync out of a 4 MB file and of a directory holding 1.2 MB to a 1 MiB tmpfs, then of a
/// small file to it read-only: each fails with the one text, and nothing is left there.
fn sync_out_refused(key: &str, s: &Scratch, env: &str) {
    let fs = Tmpfs::mount(&s.path().join("small"), "1m");
    let id = s.acquire(env);
    let made = s.run(&[
        "exec",
        "--lease",
        &id,
        "--",
        "sh",
        "-c",
        "head -c 4000000 /dev/urandom > big; mkdir d; head -c 300000 /dev/urandom > d/a; \
         head -c 900000 /dev/urandom > d/b; echo small > little",
    ]);
    assert_eq!(made.status.code(), Some(0), "{}", String::from_utf8_lossy(&made.stderr));
    let text = |target: &Path, why: &str| {
        format!(
            "Sync out stopped: the file system of \"{}\" is {why}; nothing partial was left there.",
            target.display()
        )
    };
    for (source, name) in [("big", "big"), ("d", "d")] {
        let target = fs.0.join(name);
        let out = s.run(&["cp", "-q", &format!("lease:{id}:{source}"), target.to_str().unwrap()]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{key} {source}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(last_error_line(&out), text(&target, "full"), "{key} {source}");
        assert_eq!(
            fs.entries(),
            Vec::<String>::new(),
            "{key} {source}: left on the full file system"
        );
    }
    fs.remount("ro");
    let target = fs.0.join("little");
    let out = s.run(&["cp", "-q", &format!("lease:{id}:little"), target.to_str().unwrap()]);
    fs.remount("rw");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{key}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(last_error_line(&out), text(&target, "read-only"), "{key}");
    assert_eq!(fs.entries(), Vec::<String>::new());
    // The same copy where there is room works: the lease was not harmed.
    let out = s.run(&["cp", "-q", &format!("lease:{id}:little"), target.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&target).unwrap(), b"small\n");
    let out = s.run(&["lease", "release", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    drop(fs);
    s.assert_no_leaks(key);
}

#[test]
fn local_sync_out_to_a_full_or_read_only_file_system_leaves_nothing() {
    let s = Scratch::new(&environment("loc", "local", ""));
    sync_out_refused("local", &s, "loc");
}

#[test]
fn docker_sync_out_to_a_full_or_read_only_file_system_leaves_nothing() {
    let Some(image) = envrt_test_support::docker::image_or_skip() else {
        return;
    };
    let s = Scratch::new(&environment("ctr", "docker", &format!("image = \"{image}\"\n")));
    sync_out_refused("docker", &s, "ctr");
}

#[test]
fn sandbox_sync_out_to_a_full_or_read_only_file_system_leaves_nothing() {
    if envrt_test_support::sandbox::worker_beside_or_skip(faults::BIN).is_none() {
        return;
    }
    let s = Scratch::new(&environment("box", "sandbox", ""));
    sync_out_refused("sandbox", &s, "box");
}

/// Every path under `dir` (sorted), to compare a file system before and after a call.
fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap().flatten() {
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            }
            found.push(entry.path());
        }
    }
    found.sort();
    found
}

/// Sync in of a 4 MB file and of a directory holding 1.2 MB into a lease whose workspaces
/// live on a 1 MiB tmpfs (mounted at `root` before the lease is acquired): each fails
/// with the one text and leaves the file system as it was; a small file still lands.
fn sync_in_refused(key: &str, s: &Scratch, env: &str, root: &Path) {
    let fs = Tmpfs::mount(root, "1m");
    let id = s.acquire(env);
    std::fs::write(s.path().join("big"), vec![1u8; 4_000_000]).unwrap();
    std::fs::create_dir(s.path().join("d")).unwrap();
    std::fs::write(s.path().join("d/a"), vec![2u8; 300_000]).unwrap();
    std::fs::write(s.path().join("d/b"), vec![3u8; 900_000]).unwrap();
    std::fs::write(s.path().join("little"), b"small\n").unwrap();
    // a first command makes what the driver makes for any command (the sandbox's /tmp)
    let out = s.run(&["exec", "--lease", &id, "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let before = listing(&fs.0);
    for source in ["big", "d"] {
        let out = s.run(&["cp", "-q", source, &format!("lease:{id}:{source}")]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{key} {source}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            last_error_line(&out),
            format!(
                "Sync in stopped: the file system of \"{source}\" in the lease is full; nothing partial was left there."
            ),
            "{key} {source}"
        );
        assert_eq!(listing(&fs.0), before, "{key} {source}: left on the full file system");
    }
    let out = s.run(&["cp", "-q", "little", &format!("lease:{id}:little")]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = s.run(&["exec", "--lease", &id, "--", "cat", "little"]);
    assert_eq!(out.stdout, b"small\n", "{}", String::from_utf8_lossy(&out.stderr));
    let out = s.run(&["lease", "release", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    s.assert_no_leaks(key);
    drop(fs);
}

#[test]
fn local_sync_in_to_a_full_workspace_file_system_leaves_nothing() {
    let s = Scratch::new(&environment("loc", "local", ""));
    sync_in_refused("local", &s, "loc", &s.state().join("workspaces"));
}

#[test]
fn sandbox_sync_in_to_a_full_lease_file_system_leaves_nothing() {
    if envrt_test_support::sandbox::worker_beside_or_skip(faults::BIN).is_none() {
        return;
    }
    let s = Scratch::new(&environment("box", "sandbox", ""));
    sync_in_refused("sandbox", &s, "box", &s.state().join("sandbox"));
}

/// The store's file system fills, then turns read-only: every call refuses with the exact
/// text, the lease acknowledged before is still there (and releasable) once the file
/// system has room again, and no acquire made a resource it did not record.
#[test]
fn a_store_on_a_full_or_read_only_file_system_refuses_and_keeps_its_leases() {
    let s = Scratch::new(&environment("loc", "local", ""));
    let fs = Tmpfs::mount(&s.state(), "2m");
    let kept = s.acquire("loc");
    let db = s.state().join("leases.db");
    let refused = |why: &str| {
        format!(
            "Lease store error: cannot open \"{}\": its file system is {why}",
            db.display()
        )
    };
    let filler = fs.fill();
    for call in [
        vec!["lease", "acquire", "--env-id", "loc", "--detached"],
        vec!["lease", "list"],
    ] {
        let out = s.run(&call);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{call:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(last_error_line(&out), refused("full"), "{call:?}");
    }
    std::fs::remove_file(filler).unwrap();
    fs.remount("ro");
    for call in [
        vec!["lease", "acquire", "--env-id", "loc", "--detached"],
        vec!["lease", "release", &kept],
    ] {
        let out = s.run(&call);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{call:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(last_error_line(&out), refused("read-only"), "{call:?}");
    }
    fs.remount("rw");
    let lease = s.lease(&kept);
    assert_eq!(lease["status"], "active", "{lease}");
    let workspaces: Vec<_> = std::fs::read_dir(s.state().join("workspaces"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        workspaces,
        vec![format!("lease-{kept}")],
        "a refused acquire left a workspace"
    );
    let out = s.run(&["lease", "release", &kept]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    s.assert_no_leaks("local");
    drop(fs);
}
