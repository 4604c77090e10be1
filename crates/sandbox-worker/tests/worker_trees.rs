//! Sync walks against hostile trees: 300 levels deep (a stack overflow killed the worker),
//! past the depth bound (a clear error, nothing written), and non-UTF-8 names, which
//! survive a round trip in and out byte for byte.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::{Value, json};

fn sync(w: &mut Worker, method: &str, lease: &str, source: &Path, target: &str, reverse: bool) -> Value {
    let (source, target) = if reverse {
        (target.to_owned(), source.display().to_string())
    } else {
        (source.display().to_string(), target.to_owned())
    };
    w.call(
        method,
        on_lease(
            lease,
            json!({"operations": [{"operationId": "op", "files": [{"sourcePath": source, "targetPath": target, "kind": "directory"}]}]}),
        ),
    )
}

/// `levels` nested directories `d` under `base`, with `leaf.txt` at the bottom.
fn deep_tree(base: &Path, levels: usize) -> PathBuf {
    let mut dir = base.to_path_buf();
    for _ in 0..levels {
        dir.push("d");
    }
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("leaf.txt"), "bottom").unwrap();
    dir.join("leaf.txt")
}

fn leaf(base: &Path, levels: usize) -> PathBuf {
    let mut dir = base.to_path_buf();
    for _ in 0..levels {
        dir.push("d");
    }
    dir.join("leaf.txt")
}

#[test]
fn a_300_level_tree_syncs_both_ways() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let host = tempfile::tempdir().unwrap();
    deep_tree(&host.path().join("src"), 300);
    let r = sync(
        &mut w,
        "environmentSyncIn",
        &lease,
        &host.path().join("src"),
        "/workspace/deep",
        false,
    );
    assert!(r.get("error").is_none(), "{r}");
    assert_eq!(r["result"]["operations"][0]["filesTransferred"], 1);
    assert_eq!(
        std::fs::read_to_string(leaf(&w.root.path().join(&lease).join("deep"), 300)).unwrap(),
        "bottom"
    );
    let r = sync(
        &mut w,
        "environmentSyncOut",
        &lease,
        &host.path().join("back"),
        "/workspace/deep",
        true,
    );
    assert!(r.get("error").is_none(), "{r}");
    assert_eq!(
        std::fs::read_to_string(leaf(&host.path().join("back"), 300)).unwrap(),
        "bottom"
    );
    assert_eq!(w.ok("health", json!({}))["status"], "ok");
}

#[test]
fn a_tree_past_the_depth_bound_is_refused_with_nothing_written() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let host = tempfile::tempdir().unwrap();
    deep_tree(&host.path().join("src"), 1100);
    let (code, message) = {
        let r = sync(
            &mut w,
            "environmentSyncIn",
            &lease,
            &host.path().join("src"),
            "/workspace/deep",
            false,
        );
        (r["error"]["code"].clone(), r["error"]["message"].clone())
    };
    assert_eq!(code, json!(-32602));
    assert_eq!(
        message,
        json!(format!(
            "Sync source \"{}\" is nested deeper than 1000 directory levels.",
            host.path().join("src").display()
        ))
    );
    assert!(!w.root.path().join(&lease).join("deep").exists());
    // the same tree built in the workspace by a command cannot be synced out either
    deep_tree(&w.root.path().join(&lease).join("made"), 1100);
    let r = sync(
        &mut w,
        "environmentSyncOut",
        &lease,
        &host.path().join("back"),
        "/workspace/made",
        true,
    );
    assert_eq!(
        r["error"]["message"],
        "Sync source \"/workspace/made\" is nested deeper than 1000 directory levels."
    );
    assert!(!host.path().join("back").exists());
    let staged: Vec<_> = std::fs::read_dir(host.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(staged.len(), 1, "only the source is left: {staged:?}");
    assert_eq!(w.ok("health", json!({}))["status"], "ok");
}

#[test]
fn non_utf8_names_round_trip_in_and_out() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let host = tempfile::tempdir().unwrap();
    let name = OsStr::from_bytes(b"caf\xe9-\xff.txt");
    let dir_name = OsStr::from_bytes(b"d\xfe");
    let src = host.path().join("src");
    std::fs::create_dir_all(src.join(dir_name)).unwrap();
    std::fs::write(src.join(name), "latin-1").unwrap();
    std::fs::write(src.join(dir_name).join(name), "inner").unwrap();
    let r = sync(&mut w, "environmentSyncIn", &lease, &src, "/workspace/names", false);
    assert!(r.get("error").is_none(), "{r}");
    let in_lease = w.root.path().join(&lease).join("names");
    assert_eq!(std::fs::read_to_string(in_lease.join(name)).unwrap(), "latin-1");
    assert_eq!(
        std::fs::read_to_string(in_lease.join(dir_name).join(name)).unwrap(),
        "inner"
    );
    // a name the command makes itself
    let r = w.ok(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sh", "args": ["-c", "printf made > \"/workspace/names/$(printf 'x\\377y')\""]}),
        ),
    );
    assert_eq!(r["exitCode"], 0, "{r}");
    let r = sync(
        &mut w,
        "environmentSyncOut",
        &lease,
        &host.path().join("back"),
        "/workspace/names",
        true,
    );
    assert!(r.get("error").is_none(), "{r}");
    let back = host.path().join("back");
    assert_eq!(std::fs::read_to_string(back.join(name)).unwrap(), "latin-1");
    assert_eq!(
        std::fs::read_to_string(back.join(dir_name).join(name)).unwrap(),
        "inner"
    );
    assert_eq!(
        std::fs::read_to_string(back.join(OsStr::from_bytes(b"x\xffy"))).unwrap(),
        "made"
    );
    let mut names: Vec<Vec<u8>> = std::fs::read_dir(&back)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().as_bytes().to_vec())
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![b"caf\xe9-\xff.txt".to_vec(), b"d\xfe".to_vec(), b"x\xffy".to_vec()]
    );
}
