//! The soak's leak counting, shared with the fault-injection tests (`envrt-cli`'s
//! `tests/fault_*.rs`), so that "zero leaks" means the same thing in both: processes,
//! containers, sandboxes, workspaces, active store rows and ssh lease directories, each found by the scratch
//! directory or run label that scopes it.

pub mod leaks;
pub mod ssh;

use std::path::{Path, PathBuf};

/// The label on the soak's own containers (its value is the run).
pub const RUN_LABEL: &str = "envrt.soak-run";

/// The `envrt` CLI's state directory under a scratch directory (`ENVRT_STATE_DIR` of
/// every CLI run the count should see).
pub fn cli_state_dir(scratch: &Path) -> PathBuf {
    scratch.join("cli")
}
