//! Sync of paths outside `/workspace` (marker `envrtFilesAnywhere`): copied inside a
//! sandbox of the lease, with its view and its user's permissions, so links a command
//! plants cannot lead anywhere on the host, read-only places stay read-only, and what is
//! written persists for the lease's next commands.

mod common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};

fn file(source: impl AsRef<Path>, target: &str) -> Value {
    json!({"sourcePath": source.as_ref(), "targetPath": target, "kind": "file"})
}

fn op(files: Value) -> Value {
    json!({"operations": [{"operationId": "op", "files": files}]})
}

fn sh(w: &mut Worker, lease: &str, script: &str) -> Value {
    w.ok(
        "environmentExecute",
        on_lease(lease, json!({"command": "sh", "args": ["-c", script]})),
    )
}

#[test]
fn nested_new_directories_under_tmp_are_made_and_kept_for_later_commands() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("f.txt"), "hello tmp").unwrap();
    let r = w.ok(
        "environmentSyncIn",
        on_lease(&lease, op(json!([file(host.path().join("f.txt"), "/tmp/a/b/c/f.txt")]))),
    );
    assert_eq!(r["operations"][0]["filesTransferred"], 1, "{r}");
    // a later command sees it, owned by the sandbox user
    let r = sh(&mut w, &lease, "cat /tmp/a/b/c/f.txt; stat -c ' %u' /tmp/a/b/c/f.txt");
    assert_eq!(r["stdout"], "hello tmp 65534\n", "{r}");
    // and it comes back out, with what a command added next to it
    sh(&mut w, &lease, "echo more > /tmp/a/b/c/g.txt");
    let out = host.path().join("out");
    w.ok(
        "environmentSyncOut",
        on_lease(
            &lease,
            op(json!([{"sourcePath": "/tmp/a", "targetPath": out, "kind": "directory"}])),
        ),
    );
    assert_eq!(std::fs::read_to_string(out.join("b/c/f.txt")).unwrap(), "hello tmp");
    assert_eq!(std::fs::read_to_string(out.join("b/c/g.txt")).unwrap(), "more\n");
    // nothing of the transfer is left beside the lease
    let left: Vec<_> = std::fs::read_dir(w.root.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".envrt-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn links_planted_in_tmp_lead_only_where_a_command_could_go() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    // A host file and directory no sandbox can see.
    let secret = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(secret.path().join("secret"), "host secret").unwrap();
    let script = format!(
        "ln -s /etc/shadow /tmp/shadow; ln -s {0}/secret /tmp/host; ln -s {0} /tmp/hostdir",
        secret.path().display()
    );
    sh(&mut w, &lease, &script);
    let host = tempfile::tempdir().unwrap();
    for link in ["/tmp/shadow", "/tmp/host"] {
        // followed, the link is read in the sandbox, where its target does not exist
        let (code, message) = w.err(
            "environmentSyncOut",
            on_lease(
                &lease,
                op(json!([{"sourcePath": link, "targetPath": host.path().join("x"), "kind": "file", "followSymlinks": true}])),
            ),
        );
        assert_eq!(
            (code, message),
            (-32002, format!("Sync source \"{link}\" does not exist."))
        );
        // not followed, it is a link out of the copied tree
        let (code, message) = w.err(
            "environmentSyncOut",
            on_lease(&lease, op(json!([file(link, host.path().join("x").to_str().unwrap())]))),
        );
        let name = &link[5..];
        let target = host.path().join("x");
        assert_eq!(
            (code, message),
            (
                -32602,
                format!(
                    "Entry \"{name}\" would be written outside the target \"{}\".",
                    target.display()
                )
            )
        );
    }
    assert!(!host.path().join("x").exists());
    // Writing through a planted directory link never reaches the host directory.
    std::fs::write(host.path().join("in.txt"), "planted").unwrap();
    let r = w.call(
        "environmentSyncIn",
        on_lease(
            &lease,
            op(json!([file(host.path().join("in.txt"), "/tmp/hostdir/new.txt")])),
        ),
    );
    assert!(r.get("error").is_some(), "{r}");
    // Writing onto a planted file link replaces the link in the sandbox, not its target.
    w.ok(
        "environmentSyncIn",
        on_lease(&lease, op(json!([file(host.path().join("in.txt"), "/tmp/host")]))),
    );
    assert_eq!(sh(&mut w, &lease, "cat /tmp/host")["stdout"], "planted");
    let mut names: Vec<_> = std::fs::read_dir(secret.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["secret"]);
    assert_eq!(
        std::fs::read_to_string(secret.path().join("secret")).unwrap(),
        "host secret"
    );
}

#[test]
fn read_only_places_and_unreadable_files_are_refused_as_the_sandbox_user() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("in.txt"), "x").unwrap();
    for target in [
        "/usr/envrt-sync-probe",
        "/usr/lib/envrt/deep/probe",
        "/etc/passwd",
        "/newdir/f",
    ] {
        let (code, message) = w.err(
            "environmentSyncIn",
            on_lease(&lease, op(json!([file(host.path().join("in.txt"), target)]))),
        );
        assert_eq!(
            (code, message),
            (
                -32002,
                format!("Writing \"{target}\" in the sandbox: Read-only file system (os error 30)")
            )
        );
    }
    assert!(!Path::new("/usr/envrt-sync-probe").exists());
    assert!(!Path::new("/usr/lib/envrt").exists());
    // A file its owner made unreadable: the sandbox user cannot read it, so neither can sync.
    sh(&mut w, &lease, "echo hidden > /tmp/secret; chmod 000 /tmp/secret");
    let out = host.path().join("out");
    let (code, message) = w.err(
        "environmentSyncOut",
        on_lease(&lease, op(json!([file("/tmp/secret", out.to_str().unwrap())]))),
    );
    assert_eq!(
        (code, message),
        (
            -32002,
            "Reading \"/tmp/secret\" in the sandbox: Permission denied (os error 13)".to_owned()
        )
    );
    assert!(!out.exists());
}

#[test]
fn etc_reads_as_the_sandbox_sees_it() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let host = tempfile::tempdir().unwrap();
    let out = host.path().join("etc");
    let (code, message) = w.err(
        "environmentSyncOut",
        on_lease(&lease, op(json!([file("/etc", out.to_str().unwrap())]))),
    );
    assert_eq!(
        (code, message),
        (-32002, "Sync source \"/etc\" is not a file.".to_owned())
    );
    w.ok(
        "environmentSyncOut",
        on_lease(
            &lease,
            // its alternatives are links out of /etc, refused unless followed
            op(json!([{"sourcePath": "/etc", "targetPath": out, "kind": "directory", "exclude": ["alternatives"]}])),
        ),
    );
    // the sandbox's minimal /etc: users and groups, never the host's shadow file
    assert_eq!(
        std::fs::read(out.join("passwd")).unwrap(),
        std::fs::read("/etc/passwd").unwrap()
    );
    assert!(!out.join("shadow").exists());
    assert!(!out.join("ssh").exists());
}

/// Inspect's `test_read_file_nonsense_name`: a relative name whose parents do not exist
/// is a missing source, not an I/O failure.
#[test]
fn a_source_below_missing_directories_does_not_exist() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let host = tempfile::tempdir().unwrap();
    for source in ["https:/en.wikipedia.org/wiki/X", "/tmp/no/such/file"] {
        let (code, message) = w.err(
            "environmentSyncOut",
            on_lease(
                &lease,
                op(json!([file(source, host.path().join("x").to_str().unwrap())])),
            ),
        );
        assert_eq!(
            (code, message),
            (-32002, format!("Sync source \"{source}\" does not exist."))
        );
    }
}
