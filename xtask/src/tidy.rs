//! Repository hygiene, run as tests of `xtask` (and so by `cargo xtask ci`): every Rust
//! file opens with a module doc, no file grows past 600 lines without a recorded reason,
//! and nothing in the project points at material that does not ship with it.

use std::path::{Path, PathBuf};

use crate::util::root;

/// Files allowed past [`MAX_LINES`], each with the reason it is still one file.
const LONG_FILES: &[(&str, &str)] = &[
    (
        "crates/conformance/tests/broken/mod.rs",
        "the catalogue of faulty drivers the kit must catch: one small fault after another, read as a list",
    ),
    (
        "crates/conformance/tests/broken_drivers.rs",
        "one test per fault of the catalogue, each naming the check that must catch it",
    ),
    (
        "crates/sandbox-worker/src/sandbox.rs",
        "the one place a lease's bwrap arguments are built, for its commands and for its supervisor alike",
    ),
];

/// A file longer than this is asking to be split (house style).
const MAX_LINES: usize = 600;

/// Folders that hold the project's own files.
const SCANNED: &[&str] = &["crates", "xtask", "docs", "scripts", ".ci"];

/// Every file below the scanned folders, skipping build output and installed packages.
fn project_files() -> Vec<PathBuf> {
    let root = root();
    let mut pending: Vec<PathBuf> = SCANNED.iter().map(|dir| root.join(dir)).collect();
    pending.push(root.join("README.md"));
    let mut files = Vec::new();
    while let Some(path) = pending.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if matches!(name, "target" | "node_modules" | ".git") {
                continue;
            }
            let entries = std::fs::read_dir(&path).expect("read a project folder");
            pending.extend(entries.map(|entry| entry.expect("read a folder entry").path()));
        } else if meta.is_file() {
            files.push(path);
        }
    }
    files.sort();
    files
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root()).unwrap_or(path).display().to_string()
}

fn is_text(path: &Path) -> bool {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    matches!(ext, "rs" | "md" | "toml" | "sh" | "mjs" | "js" | "json" | "py" | "")
        && !path.ends_with("package-lock.json")
}

#[test]
fn every_rust_file_has_a_module_doc() {
    let missing: Vec<String> = project_files()
        .into_iter()
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .filter(|path| {
            let text = std::fs::read_to_string(path).expect("read a Rust file");
            let first = text.lines().find(|line| !line.trim().is_empty()).unwrap_or("");
            !first.starts_with("//!")
        })
        .map(|path| relative(&path))
        .collect();
    assert!(
        missing.is_empty(),
        "Rust files without a `//!` module doc: {missing:#?}"
    );
}

#[test]
fn no_file_is_past_the_line_limit_without_a_reason() {
    let mut too_long = Vec::new();
    for path in project_files()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
    {
        let lines = std::fs::read_to_string(&path)
            .expect("read a Rust file")
            .lines()
            .count();
        let name = relative(&path);
        if lines > MAX_LINES && !LONG_FILES.iter().any(|(allowed, _)| *allowed == name) {
            too_long.push(format!("{name}: {lines} lines"));
        }
    }
    // An entry that no longer needs its exemption (or names no file) must go.
    for (name, reason) in LONG_FILES {
        let lines = std::fs::read_to_string(root().join(name))
            .unwrap_or_default()
            .lines()
            .count();
        if reason.is_empty() || lines <= MAX_LINES {
            too_long.push(format!(
                "{name}: in LONG_FILES without a reason or without the need ({lines} lines)"
            ));
        }
    }
    assert!(
        too_long.is_empty(),
        "files over {MAX_LINES} lines (split them, or add them to LONG_FILES with a reason): {too_long:#?}"
    );
}

#[test]
fn nothing_points_outside_the_project() {
    // The specs the project was built from do not ship with it; docs/ carries its own.
    let outside = ["../shared", "shared/spec"];
    let offenders: Vec<String> = project_files()
        .into_iter()
        .filter(|path| is_text(path) && !path.ends_with("xtask/src/tidy.rs"))
        .filter(|path| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            outside.iter().any(|needle| text.contains(needle))
        })
        .map(|path| relative(&path))
        .collect();
    assert!(
        offenders.is_empty(),
        "files that point at material outside the project: {offenders:#?}"
    );
}
