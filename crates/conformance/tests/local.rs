//! The conformance suite against the local driver (`cargo xtask conformance --driver
//! local`). Its workspaces live under a private root, which must be empty afterwards.

use std::sync::Arc;

use envrt_conformance::{LeftoversFuture, ResourceFuture, Suite, Target};
use envrt_driver_local::{LocalConfig, LocalDriver};

fn main() {
    let root = tempfile::Builder::new()
        .prefix("envrt-conformance-local-")
        .tempdir()
        .expect("temp root");
    let path = root.path().to_path_buf();
    let suite = Suite::build(|| async move {
        let driver = LocalDriver::new(LocalConfig {
            root: Some(path.clone()),
            ..LocalConfig::default()
        })
        .map_err(|e| e.to_string())?;
        let leftovers = Arc::new(move || -> LeftoversFuture {
            let path = path.clone();
            Box::pin(async move {
                let entries = std::fs::read_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                Ok(entries
                    .filter_map(|e| e.ok())
                    .map(|e| format!("workspace {}", e.path().display()))
                    .collect())
            })
        });
        // A lease's resource is its workspace directory.
        let resource = Arc::new(|lease: &envrt_runtime_core::Lease| -> ResourceFuture {
            let dir = lease
                .metadata
                .get("workspace")
                .and_then(|v| v.as_str())
                .map(String::from);
            Box::pin(async move {
                let dir = dir.ok_or("the lease has no metadata.workspace")?;
                Ok(std::path::Path::new(&dir).exists())
            })
        });
        Ok(Target::new(Arc::new(driver))
            .with_leftovers(leftovers)
            .with_resource_probe(resource))
    })
    .expect("the local driver starts");
    let passed = suite.run();
    drop(root);
    std::process::exit(if passed { 0 } else { 101 });
}
