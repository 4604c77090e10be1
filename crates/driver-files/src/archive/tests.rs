//! The shared extractor against hand-made hostile archives: nothing lands outside the
//! target, special bits are cleared, holes are kept and the byte bound holds.

use super::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// A scratch directory, removed on drop.
struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        remove_tree(&self.0);
    }
}
fn scratch() -> Dir {
    let p = std::env::temp_dir().join(format!("envrt-archive-{}", uuid::Uuid::new_v4().simple()));
    fs::create_dir(&p).unwrap();
    Dir(p)
}

enum E<'a> {
    Dir(&'a str, u32),
    File(&'a str, u32, &'a [u8]),
    Link(&'a str, &'a str),
}

/// Headers written by hand so hostile names survive (the builder refuses them).
fn raw_tar(entries: &[E<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in entries {
        let mut h = tar::Header::new_old();
        let (name, kind, mode, data, link): (&str, _, u32, &[u8], &str) = match entry {
            E::Dir(n, m) => (n, tar::EntryType::Directory, *m, b"", ""),
            E::File(n, m, d) => (n, tar::EntryType::Regular, *m, d, ""),
            E::Link(n, l) => (n, tar::EntryType::Symlink, 0o777, b"", l),
        };
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

struct Run {
    kind: SyncKind,
    keep: bool,
    max: u64,
}

const DIR: Run = Run {
    kind: SyncKind::Directory,
    keep: false,
    max: u64::MAX,
};

fn run(bytes: &[u8], target: &Path, how: &Run) -> Result<Counts, String> {
    let exclude = ExcludeSet::new(&[]).unwrap();
    let plan = ExtractPlan {
        kind: how.kind,
        mode: None,
        exclude: &exclude,
        keep_special_bits: how.keep,
        max_bytes: how.max,
        final_target: target,
        source_shown: "/workspace/src",
        target_shown: "out",
    };
    let staging = Staging::new(target).map_err(|e| e.to_string())?;
    let counts = extract(bytes, &plan, &staging).map_err(|e| e.into_driver().to_string())?;
    staging.place().map_err(|e| e.to_string())?;
    Ok(counts)
}

/// Everything below `dir` with its mode, links not followed.
fn listing(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let meta = fs::symlink_metadata(e.path()).unwrap();
            out.push((e.path(), meta.mode()));
            if meta.is_dir() {
                pending.push(e.path());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_link_followed_by_entries_through_it_writes_and_chmods_nothing_outside() {
    let root = scratch();
    let victim = root.0.join("victim");
    fs::create_dir(&victim).unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(victim.join("keep"), b"k").unwrap();
    // The target's parent exists (a sync creates it, like `mkdir -p`).
    fs::create_dir(root.0.join("place")).unwrap();
    let target = root.0.join("place/out");
    let before = listing(&root.0);
    let victim_text = victim.to_str().unwrap();
    let first = format!("Entry \"l -> {victim_text}\" would be written outside the target \"out\".");
    let cases: Vec<(Vec<u8>, &str)> = vec![
        // The plain order attack: a link, then a file and a chmod-ed directory through it.
        (
            raw_tar(&[
                E::Dir("top/", 0o755),
                E::Link("top/l", victim_text),
                E::File("top/l/evil", 0o644, b"x"),
                E::Dir("top/l/", 0o777),
            ]),
            &first,
        ),
        // Each link lexically inside; together `up` leads three levels up, to `victim`'s
        // parent, and entries follow through it.
        (
            raw_tar(&[
                E::Dir("top/", 0o755),
                E::Dir("top/a/", 0o755),
                E::Dir("top/a/b/", 0o755),
                E::Link("top/a/b/d0", "../.."),
                E::Link("top/up", "a/b/d0/../../.."),
                E::Dir("top/up/victim/", 0o777),
                E::File("top/up/victim/evil", 0o644, b"x"),
            ]),
            "Entry \"up/victim\" would be written outside the target \"out\".",
        ),
        // A second top, or an entry before the top: not the archive of one source.
        (
            raw_tar(&[E::Dir("top/", 0o755), E::File("other/evil", 0o644, b"x")]),
            "Entry \"other/evil\" would be written outside the target \"out\".",
        ),
        (
            raw_tar(&[E::File("top/evil", 0o644, b"x"), E::Dir("top/", 0o755)]),
            "Entry \"top/evil\" would be written outside the target \"out\".",
        ),
        (
            raw_tar(&[E::Dir("top/", 0o755), E::File("top/../evil", 0o644, b"x")]),
            "Entry \"top/../evil\" would be written outside the target \"out\".",
        ),
    ];
    for (bytes, expected) in cases {
        assert_eq!(run(&bytes, &target, &DIR).unwrap_err(), expected);
        assert_eq!(listing(&root.0), before, "nothing changed on the host for {expected}");
    }
    // Without the refusals the kernel still refuses: a link planted in a staged tree
    // is never resolved by the extractor's walk.
    let staging = Staging::new(&target).unwrap();
    fs::create_dir(staging.staged()).unwrap();
    std::os::unix::fs::symlink(&victim, staging.staged().join("l")).unwrap();
    let through = [OsString::from(STAGED), OsString::from("l")];
    assert!(beneath::open_dir_creating(&staging.fd, &through).is_err());
    assert!(beneath::chmod_dir(&staging.fd, &through, 0o777).is_err());
    let dir = beneath::open_dir(&staging.fd, &[OsString::from(STAGED)]).unwrap();
    assert!(beneath::create_file(&dir, OsStr::new("l")).is_err());
    drop(staging);
    assert_eq!(listing(&root.0), before);
}

#[test]
fn data_after_the_end_of_the_archive_is_refused() {
    let root = scratch();
    let target = root.0.join("out");
    let mut bytes = raw_tar(&[E::Dir("top/", 0o755), E::File("top/a", 0o644, b"hi")]);
    bytes.extend_from_slice(b"injected by a login script");
    assert_eq!(
        run(&bytes, &target, &DIR).unwrap_err(),
        "The archive of sync source \"/workspace/src\" holds data after its end."
    );
    assert!(fs::read_dir(&root.0).unwrap().next().is_none(), "no staging left");
    // Zero padding (tar's record size) is fine.
    let mut padded = raw_tar(&[E::Dir("top/", 0o755), E::File("top/a", 0o644, b"hi")]);
    padded.resize(10240, 0);
    assert_eq!(run(&padded, &target, &DIR).unwrap(), Counts { files: 1, bytes: 2 });
}

#[test]
fn special_bits_are_cleared_unless_the_request_keeps_them() {
    let root = scratch();
    let bytes = raw_tar(&[
        E::Dir("top/", 0o3777),
        E::Dir("top/shared/", 0o2777),
        E::File("top/shared/su", 0o4755, b"#!/bin/sh\n"),
    ]);
    let target = root.0.join("masked");
    run(&bytes, &target, &DIR).unwrap();
    let mode = |p: &Path| fs::symlink_metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(&target), 0o777);
    assert_eq!(mode(&target.join("shared")), 0o777);
    assert_eq!(mode(&target.join("shared/su")), 0o755);
    let kept = root.0.join("kept");
    let keep = Run { keep: true, ..DIR };
    run(&bytes, &kept, &keep).unwrap();
    assert_eq!(mode(&kept), 0o3777);
    assert_eq!(mode(&kept.join("shared")), 0o2777);
    assert_eq!(mode(&kept.join("shared/su")), 0o4755);
}

#[test]
fn zero_blocks_become_holes_and_the_byte_bound_refuses_leaving_nothing() {
    let root = scratch();
    let zeros = vec![0u8; 8 << 20];
    let mut data = zeros.clone();
    data[100] = 1;
    let bytes = raw_tar(&[E::File("f", 0o644, &data)]);
    let target = root.0.join("f");
    let file = Run {
        kind: SyncKind::File,
        ..DIR
    };
    assert_eq!(run(&bytes, &target, &file).unwrap().bytes, 8 << 20);
    let meta = fs::metadata(&target).unwrap();
    assert_eq!(meta.len(), 8 << 20);
    assert!(meta.blocks() * 512 <= 64 << 10, "allocated {}", meta.blocks() * 512);
    assert_eq!(fs::read(&target).unwrap(), data);
    let tree = raw_tar(&[
        E::Dir("top/", 0o755),
        E::File("top/a", 0o644, &zeros[..600]),
        E::File("top/b", 0o644, &zeros[..600]),
    ]);
    let out = root.0.join("out");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("old"), b"old").unwrap();
    let small = Run { max: 1000, ..DIR };
    assert_eq!(
        run(&tree, &out, &small).unwrap_err(),
        "Sync out of \"/workspace/src\" exceeds the limit of 1000 bytes."
    );
    assert_eq!(fs::read(out.join("old")).unwrap(), b"old");
    let names: Vec<_> = fs::read_dir(&root.0).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "only f and out: {names:?}");
    let fits = Run { max: 1200, ..DIR };
    assert_eq!(run(&tree, &out, &fits).unwrap(), Counts { files: 2, bytes: 1200 });
}
