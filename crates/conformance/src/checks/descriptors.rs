//! Descriptors of the host program: one it holds without close-on-exec must not reach the
//! command. The kit opens a marker file that way before the call, and the command lists
//! its own open descriptors (`ls -l /proc/self/fd`); the marker's name among them is a
//! leak (a directory descriptor lists the host's root past any mount namespace, a file
//! descriptor reads and writes what only the host may).

use envrt_runtime_core::{ExecuteRequest, LeasePolicy};

use super::{Check, Checked, has_execute};
use crate::context::Ctx;

pub(super) const CHECKS: &[Check] = &[Check::maybe(
    "execute_host_descriptors_not_inherited",
    has_execute,
    host_descriptors_not_inherited,
)
.promise("A command inherits no file descriptor the host program holds open.")];

fn host_descriptors_not_inherited(ctx: &Ctx) -> Result<Checked, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("cannot make a temp dir: {e}"))?;
    let name = ctx.marker("host-descriptor");
    let path = dir.path().join(&name);
    std::fs::write(&path, b"host only\n").map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    // no O_CLOEXEC: inherited by every child the process starts unless a driver closes it
    let held = rustix::fs::open(&path, rustix::fs::OFlags::RDONLY, rustix::fs::Mode::empty())
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let result = ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        ctx.exec(&lease, ExecuteRequest::new("ls", ["-l", "/proc/self/fd/"]))
            .await
    });
    drop(held);
    let result = result?;
    let listing = String::from_utf8_lossy(&result.stdout);
    if result.exit_code != Some(0) || !listing.contains("->") {
        return Ok(Checked::NotChecked(format!(
            "the command cannot list its descriptors (ls -l /proc/self/fd/ ended {:?}: {})",
            result.exit_code,
            String::from_utf8_lossy(&result.stderr).trim()
        )));
    }
    match listing.lines().find(|line| line.contains(&name)) {
        Some(line) => Err(format!(
            "a descriptor the host program holds reached the command: {}",
            line.trim()
        )),
        None => Ok(Checked::Yes),
    }
}
