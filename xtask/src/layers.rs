//! The crate map's invariants, run as tests of `xtask` (and so by `cargo xtask ci`): which
//! workspace crate may depend on which, read from `cargo metadata` so that a new
//! dependency edge that breaks a layer fails here, naming the edge and the rule.
//!
//! The rules (`docs/architecture.md` explains each):
//! - the driver API (`envrt-driver-api`) depends on no other crate of the workspace but the
//!   egress crate's policy alone (`envrt-egress` without its `proxy` feature), and on
//!   no async runtime (no tokio, not even without features): not directly, not through a
//!   dependency; the drivers' file helpers (`envrt-driver-files`) depend only on the driver
//!   API, and on no async runtime either;
//! - the runtime (`envrt-runtime-core`) depends on those two and re-exports them;
//! - a driver (a crate with `[package.metadata.envrt] driver-key`) depends on the driver
//!   API, the file helpers and, for the plugin host only, on `envrt-plugin-protocol`:
//!   never on the runtime (`envrt-runtime-core` only as a dev-dependency, for tests that
//!   run the driver behind the facade), another driver, the facade, the store or the
//!   reference worker (the plugin host's tests use the sqlite store, as a dev-dependency,
//!   to prove plugin state lasts);
//! - the plugin host and the reference worker meet only in `envrt-plugin-protocol`, which
//!   depends on the driver API alone;
//! - the conformance kit sees drivers only through the driver trait (drivers are its
//!   dev-dependencies, for the tests that run it);
//! - the CLI and the Python package reach everything through the facade `envrt`;
//! - `envrt-test-support` depends on no workspace crate and is only ever a dev-dependency.

use std::collections::BTreeMap;

/// Stands, in [`ALLOWED`]'s lists, for every driver crate: a workspace package with
/// `[package.metadata.envrt] driver-key` (so a new driver needs no edit here).
const DRIVER: &str = "<every driver crate>";

/// The dependencies of a driver crate without a row of its own: the driver API and the
/// file helpers; the runtime only for its tests.
const DRIVER_ROW: (&[&str], &[&str]) = (&[API, FILES], &[CORE]);

/// Normal and dev dependencies each workspace crate may have on other workspace crates
/// ([`DRIVER`] stands for any driver crate; a driver crate without a row follows
/// [`DRIVER_ROW`]). Any other crate missing from this table fails the test: a new crate
/// takes its place in the map on purpose.
const ALLOWED: &[(&str, &[&str], &[&str])] = &[
    // The one edge out of the driver API: the network policy type of its data model
    // (`Environment::network`) is the egress crate's, taken without its proxy.
    ("envrt-driver-api", &["envrt-egress"], &[]),
    ("envrt-driver-files", &[API], &[]),
    // Its own dev-dependency turns its `testkit` feature on for its tests.
    ("envrt-runtime-core", &[API, FILES], &[CORE]),
    // What the tests share: the standard library only, and only ever a dev-dependency.
    ("envrt-test-support", &[], &[]),
    // The in-lease supervisor stands alone; a driver that runs it links its client.
    ("envrt-agent", &[], &[]),
    // The drivers' bridge to it: the process verbs over the supervisor's client.
    ("envrt-driver-agent", &[API, "envrt-agent"], &[]),
    ("envrt-plugin-protocol", &[API], &[]),
    ("envrt-store-sqlite", &[API, CORE], &[]),
    (
        "envrt-driver-local",
        &[API, FILES, "envrt-agent", "envrt-driver-agent"],
        &[CORE],
    ),
    ("envrt-driver-docker", &[API, FILES, "envrt-driver-agent"], &[CORE]),
    ("envrt-driver-ssh", &[API, FILES, "envrt-driver-agent"], &[CORE]),
    ("envrt-egress", &[], &[]),
    // The plugin host keeps a worker's `ctx.state` in a `PluginStateStore` (driver API); its
    // tests prove persistence against the real sqlite store, so the store is a dev-dependency.
    // It reaches each lease's supervisor (which the worker starts) through the bridge.
    (
        "envrt-driver-plugin-sandbox",
        &[API, FILES, "envrt-plugin-protocol", "envrt-agent", "envrt-driver-agent"],
        &[CORE, "envrt-store-sqlite"],
    ),
    // It finds the supervisor's binary as every driver does.
    (
        "envrt-sandbox-worker",
        &[API, FILES, "envrt-plugin-protocol", "envrt-driver-agent"],
        &["envrt-agent"],
    ),
    // Its bypass checks are proven on a driver of its tests' own that runs the real egress
    // proxy per lease (honest) or a naive one (faulty).
    ("envrt-conformance", &[API, CORE], &[DRIVER, "envrt-egress"]),
    ("envrt", &[API, FILES, CORE, "envrt-store-sqlite", DRIVER], &[]),
    // The service is a layer over the facade, as the CLI is; the CLI starts it.
    ("envrt-serve", &["envrt"], &[CORE]),
    // Its fault-injection tests count leaks with the soak's own counter.
    ("envrt-cli", &["envrt", "envrt-serve"], &["envrt-soak"]),
    ("envrt-python", &["envrt"], &[]),
    // The bench measures every layer against the bare tools, so it may reach any of them.
    (
        "envrt-bench",
        &[API, FILES, CORE, "envrt-store-sqlite", DRIVER, "envrt-sandbox-worker"],
        &[],
    ),
    // The soak cycles leases on four drivers behind a runtime on the SQLite store.
    (
        "envrt-soak",
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
    ("xtask", &[], &[]),
];

/// The driver API: what a driver crate depends on.
const API: &str = "envrt-driver-api";
/// The file helpers drivers share.
const FILES: &str = "envrt-driver-files";
/// The runtime (facade, gate, pools, reconcile, templates, store).
const CORE: &str = "envrt-runtime-core";

/// The crates a driver needs and that must therefore stay free of any async runtime.
const RUNTIME_FREE: &[&str] = &[API, FILES];

/// Async runtimes (and their reactors) none of [`RUNTIME_FREE`] may pull in, directly or
/// through a dependency.
const RUNTIMES: &[&str] = &["tokio", "async-std", "smol", "async-executor", "async-io", "mio"];

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

/// Crates any workspace crate may have as a dev-dependency, and none as a normal or build
/// dependency: what the tests share must never reach a build of the product.
const DEV_ONLY: &[&str] = &["envrt-test-support"];

/// The edges of `edges` that the crate map does not allow, each said as
/// `crate -> dependency (kind dependency)`.
fn broken_edges(edges: BTreeMap<String, Vec<(String, String)>>, drivers: &[String]) -> Vec<String> {
    let mut broken = Vec::new();
    for (name, deps) in edges {
        let row = ALLOWED
            .iter()
            .find(|(crate_name, _, _)| *crate_name == name)
            .map(|(_, normal, dev)| (*normal, *dev))
            .or_else(|| drivers.contains(&name).then_some(DRIVER_ROW));
        let Some((normal, dev)) = row else {
            broken.push(format!(
                "{name}: not in the crate map (add it to layers::ALLOWED and docs/architecture.md)"
            ));
            continue;
        };
        let names = |list: &[&str], dep: &str| {
            list.contains(&dep) || (list.contains(&DRIVER) && drivers.iter().any(|d| d == dep))
        };
        for (dep, kind) in deps {
            let allowed = match kind.as_str() {
                "dev" => names(normal, &dep) || names(dev, &dep) || DEV_ONLY.contains(&dep.as_str()),
                _ => names(normal, &dep) && !DEV_ONLY.contains(&dep.as_str()),
            };
            if !allowed {
                broken.push(format!("{name} -> {dep} ({kind} dependency)"));
            }
        }
    }
    broken
}

#[test]
fn every_workspace_dependency_follows_the_crate_map() {
    let drivers = drivers();
    assert!(drivers.len() >= 4, "{drivers:?}");
    let broken = broken_edges(workspace_edges(), &drivers);
    assert!(
        broken.is_empty(),
        "dependency edges the crate map does not allow (docs/architecture.md): {broken:#?}"
    );
}

#[test]
fn the_test_support_crate_is_a_dev_dependency_only() {
    let edges = |kind: &str| {
        BTreeMap::from([(
            "envrt-driver-local".to_owned(),
            vec![
                ("envrt-driver-api".to_owned(), "normal".to_owned()),
                ("envrt-test-support".to_owned(), kind.to_owned()),
            ],
        )])
    };
    assert_eq!(broken_edges(edges("dev"), &[]), Vec::<String>::new());
    assert_eq!(
        broken_edges(edges("normal"), &[]),
        ["envrt-driver-local -> envrt-test-support (normal dependency)"]
    );
    assert_eq!(
        broken_edges(edges("build"), &[]),
        ["envrt-driver-local -> envrt-test-support (build dependency)"]
    );
    // Nor may the support crate lean on the crates whose tests use it.
    let own = BTreeMap::from([(
        "envrt-test-support".to_owned(),
        vec![("envrt-runtime-core".to_owned(), "normal".to_owned())],
    )]);
    assert_eq!(
        broken_edges(own, &[]),
        ["envrt-test-support -> envrt-runtime-core (normal dependency)"]
    );
}

#[test]
fn drivers_reach_the_runtime_only_from_their_tests() {
    // A driver with a row of its own and one under DRIVER_ROW, each on the runtime.
    let drivers = ["envrt-driver-local".to_owned(), "envrt-driver-new".to_owned()];
    let edges = |kind: &str| {
        BTreeMap::from(drivers.clone().map(|driver| {
            let deps = vec![
                (API.to_owned(), "normal".to_owned()),
                (CORE.to_owned(), kind.to_owned()),
            ];
            (driver, deps)
        }))
    };
    assert_eq!(broken_edges(edges("dev"), &drivers), Vec::<String>::new());
    assert_eq!(
        broken_edges(edges("normal"), &drivers),
        [
            "envrt-driver-local -> envrt-runtime-core (normal dependency)",
            "envrt-driver-new -> envrt-runtime-core (normal dependency)",
        ]
    );
    assert_eq!(
        broken_edges(edges("build"), &drivers),
        [
            "envrt-driver-local -> envrt-runtime-core (build dependency)",
            "envrt-driver-new -> envrt-runtime-core (build dependency)",
        ]
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

/// The packages `package` depends on through normal and build edges, directly or not
/// (`cargo tree`'s view, features resolved as a build of `package` alone resolves them).
fn transitive_dependencies(package: &str) -> Vec<String> {
    let output = crate::util::cargo()
        .args([
            "tree",
            "-p",
            package,
            "-e",
            "normal,build",
            "--prefix",
            "none",
            "-f",
            "{p}",
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("cargo tree");
    assert!(
        output.status.success(),
        "cargo tree -p {package} failed ({})",
        output.status
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .filter(|name| name != package)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The async runtimes among `dependencies`.
fn runtimes_among(dependencies: &[String]) -> Vec<&str> {
    RUNTIMES
        .iter()
        .copied()
        .filter(|runtime| dependencies.iter().any(|dep| dep == runtime))
        .collect()
}

#[test]
fn the_driver_api_and_the_file_helpers_depend_on_no_async_runtime() {
    let mut broken = Vec::new();
    for package in RUNTIME_FREE {
        let dependencies = transitive_dependencies(package);
        assert!(
            dependencies.iter().any(|dep| dep == "serde"),
            "cargo tree -p {package} listed no dependency at all: {dependencies:?}"
        );
        for runtime in runtimes_among(&dependencies) {
            broken.push(format!("{package} -> {runtime}"));
        }
    }
    assert!(
        broken.is_empty(),
        "a crate drivers need pulls in an async runtime (docs/architecture.md): {broken:?}"
    );
}

#[test]
fn the_runtime_check_sees_a_runtime() {
    let runtime_core = transitive_dependencies(CORE);
    assert_eq!(runtimes_among(&runtime_core).first(), Some(&"tokio"));
    assert!(runtimes_among(&["serde".to_owned(), "tokio-util".to_owned()]).is_empty());
}

/// The workspace's drivers: the packages with `[package.metadata.envrt] driver-key`.
fn drivers() -> Vec<String> {
    let json = crate::util::cargo_metadata().expect("cargo metadata");
    json["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter(|package| package["metadata"]["envrt"]["driver-key"].is_string())
        .filter_map(|package| package["name"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn drivers_never_depend_on_each_other() {
    let drivers = drivers();
    assert!(drivers.len() >= 4, "fewer drivers than expected: {drivers:?}");
    let edges = workspace_edges();
    let mut broken = Vec::new();
    for driver in &drivers {
        for (dep, kind) in &edges[driver] {
            if drivers.contains(dep) {
                broken.push(format!("{driver} -> {dep} ({kind} dependency)"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "drivers depending on other drivers (docs/architecture.md): {broken:#?}"
    );
}
