//! The crate map's invariants, run as tests of `xtask` (and so by `cargo xtask ci`): which
//! workspace crate may depend on which, read from `cargo metadata` so that a new
//! dependency edge that breaks a layer fails here, naming the edge and the rule.
//!
//! The rules (`docs/architecture.md` explains each):
//! - the core (`envrt-runtime-core`) depends on no other crate of the workspace;
//! - a driver depends on the core and, for the plugin host only, on `envrt-plugin-protocol`:
//!   never on another driver, the facade, the store or the reference worker;
//! - the plugin host and the reference worker meet only in `envrt-plugin-protocol`;
//! - the conformance kit sees drivers only through the core's trait (drivers are its
//!   dev-dependencies, for the tests that run it);
//! - the CLI and the Python package reach everything through the facade `envrt`.

use std::collections::BTreeMap;

/// Normal and dev dependencies each workspace crate may have on other workspace crates.
/// A crate missing from this table fails the test: a new crate takes its place in the map
/// on purpose.
const ALLOWED: &[(&str, &[&str], &[&str])] = &[
    ("envrt-runtime-core", &[], &[]),
    // The in-lease supervisor stands alone: drivers will speak its protocol, not link it.
    ("envrt-agent", &[], &[]),
    ("envrt-plugin-protocol", &["envrt-runtime-core"], &[]),
    ("envrt-store-sqlite", &["envrt-runtime-core"], &[]),
    ("envrt-driver-local", &["envrt-runtime-core"], &[]),
    ("envrt-driver-docker", &["envrt-runtime-core"], &[]),
    ("envrt-driver-ssh", &["envrt-runtime-core"], &[]),
    ("envrt-egress", &[], &[]),
    (
        "envrt-driver-plugin-sandbox",
        &["envrt-runtime-core", "envrt-plugin-protocol"],
        &[],
    ),
    (
        "envrt-sandbox-worker",
        &["envrt-runtime-core", "envrt-plugin-protocol"],
        &[],
    ),
    (
        "envrt-conformance",
        &["envrt-runtime-core"],
        &[
            "envrt-driver-local",
            "envrt-driver-docker",
            "envrt-driver-plugin-sandbox",
            "envrt-driver-ssh",
        ],
    ),
    (
        "envrt",
        &[
            "envrt-runtime-core",
            "envrt-store-sqlite",
            "envrt-driver-local",
            "envrt-driver-docker",
            "envrt-driver-plugin-sandbox",
            "envrt-driver-ssh",
        ],
        &[],
    ),
    // The service is a layer over the facade, as the CLI is; the CLI starts it.
    ("envrt-serve", &["envrt"], &[]),
    ("envrt-cli", &["envrt", "envrt-serve"], &[]),
    ("envrt-python", &["envrt"], &[]),
    // The bench measures every layer against the bare tools, so it may reach any of them.
    (
        "envrt-bench",
        &[
            "envrt-runtime-core",
            "envrt-store-sqlite",
            "envrt-driver-local",
            "envrt-driver-docker",
            "envrt-driver-plugin-sandbox",
            "envrt-driver-ssh",
            "envrt-sandbox-worker",
        ],
        &[],
    ),
    ("xtask", &[], &[]),
];

/// Each workspace crate with its dependencies on workspace crates, as
/// `(name, kind)` where kind is `normal`, `dev` or `build`.
fn workspace_edges() -> BTreeMap<String, Vec<(String, String)>> {
    let json = crate::util::cargo_metadata().expect("cargo metadata");
    let packages = json["packages"].as_array().expect("packages");
    let names: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut edges = BTreeMap::new();
    for package in packages {
        let name = package["name"].as_str().expect("a package name").to_owned();
        let deps = package["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter_map(|dep| {
                let dep_name = dep["name"].as_str()?;
                names.contains(&dep_name).then(|| {
                    let kind = dep["kind"].as_str().unwrap_or("normal").to_owned();
                    (dep_name.to_owned(), kind)
                })
            })
            .collect();
        edges.insert(name, deps);
    }
    edges
}

#[test]
fn every_workspace_dependency_follows_the_crate_map() {
    let mut broken = Vec::new();
    for (name, deps) in workspace_edges() {
        let Some((_, normal, dev)) = ALLOWED.iter().find(|(crate_name, _, _)| *crate_name == name) else {
            broken.push(format!(
                "{name}: not in the crate map (add it to layers::ALLOWED and docs/architecture.md)"
            ));
            continue;
        };
        for (dep, kind) in deps {
            let allowed = match kind.as_str() {
                "dev" => normal.contains(&dep.as_str()) || dev.contains(&dep.as_str()),
                _ => normal.contains(&dep.as_str()),
            };
            if !allowed {
                broken.push(format!("{name} -> {dep} ({kind} dependency)"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "dependency edges the crate map does not allow (docs/architecture.md): {broken:#?}"
    );
}

#[test]
fn the_crate_map_names_only_crates_that_exist() {
    let edges = workspace_edges();
    let stale: Vec<&str> = ALLOWED
        .iter()
        .map(|(name, _, _)| *name)
        .filter(|name| !edges.contains_key(*name))
        .collect();
    assert!(stale.is_empty(), "crate map rows naming no workspace crate: {stale:?}");
}
