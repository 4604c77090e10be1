//! A hostile command against the reference worker run as root: it cannot write host
//! kernel settings, is not root, request variables never act outside the sandbox, and
//! its processes, memory and tmpfs space are bounded.

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::{Value, json};

fn sh(w: &mut Worker, lease: &str, script: &str, env: Value) -> Value {
    w.ok(
        "environmentExecute",
        on_lease(
            lease,
            json!({"command": "sh", "args": ["-c", script], "env": env, "timeoutMs": 60000}),
        ),
    )
}

fn running_as_root() -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        eprintln!("SKIPPED: these checks need the worker to run as root (as in CI)");
    }
    root
}

fn lease_dir(w: &Worker, lease: &str) -> PathBuf {
    w.root.path().join(lease)
}

#[test]
fn no_file_under_proc_sys_is_writable_and_the_command_is_not_root() {
    if !running_as_root() {
        return;
    }
    let mut w = Worker::ready();
    let lease = w.acquire();
    let host = |p: &str| std::fs::read_to_string(p).unwrap();
    let (ratelimit, core_pattern) = (
        host("/proc/sys/kernel/printk_ratelimit"),
        host("/proc/sys/kernel/core_pattern"),
    );
    // Opening for writing is enough to tell (nothing is written); the two named files are
    // also written with their own value, which changes nothing even where it succeeds.
    let script = r#"
        echo "uid=$(id -u)"
        n=0
        for f in $(find /proc/sys -type f 2>/dev/null); do
            if (exec 3>>"$f") 2>/dev/null; then n=$((n+1)); echo "writable $f"; fi
        done
        echo "writable=$n"
        v=$(cat /proc/sys/kernel/printk_ratelimit)
        echo "$v" > /proc/sys/kernel/printk_ratelimit 2>/dev/null && echo wrote-printk
        cat /proc/sys/kernel/core_pattern > /tmp/cp
        cat /tmp/cp > /proc/sys/kernel/core_pattern 2>/dev/null && echo wrote-core
        for f in /proc/sysrq-trigger /proc/irq /proc/bus /proc/fs; do
            [ -e "$f" ] || continue
            if (exec 3>>"$f") 2>/dev/null; then echo "writable $f"; fi
            touch "$f/x" 2>/dev/null && echo "writable $f/x"
        done
        for f in /proc/keys /proc/timer_list /proc/kcore /proc/sched_debug; do
            [ -e "$f" ] || continue
            echo "$f: $(cat "$f" 2>/dev/null | wc -c) bytes"
        done
        touch /workspace/mine && echo workspace-writable
    "#;
    let r = sh(&mut w, &lease, script, json!({}));
    let out = r["stdout"].as_str().unwrap();
    let uid: u32 = out
        .lines()
        .next()
        .unwrap()
        .strip_prefix("uid=")
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(uid, 0, "{out}");
    assert!(out.contains("writable=0\n"), "{out}");
    assert!(!out.contains("writable /") && !out.contains("wrote-"), "{out}");
    for masked in ["/proc/keys", "/proc/timer_list"] {
        if std::path::Path::new(masked).exists() {
            assert!(out.contains(&format!("{masked}: 0 bytes")), "{masked} is masked: {out}");
        }
    }
    assert!(out.contains("workspace-writable"), "{out}");
    assert_eq!(host("/proc/sys/kernel/printk_ratelimit"), ratelimit);
    assert_eq!(host("/proc/sys/kernel/core_pattern"), core_pattern);
    // Files the worker writes into the workspace are the command's to change.
    let src = tempfile::tempdir().unwrap();
    std::fs::create_dir(src.path().join("d")).unwrap();
    std::fs::write(src.path().join("d/f.txt"), "synced").unwrap();
    w.ok(
        "environmentSyncIn",
        on_lease(
            &lease,
            json!({"operations": [{"operationId": "o", "files": [{"sourcePath": src.path().join("d"),
                "targetPath": "/workspace/deep/er/d", "kind": "directory"}]}]}),
        ),
    );
    let r = sh(
        &mut w,
        &lease,
        "echo more >> /workspace/deep/er/d/f.txt && mkdir /workspace/deep/er/d/new && cat /workspace/deep/er/d/f.txt",
        json!({}),
    );
    assert_eq!(
        (r["exitCode"].clone(), r["stdout"].clone()),
        (json!(0), json!("syncedmore\n")),
        "{r}"
    );
}

#[test]
fn ld_variables_of_a_request_act_only_inside_the_sandbox() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let dir = lease_dir(&w, &lease);
    // A library that leaves a mark in /tmp when loaded, built in the workspace.
    let host_mark = std::env::temp_dir().join(marker("preload-mark"));
    let source = dir.join("mark.c");
    std::fs::write(
        &source,
        format!(
            "#include <fcntl.h>\n#include <unistd.h>\n__attribute__((constructor)) static void mark(void) {{\n\
             int fd = open(\"{}\", O_CREAT | O_WRONLY | O_APPEND, 0666);\n\
             if (fd >= 0) {{ write(fd, \"loaded\\n\", 7); close(fd); }}\n}}\n",
            host_mark.display()
        ),
    )
    .unwrap();
    let lib = dir.join("mark.so");
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&source)
        .status();
    if !built.is_ok_and(|s| s.success()) {
        panic!("cc could not build the preload library");
    }
    let debug_dir = tempfile::tempdir().unwrap();
    let debug_out = debug_dir.path().join("ld-debug");
    // The host path of the library (what an attacker aims at bwrap) and its sandbox path.
    let preload = format!("{} /workspace/mark.so", lib.display());
    let r = sh(
        &mut w,
        &lease,
        &format!("grep -c loaded '{}'", host_mark.display()),
        json!({"LD_PRELOAD": preload}),
    );
    // Inside: the library was loaded (its marks are in the sandbox's own /tmp).
    assert_eq!(r["exitCode"], 0, "{r}");
    assert_ne!(r["stdout"], "0\n", "{r}");
    let r = sh(
        &mut w,
        &lease,
        "echo \"$LD_DEBUG_OUTPUT\"",
        json!({"LD_DEBUG": "files", "LD_DEBUG_OUTPUT": debug_out}),
    );
    assert!(
        r["stdout"].as_str().unwrap().contains(debug_out.to_str().unwrap()),
        "{r}"
    );
    // Outside: nothing ran the library, nothing wrote debug files.
    assert!(
        !host_mark.exists(),
        "the library ran on the host: {}",
        host_mark.display()
    );
    let written: Vec<_> = std::fs::read_dir(debug_dir.path()).unwrap().flatten().collect();
    assert!(written.is_empty(), "ld.so wrote host files: {written:?}");
}

#[test]
fn a_secret_value_is_in_no_host_side_process() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let secret = marker("bwrap-secret");
    let mark = marker("bwrap-mark");
    let id = w.send(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sleep", "args": ["30"], "env": {"SECRET": secret, "MARK": mark}, "timeoutMs": 20000}),
        ),
    );
    wait_for_process(&mark);
    // bwrap: the worker's child
    let worker = w.child.id();
    let children = std::fs::read_to_string(format!("/proc/{worker}/task/{worker}/children")).unwrap_or_default();
    let mut bwraps = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{worker}/task")).unwrap().flatten() {
        let path = task.path().join("children");
        let list = std::fs::read_to_string(path).unwrap_or_default() + " " + &children;
        for pid in list.split_whitespace() {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            if exe.ends_with("bwrap") && !bwraps.contains(&pid.to_owned()) {
                bwraps.push(pid.to_owned());
            }
        }
    }
    assert!(!bwraps.is_empty(), "no bwrap child of the worker found");
    for pid in bwraps {
        for file in ["cmdline", "environ"] {
            let bytes = std::fs::read(format!("/proc/{pid}/{file}")).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(&secret),
                "bwrap {pid} shows the value in its {file}"
            );
            if file == "environ" {
                assert!(bytes.is_empty(), "bwrap {pid} runs with an environment: {bytes:?}");
            }
        }
    }
    w.close_stdin();
    assert_eq!(w.wait_exit(), Some(0));
    let _ = id;
}

#[test]
fn a_lease_root_below_private_directories_is_reached_through_a_private_view() {
    if !running_as_root() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let private = tempfile::tempdir().unwrap();
    let state = private.path().join("state");
    std::fs::create_dir(&state).unwrap();
    for dir in [private.path(), state.as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let root = state.join("sandbox");
    let mut w = Worker::ready_with(&["--root", root.to_str().unwrap()]);
    let lease = w.acquire();
    assert!(root.join(&lease).is_dir());
    let r = sh(&mut w, &lease, "echo hi > f; cat f; id -u", json!({}));
    assert_eq!(
        (r["exitCode"].clone(), r["stdout"].clone()),
        (json!(0), json!("hi\n65534\n")),
        "{r}"
    );
    assert_eq!(std::fs::read_to_string(root.join(&lease).join("f")).unwrap(), "hi\n");
    // nothing of the view is visible on the host but its (empty) directory, removed at exit
    let pid = w.child.id();
    let views = || -> Vec<PathBuf> {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("envrt-sandbox-view-{pid}-")))
            })
            .collect()
    };
    let made = views();
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(
        std::fs::read_dir(made[0].join("leases")).unwrap().count(),
        0,
        "the bind is private"
    );
    w.close_stdin();
    assert_eq!(w.wait_exit(), Some(0));
    assert_eq!(views(), Vec::<PathBuf>::new());
}

#[test]
fn processes_memory_and_tmpfs_space_are_bounded() {
    let mut w = Worker::ready_with(&[
        "--max-processes",
        "40",
        "--max-memory",
        "268435456",
        // a sized tmpfs /tmp per command (the default /tmp is the lease's own directory)
        "--fresh-tmp",
        "--tmp-size",
        "1048576",
        "--shm-size",
        "1048576",
    ]);
    let lease = w.acquire();
    // tmpfs fillers hit the size; the rest of /dev is read-only
    let r = sh(
        &mut w,
        &lease,
        "for f in /tmp/fill /dev/shm/fill; do head -c 5000000 /dev/zero > $f 2>/dev/null; echo \"$f $(wc -c < $f)\"; done; \
         touch /dev/new 2>/dev/null && echo dev-writable; echo done",
        json!({}),
    );
    assert_eq!(r["stdout"], "/tmp/fill 1048576\n/dev/shm/fill 1048576\ndone\n", "{r}");
    // a memory hog gets MemoryError at the address-space limit
    let r = w.ok(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "python3", "args": ["-c", "b = bytearray(1024 * 1024 * 1024)"], "timeoutMs": 60000}),
        ),
    );
    assert_eq!(r["exitCode"], 1, "{r}");
    assert!(r["stderr"].as_str().unwrap().contains("MemoryError"), "{r}");
    // a fork bomb stops at the process limit
    let bomb = "import os, time\nn = 0\nfor i in range(200):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n    if pid == 0:\n        time.sleep(2)\n        os._exit(0)\n    n += 1\nprint(n)\n";
    let r = w.ok(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "python3", "args": ["-c", bomb], "timeoutMs": 60000}),
        ),
    );
    let forked: u32 = r["stdout"]
        .as_str()
        .unwrap()
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{r}"));
    assert!(forked < 40, "forked {forked} processes past the limit of 40: {r}");
    // the worker (and the host) carry on
    assert_eq!(w.ok("health", json!({}))["status"], "ok");
    let r = sh(&mut w, &lease, "echo alive", json!({}));
    assert_eq!(r["stdout"], "alive\n");
}

#[test]
fn a_lease_made_by_an_older_worker_is_writable_after_resume() {
    if !running_as_root() {
        return;
    }
    let mut w = Worker::ready();
    let lease = w.acquire();
    let dir = lease_dir(&w, &lease);
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/old.txt"), "old").unwrap();
    // as an older worker left it: everything root's
    for path in [dir.clone(), dir.join("sub"), dir.join("sub/old.txt")] {
        rustix::fs::chown(&path, Some(rustix::fs::Uid::ROOT), Some(rustix::fs::Gid::ROOT)).unwrap();
    }
    let r = w.ok(
        "environmentResumeLease",
        json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1", "config": {}, "providerLeaseId": lease}),
    );
    assert_eq!(r["providerLeaseId"], json!(lease));
    let r = sh(
        &mut w,
        &lease,
        "echo new >> sub/old.txt && touch sub/more && cat sub/old.txt",
        json!({}),
    );
    assert_eq!(
        (r["exitCode"].clone(), r["stdout"].clone()),
        (json!(0), json!("oldnew\n")),
        "{r}"
    );
}
