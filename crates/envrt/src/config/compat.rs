//! Names `envrt::config` had before the driver registry moved them into their driver
//! crates, re-exported so that programs using them still compile.

/// The label that scopes the Docker containers of one state directory (now
/// `envrt::docker::STATE_LABEL`).
#[cfg(feature = "docker")]
pub use envrt_driver_docker::STATE_LABEL;

/// The reference worker's search (now in `envrt::plugin_sandbox`).
#[cfg(feature = "plugin-sandbox")]
pub use envrt_driver_plugin_sandbox::{add_worker_search_dir, locate_reference_worker, reference_worker};
