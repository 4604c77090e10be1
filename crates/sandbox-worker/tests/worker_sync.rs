//! `environmentSyncIn` / `environmentSyncOut`: trees, modes, excludes, links, post-upload
//! commands, and every escape refused with its exact text and nothing half-written.

mod common;

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use common::*;
use serde_json::{Value, json};

fn sync(w: &mut Worker, method: &str, lease: &str, operations: Value) -> Value {
    w.call(method, on_lease(lease, json!({"operations": operations})))
}

/// Every path below `dir`, relative, sorted (links shown with their target).
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(base).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.push(format!("{rel} -> {}", std::fs::read_link(&path).unwrap().display()));
            } else if meta.is_dir() {
                out.push(format!("{rel}/"));
                walk(base, &path, out);
            } else {
                out.push(rel);
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn host_source() -> tempfile::TempDir {
    let src = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(src.path().join("sub")).unwrap();
    std::fs::write(src.path().join("a.txt"), "hello").unwrap();
    std::fs::write(src.path().join("sub/b.txt"), "world!!").unwrap();
    std::fs::write(src.path().join("sub/skip.log"), "noise").unwrap();
    std::fs::set_permissions(src.path().join("a.txt"), std::fs::Permissions::from_mode(0o751)).unwrap();
    symlink("sub/b.txt", src.path().join("link-in")).unwrap();
    src
}

#[test]
fn sync_in_then_out_round_trip() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let src = host_source();
    let r = sync(
        &mut w,
        "environmentSyncIn",
        &lease,
        json!([{"operationId": "op-in-1",
            "files": [{"sourcePath": src.path(), "targetPath": "/workspace/proj", "kind": "directory", "exclude": ["*.log"]}],
            "postUploadCommands": [{"command": "ls -R > listing.txt", "cwd": "/workspace/proj"}]}]),
    );
    assert_eq!(
        r["result"],
        json!({"operations": [{"operationId": "op-in-1", "filesTransferred": 2, "bytesTransferred": 12}]})
    );
    let lease_dir = w.root.path().join(&lease);
    assert_eq!(
        tree(&lease_dir.join("proj")),
        ["a.txt", "link-in -> sub/b.txt", "listing.txt", "sub/", "sub/b.txt"]
    );
    // Modes are kept; the post-upload command ran in the sandbox (it sees /workspace).
    let mode = std::fs::metadata(lease_dir.join("proj/a.txt"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o751);
    let r = w.ok(
        "environmentExecute",
        on_lease(&lease, json!({"command": "cat", "args": ["proj/link-in"]})),
    );
    assert_eq!(r["stdout"], "world!!");

    // Out again: a tree, and one file with a mode.
    let dst = tempfile::tempdir().unwrap();
    let r = sync(
        &mut w,
        "environmentSyncOut",
        &lease,
        json!([{"operationId": "op-out-1", "files": [
            {"sourcePath": "/workspace/proj", "targetPath": dst.path().join("back"), "kind": "directory"},
            {"sourcePath": "proj/a.txt", "targetPath": dst.path().join("secret.txt"), "kind": "file", "mode": 384}]}]),
    );
    let result = &r["result"]["operations"][0];
    assert_eq!(result["filesTransferred"], 4, "{r}");
    assert_eq!(
        tree(dst.path()),
        [
            "back/",
            "back/a.txt",
            "back/link-in -> sub/b.txt",
            "back/listing.txt",
            "back/sub/",
            "back/sub/b.txt",
            "secret.txt"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(dst.path().join("back/sub/b.txt")).unwrap(),
        "world!!"
    );
    let mode = std::fs::metadata(dst.path().join("secret.txt"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    // Sync again over an existing target replaces it whole.
    std::fs::remove_file(src.path().join("a.txt")).unwrap();
    let r = sync(
        &mut w,
        "environmentSyncIn",
        &lease,
        json!([{"operationId": "op-in-2", "files": [{"sourcePath": src.path(), "targetPath": "proj", "kind": "directory",
            "exclude": ["*.log"]}]}]),
    );
    assert_eq!(r["result"]["operations"][0]["filesTransferred"], 1);
    assert_eq!(
        tree(&lease_dir.join("proj")),
        ["link-in -> sub/b.txt", "sub/", "sub/b.txt"]
    );
    assert_eq!(leftovers(&lease_dir), Vec::<String>::new());
    // The whole workspace out, by "." and by "/workspace": what landed, no staging debris.
    for (i, source) in [".", "/workspace"].iter().enumerate() {
        let whole = dst.path().join(format!("whole{i}"));
        let r = sync(
            &mut w,
            "environmentSyncOut",
            &lease,
            json!([{"operationId": "all", "files": [{"sourcePath": source, "targetPath": whole, "kind": "directory"}]}]),
        );
        assert_eq!(r["result"]["operations"][0]["filesTransferred"], 1, "{r}");
        assert_eq!(
            tree(&whole),
            ["proj/", "proj/link-in -> sub/b.txt", "proj/sub/", "proj/sub/b.txt"]
        );
    }
}

#[test]
fn follow_symlinks_copies_what_links_point_to() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let src = host_source();
    let r = sync(
        &mut w,
        "environmentSyncIn",
        &lease,
        json!([{"operationId": "op", "files": [{"sourcePath": src.path(), "targetPath": "p", "kind": "directory",
            "followSymlinks": true, "exclude": ["sub/skip.log"]}]}]),
    );
    assert_eq!(r["result"]["operations"][0]["filesTransferred"], 3, "{r}");
    assert_eq!(
        tree(&w.root.path().join(&lease).join("p")),
        ["a.txt", "link-in", "sub/", "sub/b.txt"]
    );
    // A directory into the workspace root merges entry by entry.
    let r = sync(
        &mut w,
        "environmentSyncIn",
        &lease,
        json!([{"operationId": "op", "files": [{"sourcePath": src.path().join("sub"), "targetPath": "/workspace", "kind": "directory"}]}]),
    );
    assert_eq!(r["result"]["operations"][0]["filesTransferred"], 2, "{r}");
    assert_eq!(
        tree(&w.root.path().join(&lease))
            .into_iter()
            .filter(|p| !p.starts_with("p/") && p != "p/")
            .collect::<Vec<_>>(),
        ["b.txt", "skip.log"]
    );
}

/// Staging or trash entries left in `dir`.
fn leftovers(dir: &Path) -> Vec<String> {
    tree(dir).into_iter().filter(|p| p.contains(".envrt-sync-")).collect()
}

#[test]
fn escapes_are_refused_with_exact_texts_and_nothing_is_written() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let lease_dir = w.root.path().join(&lease);
    let src = host_source();
    // 1. Targets with `..`. (Any absolute path of the sandbox is taken, and the sandbox
    // decides: its /etc is read-only, see worker_sync_anywhere.rs.)
    for target in ["../x", "/workspace/../x"] {
        let r = sync(
            &mut w,
            "environmentSyncIn",
            &lease,
            json!([{"operationId": "op", "files": [{"sourcePath": src.path(), "targetPath": target, "kind": "directory"}]}]),
        );
        assert_eq!(
            r["error"],
            json!({"code": -32602, "message": format!("Path \"{target}\" is outside the lease workspace."),
                "data": {"kind": "path_outside_workspace", "fields": {"path": target}}})
        );
    }
    // 2. A link made inside the sandbox leads where it leads in the sandbox (the
    // whole-environment scope): the copy then runs inside the sandbox as its user, so it
    // reaches only what a command could, never the host's files.
    w.ok(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sh", "args": ["-c", "ln -s /etc evil; ln -s ../.. up"]}),
        ),
    );
    let r = sync(
        &mut w,
        "environmentSyncIn",
        &lease,
        json!([{"operationId": "op", "files": [{"sourcePath": src.path().join("a.txt"), "targetPath": "evil/x", "kind": "file"}]}]),
    );
    assert_eq!(
        r["error"],
        json!({"code": -32002, "message": "Writing \"evil/x\" in the sandbox: Read-only file system (os error 30)"})
    );
    let dst = tempfile::tempdir().unwrap();
    for source in ["/workspace/evil/shadow", "up/etc/shadow"] {
        let r = sync(
            &mut w,
            "environmentSyncOut",
            &lease,
            json!([{"operationId": "op", "files": [{"sourcePath": source, "targetPath": dst.path().join("p"), "kind": "file"}]}]),
        );
        assert_eq!(
            r["error"],
            json!({"code": -32002, "message": format!("Sync source \"{source}\" does not exist."),
                "data": {"kind": "source_missing", "fields": {"path": source}}})
        );
    }
    // Following a link to what the sandbox lacks fails in the sandbox; copying it as a link
    // out of the tree is refused.
    w.ok(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sh", "args": ["-c", "mkdir d && ln -s /etc/shadow d/pw"]}),
        ),
    );
    let r = sync(
        &mut w,
        "environmentSyncOut",
        &lease,
        json!([{"operationId": "op", "files": [{"sourcePath": "d", "targetPath": dst.path().join("d"), "kind": "directory", "followSymlinks": true}]}]),
    );
    assert_eq!(
        r["error"]["message"],
        "Reading \"d\" in the sandbox: No such file or directory (os error 2)"
    );
    let r = sync(
        &mut w,
        "environmentSyncOut",
        &lease,
        json!([{"operationId": "op", "files": [{"sourcePath": "d", "targetPath": dst.path().join("d"), "kind": "directory"}]}]),
    );
    assert_eq!(
        r["error"],
        json!({"code": -32602, "message": format!("Entry \"pw\" would be written outside the target \"{}\".", dst.path().join("d").display()),
            "data": {"kind": "entry_escapes_target", "fields": {"entry": "pw", "target": dst.path().join("d")}}})
    );
    assert_eq!(
        tree(dst.path()),
        Vec::<String>::new(),
        "no half-written target on the host"
    );
    // 3. A host tree with a link that escapes it (zip-slip by link), kept as a link.
    std::fs::write(src.path().join("sub/zz-late.txt"), "late").unwrap();
    symlink("../../outside", src.path().join("sub/bad")).unwrap();
    let r = sync(
        &mut w,
        "environmentSyncIn",
        &lease,
        json!([{"operationId": "op", "files": [{"sourcePath": src.path(), "targetPath": "/workspace/t", "kind": "directory"}]}]),
    );
    assert_eq!(
        r["error"]["message"],
        "Entry \"sub/bad\" would be written outside the target \"/workspace/t\"."
    );
    assert!(!lease_dir.join("t").exists(), "the failed operation left no target");
    assert_eq!(leftovers(w.root.path()), Vec::<String>::new());
    // An existing target survives a failed replacement untouched.
    std::fs::create_dir(lease_dir.join("t")).unwrap();
    std::fs::write(lease_dir.join("t/keep"), "kept").unwrap();
    let r = sync(
        &mut w,
        "environmentSyncIn",
        &lease,
        json!([{"operationId": "op", "files": [{"sourcePath": src.path(), "targetPath": "t", "kind": "directory"}]}]),
    );
    assert!(r.get("error").is_some());
    assert_eq!(tree(&lease_dir.join("t")), ["keep"]);
    assert_eq!(leftovers(w.root.path()), Vec::<String>::new());
}

#[test]
fn bad_input_is_refused_before_anything_is_copied() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let lease_dir = w.root.path().join(&lease);
    let src = host_source();
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"files": [{"sourcePath": src.path(), "targetPath": "/workspace/app", "kind": "directory"}],
                "postUploadCommands": [{"command": "true", "cwd": "/workspace"}]}),
            "Post-upload command cwd \"/workspace\" must be an absolute path under one of the operation's targets.",
        ),
        (
            json!({"files": [{"sourcePath": src.path(), "targetPath": "/workspace/app", "kind": "directory"}],
                "postUploadCommands": [{"command": "true", "cwd": "/workspace/app/../etc"}]}),
            "Post-upload command cwd \"/workspace/app/../etc\" must be an absolute path under one of the operation's targets.",
        ),
        (
            json!({"files": [{"sourcePath": src.path(), "targetPath": "/workspace/app", "kind": "directory"}],
                "postUploadCommands": [{"command": "true", "cwd": "app"}]}),
            "Post-upload command cwd \"app\" must be an absolute path under one of the operation's targets.",
        ),
        (
            json!({"files": [{"sourcePath": src.path(), "targetPath": "app", "kind": "directory", "exclude": ["a["]}]}),
            "Exclude pattern \"a[\" is not a valid glob.",
        ),
        (
            json!({"files": [{"sourcePath": "relative/src", "targetPath": "app", "kind": "directory"}]}),
            "Invalid input: host path \"relative/src\" must be absolute and free of \"..\"",
        ),
    ];
    for (op, message) in cases {
        let mut op = op;
        op["operationId"] = json!("op");
        let r = sync(&mut w, "environmentSyncIn", &lease, json!([op]));
        // the text, and beside it the structured refusal the host maps back (its kind
        // and fields; see the host's structured_errors.rs)
        let mut error = r["error"].clone();
        let data = error
            .as_object_mut()
            .unwrap()
            .remove("data")
            .expect("a structured refusal");
        assert_eq!(error, json!({"code": -32602, "message": message}));
        assert!(data["kind"].is_string() && data["fields"].is_object(), "{data}");
        assert_eq!(tree(&lease_dir), Vec::<String>::new(), "nothing copied for: {message}");
    }
    let missing = src.path().join("missing");
    let r = sync(
        &mut w,
        "environmentSyncIn",
        &lease,
        json!([{"operationId": "op", "files": [{"sourcePath": missing, "targetPath": "m", "kind": "file"}]}]),
    );
    assert_eq!(
        r["error"],
        json!({"code": -32002, "message": format!("Sync source \"{}\" does not exist.", missing.display()),
            "data": {"kind": "source_missing", "fields": {"path": missing}}})
    );
    let r = sync(
        &mut w,
        "environmentSyncIn",
        &lease,
        json!([{"operationId": "op", "files": [{"sourcePath": src.path().join("a.txt"), "targetPath": "m", "kind": "directory"}]}]),
    );
    assert_eq!(
        r["error"]["message"],
        format!(
            "Sync source \"{}\" is not a directory.",
            src.path().join("a.txt").display()
        )
    );
    assert_eq!(tree(&lease_dir), Vec::<String>::new());
}

#[test]
fn post_upload_commands_run_in_order_and_stop_at_the_first_failure() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let lease_dir = w.root.path().join(&lease);
    let src = host_source();
    let r = sync(
        &mut w,
        "environmentSyncIn",
        &lease,
        json!([{"operationId": "op", "files": [{"sourcePath": src.path(), "targetPath": "/workspace/app", "kind": "directory"}],
            "postUploadCommands": [
                {"command": "echo one > /workspace/app/order", "cwd": "/workspace/app"},
                {"command": "exit 3", "cwd": "/workspace/app/sub"},
                {"command": "echo never > /workspace/app/never"}]}]),
    );
    assert_eq!(
        r["error"],
        json!({"code": -32002, "message": "Post-upload command \"exit 3\" failed with exit code 3.",
            "data": {"kind": "post_upload_failed", "fields": {"command": "exit 3", "outcome": "exit code 3"}}})
    );
    assert_eq!(std::fs::read_to_string(lease_dir.join("app/order")).unwrap(), "one\n");
    assert!(!lease_dir.join("app/never").exists());
    let r = sync(
        &mut w,
        "environmentSyncIn",
        &lease,
        json!([{"operationId": "op", "files": [{"sourcePath": src.path(), "targetPath": "/workspace/app", "kind": "directory"}],
            "postUploadCommands": [{"command": "sleep 30", "timeoutMs": 200}]}]),
    );
    assert_eq!(
        r["error"]["message"],
        "Post-upload command \"sleep 30\" failed with a timeout."
    );
    let r = sync(
        &mut w,
        "environmentSyncOut",
        &lease,
        json!([{"operationId": "op", "files": [{"sourcePath": "app", "targetPath": "/tmp/x", "kind": "directory"}],
            "postUploadCommands": [{"command": "true"}]}]),
    );
    assert_eq!(
        r["error"]["message"],
        "Invalid input: postUploadCommands are only run by environmentSyncIn"
    );
}
