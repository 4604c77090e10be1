//! The workspace's drivers, read from `cargo metadata`: every package with
//! `[package.metadata.envrt] driver-key`, in the order the workspace `Cargo.toml` lists
//! its members. `conformance` (one kit target per key) and `bench` (the workers its
//! targets need) iterate this instead of keeping a list of their own.

use serde_json::Value;

use crate::util::root;

/// The crates under `crates/` named `driver-*` that are not drivers: the driver API, the
/// drivers' file helpers and their bridge to the in-lease supervisor, which drivers build
/// on. (Read by tests only.)
#[cfg(test)]
pub(crate) const DRIVER_SUPPORT: &[&str] = &["driver-api", "driver-files", "driver-agent"];

/// One driver crate of the workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Driver {
    /// The driver key (the conformance target is named after it).
    pub(crate) key: String,
    /// A binary package (and bin) its suite needs built first, such as a plugin worker.
    pub(crate) worker: Option<String>,
}

/// The drivers of `metadata` (the JSON of `cargo metadata --no-deps`), ordered as the
/// workspace file `members` lists their directories.
fn from_metadata(metadata: &Value, members: &str) -> Vec<Driver> {
    let mut found: Vec<(usize, Driver)> = Vec::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let envrt = &package["metadata"]["envrt"];
        let Some(key) = envrt["driver-key"].as_str() else {
            continue;
        };
        let dir = package["manifest_path"]
            .as_str()
            .and_then(|p| std::path::Path::new(p).parent())
            .and_then(|d| d.file_name())
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default();
        let position = members.find(&format!("/{dir}\"")).unwrap_or(usize::MAX);
        let worker = envrt["worker"].as_str().map(str::to_owned);
        found.push((
            position,
            Driver {
                key: key.to_owned(),
                worker,
            },
        ));
    }
    found.sort_by_key(|(position, _)| *position);
    found.into_iter().map(|(_, driver)| driver).collect()
}

/// The workspace's drivers.
pub(crate) fn workspace() -> Result<Vec<Driver>, String> {
    let metadata = crate::util::cargo_metadata()?;
    let members = std::fs::read_to_string(root().join("Cargo.toml")).map_err(|e| format!("Cargo.toml: {e}"))?;
    Ok(from_metadata(&metadata, &members))
}

/// The keys of the workspace's drivers.
pub(crate) fn keys() -> Result<Vec<String>, String> {
    Ok(workspace()?.into_iter().map(|d| d.key).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drivers_come_from_package_metadata_in_member_order() {
        let metadata = serde_json::json!({"packages": [
            {"manifest_path": "/w/crates/b/Cargo.toml", "metadata": {"envrt": {"driver-key": "bee"}}},
            {"manifest_path": "/w/crates/core/Cargo.toml", "metadata": null},
            {"manifest_path": "/w/crates/a/Cargo.toml", "metadata": {"envrt": {"driver-key": "ay", "worker": "w"}}},
        ]});
        let members = "members = [\"crates/core\", \"crates/a\", \"crates/b\"]";
        assert_eq!(
            from_metadata(&metadata, members),
            [
                Driver {
                    key: "ay".into(),
                    worker: Some("w".into())
                },
                Driver {
                    key: "bee".into(),
                    worker: None
                },
            ]
        );
    }

    #[test]
    fn the_workspace_drivers_are_its_driver_crates() {
        let keys = keys().unwrap();
        let crates = std::fs::read_dir(root().join("crates"))
            .unwrap()
            .flatten()
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with("driver-") && !DRIVER_SUPPORT.contains(&name.as_str())
            })
            .count();
        assert_eq!(keys.len(), crates, "{keys:?}");
        assert_eq!(keys.first().map(String::as_str), Some("local"));
    }
}
