//! Running commands from the workspace root.

use std::path::PathBuf;
use std::process::Command;

/// The workspace root (the parent of this crate's directory).
pub(crate) fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

pub(crate) fn cargo() -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.current_dir(root());
    command
}

/// Runs `command`, failing with its description when it does not exit 0.
pub(crate) fn run(mut command: Command) -> Result<(), String> {
    let shown = format!("{command:?}");
    eprintln!("xtask: running {shown}");
    let status = command.status().map_err(|e| format!("cannot start {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}

pub(crate) fn run_script(script: &str, args: &[&str]) -> Result<(), String> {
    let mut command = Command::new("bash");
    command.arg(root().join(script)).args(args).current_dir(root());
    run(command)
}
