//! The entry point of the `archive_extract` fuzz target in the repository's `fuzz/`
//! directory (and of the stable test that replays its corpus). Not API.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{ExtractPlan, Staging, extract, remove_tree};
use envrt_driver_api::sync::{ExcludeSet, SyncKind};

/// The most content bytes one input may write.
const MAX_BYTES: u64 = 1 << 20;

/// A scratch directory of its own for each input, removed after it.
fn scratch() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("envrt-fuzz-archive-{}-{n}", std::process::id()));
    fs::create_dir(&dir).expect("a scratch directory");
    dir
}

/// Every path below `dir` (links not followed), sorted.
fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(path.clone());
            }
            out.push(path);
        }
    }
    out.sort();
    out
}

/// `fuzz_targets/archive_extract`: the first byte picks the sync (bit 0: a file sync, bit
/// 1: keep special bits), the rest is the archive. Whatever it holds: nothing beside the
/// target changes, a refusal leaves no target and no staging directory, an accepted tree
/// is placed whole with its bytes within the bound and no set-uid, set-gid or sticky bit
/// unless kept.
pub fn archive_extract(data: &[u8]) {
    let Some((&how, archive)) = data.split_first() else {
        return;
    };
    let root = scratch();
    let sentinel = root.join("outside");
    fs::write(&sentinel, b"untouched").expect("the sentinel");
    fs::set_permissions(&sentinel, fs::Permissions::from_mode(0o600)).expect("the sentinel's mode");
    let parent = root.join("box");
    let target = parent.join("out");
    let exclude = ExcludeSet::new(&[]).expect("no patterns");
    let keep = how & 2 == 2;
    let plan = ExtractPlan {
        kind: if how & 1 == 1 {
            SyncKind::File
        } else {
            SyncKind::Directory
        },
        mode: None,
        exclude: &exclude,
        keep_special_bits: keep,
        max_bytes: MAX_BYTES,
        final_target: &target,
        source_shown: "/src",
        target_shown: "out",
    };
    let staging = Staging::new(&target).expect("a staging directory");
    let outcome = extract(archive, &plan, &staging);
    let placed = match outcome {
        Ok(counts) => {
            assert!(
                counts.bytes <= MAX_BYTES,
                "{} bytes written past the bound",
                counts.bytes
            );
            staging.place().expect("placing the staged tree");
            true
        }
        Err(_) => false,
    };
    drop(staging);
    let beside: Vec<PathBuf> = fs::read_dir(&parent)
        .expect("the target's parent")
        .flatten()
        .map(|e| e.path())
        .collect();
    if placed {
        assert_eq!(
            beside,
            std::slice::from_ref(&target),
            "only the target is left beside it"
        );
        if !keep {
            for path in listing(&target) {
                let meta = fs::symlink_metadata(&path).expect("a listed path");
                assert!(
                    meta.file_type().is_symlink() || meta.mode() & 0o7000 == 0,
                    "{} kept mode {:o}",
                    path.display(),
                    meta.mode()
                );
            }
        }
    } else {
        assert!(beside.is_empty(), "a refusal left {beside:?}");
    }
    let meta = fs::symlink_metadata(&sentinel).expect("the sentinel is still there");
    assert!(meta.file_type().is_file() && meta.mode() & 0o7777 == 0o600);
    assert_eq!(fs::read(&sentinel).expect("the sentinel"), b"untouched");
    let around: Vec<PathBuf> = fs::read_dir(&root)
        .expect("the scratch")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(around.len(), 2, "nothing new beside the target's parent: {around:?}");
    remove_tree(&root);
}
