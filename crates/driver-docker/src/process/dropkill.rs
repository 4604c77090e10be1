//! Killing a command's tree when its execute future is dropped before it finished (a
//! cancelled call), inside `Drop`, so that it is done when `Drop` returns, whatever
//! becomes of the caller's async runtime and process afterwards (the CLI shuts its runtime
//! down and exits right after an interrupt; a task spawned on that runtime would never
//! run).
//!
//! With a local engine and the command's pid known (the wrapper reported it), the tree is
//! killed from the host at once ([`crate::process::hostkill`], reads of `/proc` and signals, no
//! engine call). Otherwise the kill needs the engine: when the pid is not read yet, the
//! exec's host pid from its inspect (a local engine; its session is the command's tree);
//! with a remote engine, the in-container killer. That runs on a thread of its own, with
//! its own current-thread runtime and its own client of the engine (nothing of the
//! caller's runtime, which may be shutting down or be this very thread), and `Drop` waits
//! for it up to [`DROP_BOUND`]. Usually that is a few milliseconds (one inspect); only an
//! exec whose start the engine has not finished yet is waited for longer: past the bound
//! `Drop` returns and the thread finishes the kill if the process lives on.

use std::time::Duration;

use crate::engine::Engine;
use crate::process::{self, Target};

/// Longest `Drop` waits for a kill that needs the engine (within the contract's 10 s).
pub(crate) const DROP_BOUND: Duration = Duration::from_secs(5);

/// Kills the command's tree when dropped while armed.
pub(crate) struct KillOnDrop {
    pub(crate) engine: Engine,
    pub(crate) container: String,
    /// The exec, once the engine made it.
    pub(crate) exec_id: Option<String>,
    /// The command's tree, once the wrapper reported it.
    pub(crate) target: Option<Target>,
    /// The exec's attach stream, dropped only after the kill (a field drops after
    /// [`Drop::drop`]): closing it makes the engine kill the exec's own process and mark
    /// the exec exited, and the session of an exited exec is no longer found by its pid.
    pub(crate) output: Option<crate::process::OutputFrames>,
    pub(crate) armed: bool,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let Some(exec_id) = self.exec_id.clone().filter(|_| self.armed) else {
            // Not armed, or dropped before the engine made the exec: nothing runs.
            return;
        };
        let container = self.container.clone();
        let local = crate::process::hostkill::sees(&container);
        if local && let Some(target) = &self.target {
            let left = crate::process::hostkill::apply(&container, target, crate::process::hostkill::Mode::Kill);
            tracing::debug!(
                container,
                exec_id,
                left,
                "dropped execute: killed its tree from the host"
            );
            return;
        }
        let engine = self.engine.clone();
        let target = self.target.clone();
        let (done_tx, done) = std::sync::mpsc::channel();
        let worker = {
            let (container, exec_id) = (container.clone(), exec_id.clone());
            std::thread::Builder::new()
                .name("envrt-docker-drop-kill".into())
                .spawn(move || {
                    kill_on_own_runtime(engine, &container, &exec_id, target, local);
                    let _ = done_tx.send(());
                })
        };
        match worker {
            Ok(_) => {
                if done.recv_timeout(DROP_BOUND).is_err() {
                    tracing::warn!(
                        container,
                        exec_id,
                        "dropped execute: its kill is still under way after {} s",
                        DROP_BOUND.as_secs()
                    );
                }
            }
            Err(error) => tracing::warn!(container, exec_id, %error, "dropped execute: cannot start its killer"),
        }
    }
}

/// The kill that needs the engine, on a runtime and an engine client of this thread's own.
fn kill_on_own_runtime(engine: Engine, container: &str, exec_id: &str, target: Option<Target>, local: bool) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::warn!(container, exec_id, %error, "dropped execute: no runtime to kill its tree on");
            return;
        }
    };
    runtime.block_on(async {
        let engine = match engine.detached() {
            Ok(engine) => engine,
            Err(error) => {
                tracing::warn!(container, exec_id, %error, "dropped execute: cannot reach the engine to kill its tree");
                return;
            }
        };
        let target = match target {
            Some(target) => target,
            // Dropped before the wrapper's pid report was read: the exec's own pid is the
            // session of the tree, as the host sees it.
            None => match process::host_pid(&engine, exec_id).await {
                Some(pid) if local => {
                    let left = crate::process::hostkill::apply_host_session(container, pid);
                    tracing::debug!(
                        container,
                        exec_id,
                        left,
                        "dropped execute: killed its session from the host"
                    );
                    return;
                }
                _ => {
                    tracing::warn!(
                        container,
                        exec_id,
                        "dropped execute: its pid is unknown, cannot kill its tree"
                    );
                    return;
                }
            },
        };
        if let Err(error) = process::kill_tree(&engine, container, &target, Duration::ZERO, false).await {
            tracing::warn!(container, exec_id, %error, "dropped execute: could not kill its tree");
        }
    });
}
