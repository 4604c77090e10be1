//! The driver registry's rule, run as a test of `xtask`: outside the driver crates, no
//! production Rust source names a driver (its key as a string literal, its crate, its
//! facade module, or a public type of its crate) except the facade's registry and the
//! few places listed in [`ALLOWED`] with their reason. Tests, comments and docs may name
//! drivers; so may the conformance kit, whose targets run them, the bench (per-driver
//! targets), the soak (one setup per driver it cycles), the tests' support crate (it is a
//! part of the tests), and the sandbox worker (the sandbox driver's other half).

use std::path::Path;

/// `(file, needle, reason)`: a file allowed to name a driver this way.
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "crates/envrt/src/registry.rs",
        "*",
        "the registry: one feature-gated line per driver",
    ),
    (
        "crates/envrt/src/lib.rs",
        "*",
        "each driver crate re-exported as its facade module (`envrt::docker`)",
    ),
    (
        "crates/envrt/src/compat.rs",
        "*",
        "deprecated per-driver builder methods kept for source compatibility",
    ),
    (
        "crates/envrt/src/config/compat.rs",
        "*",
        "re-exports of names envrt::config had before they moved into their driver crates",
    ),
    (
        "crates/envrt/src/config/file.rs",
        "\"local\"",
        "the implicit environment `local` (and the default tenant id, also \"local\")",
    ),
    (
        "crates/envrt/src/config/file_tests.rs",
        "*",
        "file.rs's unit tests (moved out of it at its size limit): envrt.toml texts name drivers as a user's file does",
    ),
    (
        "crates/envrt-python/src/drivers.rs",
        "*",
        "Python hands sandbox plugin manifests over as text, which no envrt.toml section takes",
    ),
    (
        "crates/envrt-cli/src/exec.rs",
        "envrt::plugin_sandbox",
        "the CLI's default stdin cap is the sandbox wire's (MAX_STDIN_BYTES)",
    ),
    (
        "xtask/src/python.rs",
        "\"local\"",
        "the unprivileged pytest pass selects the tests of the driver that needs no component",
    ),
    (
        "crates/envrt-cli/src/via_server.rs",
        "\"local\"",
        "through a service a new lease's environment defaults to the implicit `local`, the one a service without envrt.toml has",
    ),
    (
        "xtask/src/schemathesis.rs",
        "\"local\"",
        "the process routes are fuzzed on a lease of the implicit environment `local`, the one a service without envrt.toml has",
    ),
    (
        "crates/driver-api/src/model.rs",
        "\"sandbox\"",
        "FALLBACK_DRIVER_KEY, older than the registry",
    ),
];

/// Crates whose sources may name drivers (`crates/driver-` is every driver crate, less
/// the driver API and file helpers of [`DRIVER_SUPPORT`](crate::drivers::DRIVER_SUPPORT),
/// which stay under the rule).
const EXEMPT: &[&str] = &[
    "crates/driver-",
    "crates/conformance/",
    "crates/bench/",
    "crates/soak/",
    "crates/test-support/",
    "crates/sandbox-worker/",
];

/// The top-level public type names of the Rust files under `dir`.
fn public_types(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().flatten().map(|e| e.path()));
        } else if path.extension().is_some_and(|e| e == "rs") {
            for line in std::fs::read_to_string(&path).unwrap_or_default().lines() {
                for kind in ["pub struct ", "pub enum ", "pub trait "] {
                    if let Some(rest) = line.strip_prefix(kind) {
                        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                        names.push(name);
                    }
                }
            }
        }
    }
    names
}

/// What names each workspace driver: `(key, needles)`.
fn needles() -> Vec<(String, Vec<String>)> {
    let metadata = crate::util::cargo_metadata().expect("cargo metadata");
    let mut out = Vec::new();
    for package in metadata["packages"].as_array().unwrap() {
        let Some(key) = package["metadata"]["envrt"]["driver-key"].as_str() else {
            continue;
        };
        let dir = Path::new(package["manifest_path"].as_str().unwrap()).parent().unwrap();
        let module = dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .trim_start_matches("driver-")
            .replace('-', "_");
        let mut needles = vec![
            format!("\"{key}\""),
            package["name"].as_str().unwrap().replace('-', "_"),
            format!("envrt::{module}"),
            format!("crate::{module}::"),
        ];
        needles.extend(public_types(&dir.join("src")));
        out.push((key.to_owned(), needles));
    }
    out
}

/// Whether `line` names `needle` as a whole word.
fn names(line: &str, needle: &str) -> bool {
    line.match_indices(needle).any(|(at, _)| {
        let word = |c: char| c.is_alphanumeric() || c == '_';
        let before = line[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !word(c) || needle.starts_with('"'));
        let after = line[at + needle.len()..]
            .chars()
            .next()
            .is_none_or(|c| !word(c) || needle.ends_with(':') || needle.ends_with('"'));
        before && after
    })
}

#[test]
fn no_source_outside_a_driver_crate_names_a_driver() {
    let root = crate::util::root();
    let drivers = needles();
    assert!(drivers.len() >= 4, "{drivers:?}");
    let mut offenders = Vec::new();
    let mut pending = vec![root.join("crates"), root.join("xtask/src")];
    while let Some(path) = pending.pop() {
        let name = path.strip_prefix(&root).unwrap().display().to_string();
        if path.is_dir() {
            let support = crate::drivers::DRIVER_SUPPORT
                .iter()
                .filter_map(|c| name.strip_prefix("crates/")?.strip_prefix(c))
                .any(|rest| rest.is_empty() || rest.starts_with('/'));
            let exempt = !support && EXEMPT.iter().any(|e| name.starts_with(e));
            if !name.ends_with("/tests") && !name.ends_with("target") && !exempt {
                pending.extend(std::fs::read_dir(&path).unwrap().flatten().map(|e| e.path()));
            }
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs")
            || path.ends_with("tests.rs")
            || name == "xtask/src/tidy_drivers.rs"
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // Production code only: a file's tests start at its first `#[cfg(test)]`.
        for (number, line) in text.lines().take_while(|l| !l.starts_with("#[cfg(test)]")).enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for (key, needles) in &drivers {
                for needle in needles.iter().filter(|n| names(line, n)) {
                    let allowed = ALLOWED
                        .iter()
                        .any(|(file, what, _)| *file == name && (*what == "*" || what == needle));
                    if !allowed {
                        offenders.push(format!(
                            "{name}:{}: names driver {key:?} ({needle}): {code}",
                            number + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "name a driver only in its crate, the facade's registry (crates/envrt/src/registry.rs) \
         or its conformance target; or add the file to ALLOWED with a reason: {offenders:#?}"
    );
}

#[test]
fn a_line_names_a_needle_as_a_whole_word() {
    assert!(names("let d = DockerDriver::connect(c);", "DockerDriver"));
    assert!(!names("let d = DockerDriverish;", "DockerDriver"));
    assert!(names("match key { \"docker\" => 1 }", "\"docker\""));
    assert!(names("use envrt::docker::EnvConfig;", "envrt::docker"));
    assert!(!names("use envrt::dockerfile;", "envrt::docker"));
}
