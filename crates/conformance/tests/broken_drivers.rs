//! The kit catches broken drivers: deliberately faulty wrappers around the real local
//! driver, each of which must make exactly the check that guards its fault fail, naming
//! it, while the honest driver passes that check.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use envrt_conformance::{Suite, Target};
use envrt_driver_local::{LocalConfig, LocalDriver};
use envrt_runtime_core::capability::VerbSet;
use envrt_runtime_core::driver::*;
use envrt_runtime_core::{CapabilitySnapshot, DriverError, ExecuteRequest, ExecuteResult, SyncOperation, SyncResult};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Grants duplexCommandStream, then fails every open.
    ClaimsDuplexButRefuses,
    /// Refuses a `..` sync target with its own words instead of the exact error.
    WrongRefusalText,
    /// Leaves a process carrying the command line behind a timeout.
    LeaksProcessPastTimeout,
    /// Drops the last byte of stdin.
    DropsStdinByte,
    /// Writes a `..` sync target outside the workspace instead of refusing it.
    WritesOutsideTarget,
}

struct Faulty {
    inner: LocalDriver,
    fault: Fault,
}

#[async_trait]
impl EnvironmentDriver for Faulty {
    fn key(&self) -> &str {
        match self.fault {
            Fault::ClaimsDuplexButRefuses => "faulty_duplex",
            Fault::WrongRefusalText => "faulty_text",
            Fault::LeaksProcessPastTimeout => "faulty_leak",
            Fault::DropsStdinByte => "faulty_stdin",
            Fault::WritesOutsideTarget => "faulty_escape",
        }
    }
    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        let mut grant = self.inner.acquire_lease(input).await?;
        // The facade writes metadata.driver only when absent; make it ours.
        grant.metadata.insert("driver".into(), self.key().into());
        Ok(grant)
    }
    async fn release_lease(&self, input: &ReleaseInput) -> Result<(), DriverError> {
        self.inner.release_lease(input).await
    }
    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        let mut snapshot = self.inner.resolve_capabilities(input).await?;
        if self.fault == Fault::ClaimsDuplexButRefuses {
            snapshot.duplex_command_stream = true;
        }
        Ok(snapshot)
    }
    fn as_resume(&self) -> Option<&dyn ResumeLease> {
        self.inner.as_resume()
    }
    fn as_destroy(&self) -> Option<&dyn DestroyLease> {
        self.inner.as_destroy()
    }
    fn as_realize(&self) -> Option<&dyn RealizeWorkspace> {
        self.inner.as_realize()
    }
    fn as_execute(&self) -> Option<&dyn Execute> {
        Some(self)
    }
    fn as_sync(&self) -> Option<&dyn FileSync> {
        Some(self)
    }
    fn as_duplex(&self) -> Option<&dyn DuplexChannels> {
        (self.fault == Fault::ClaimsDuplexButRefuses).then_some(self as _)
    }
    fn verified_verbs(&self) -> VerbSet {
        let mut verbs = self.inner.verified_verbs();
        if self.fault == Fault::ClaimsDuplexButRefuses {
            verbs.insert("duplexChannelOpen".into());
        }
        verbs
    }
}

#[async_trait]
impl Execute for Faulty {
    async fn execute(&self, context: &LeaseContext, mut request: ExecuteRequest) -> Result<ExecuteResult, DriverError> {
        let inner = self.inner.as_execute().expect("local executes");
        match self.fault {
            Fault::DropsStdinByte => {
                if let Some(stdin) = request.stdin.as_mut() {
                    stdin.pop();
                }
            }
            Fault::LeaksProcessPastTimeout if request.timeout.is_some() => {
                // A sibling outside the command's process group, carrying its argv.
                let mut argv = vec!["-c".to_string(), "sleep 30".to_string()];
                argv.extend(request.args.iter().skip(2).cloned());
                let _ = std::process::Command::new("setsid").arg("sh").args(&argv).spawn();
            }
            _ => {}
        }
        inner.execute(context, request).await
    }
}

fn workspace_of(context: &LeaseContext) -> PathBuf {
    PathBuf::from(
        context.lease.metadata["workspace"]
            .as_str()
            .expect("local lease workspace"),
    )
}

#[async_trait]
impl FileSync for Faulty {
    async fn sync_in(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        let escaping = operations
            .iter()
            .flat_map(|o| &o.files)
            .find(|f| f.target_path.starts_with("../"));
        match (self.fault, escaping) {
            (Fault::WrongRefusalText, Some(_)) => Err(DriverError::invalid("bad path")),
            (Fault::WritesOutsideTarget, Some(file)) => {
                let outside = workspace_of(context).join(&file.target_path);
                std::fs::copy(&file.source_path, &outside).map_err(|e| DriverError::io("copy", e))?;
                Ok(SyncResult::default())
            }
            _ => {
                self.inner
                    .as_sync()
                    .expect("local syncs")
                    .sync_in(context, operations)
                    .await
            }
        }
    }
    async fn sync_out(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        self.inner
            .as_sync()
            .expect("local syncs")
            .sync_out(context, operations)
            .await
    }
}

#[async_trait]
impl DuplexChannels for Faulty {
    async fn open_duplex_channel(
        &self,
        _context: &LeaseContext,
        _command: &[String],
    ) -> Result<Box<dyn DuplexChannel>, DriverError> {
        Err(DriverError::other("duplex is not really here"))
    }
}

fn suite(fault: Fault, root: &std::path::Path) -> Suite {
    let root = root.to_path_buf();
    Suite::build(move || async move {
        let inner = LocalDriver::new(LocalConfig {
            root: Some(root),
            ..LocalConfig::default()
        })
        .map_err(|e| e.to_string())?;
        Ok(Target::new(Arc::new(Faulty { inner, fault })).with_cases(8))
    })
    .expect("suite")
}

/// Runs `check` against the faulty driver and returns its failure text.
fn failure_of(fault: Fault, check: &str) -> String {
    let root = tempfile::tempdir().unwrap();
    let suite = suite(fault, root.path());
    match suite.run_check(check) {
        Some(Ok(())) => panic!("{fault:?}: {check} passed against a broken driver"),
        Some(Err(message)) => message,
        None => panic!("{fault:?}: {check} is not registered"),
    }
}

#[test]
fn claims_duplex_but_refuses() {
    let message = failure_of(Fault::ClaimsDuplexButRefuses, "honesty_duplex");
    assert!(
        message.contains("open_duplex_channel despite the capability"),
        "{message}"
    );
}

#[test]
fn refuses_with_the_wrong_text() {
    let message = failure_of(Fault::WrongRefusalText, "sync_in_refuses_parent_target");
    assert!(message.starts_with("refusal: expected \"Path \\\"../"), "{message}");
    assert!(message.ends_with("got \"Invalid input: bad path\""), "{message}");
}

#[test]
fn leaks_a_process_past_a_timeout() {
    let root = tempfile::tempdir().unwrap();
    let suite = suite(Fault::LeaksProcessPastTimeout, root.path());
    let outcome = suite.run_check("execute_timeout_kills_tree");
    // Clean up what the faulty driver leaked before asserting.
    for pid in envrt_conformance::processes_with_marker(suite.marker_prefix()) {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    let message = outcome.expect("registered").expect_err("a leaking driver passed");
    assert!(message.starts_with("processes survived"), "{message}");
}

#[test]
fn drops_a_byte_of_stdin() {
    let message = failure_of(Fault::DropsStdinByte, "execute_stdin_roundtrip");
    assert!(message.contains("cat returned"), "{message}");
}

#[test]
fn writes_outside_a_sync_target() {
    let message = failure_of(Fault::WritesOutsideTarget, "sync_in_refuses_parent_target");
    assert!(message.starts_with("accepted; expected the refusal"), "{message}");
}

#[test]
fn the_honest_driver_passes_the_same_checks() {
    let root = tempfile::tempdir().unwrap();
    let suite = Suite::build(|| async {
        let driver = LocalDriver::new(LocalConfig {
            root: Some(root.path().to_path_buf()),
            ..LocalConfig::default()
        })
        .map_err(|e| e.to_string())?;
        Ok(Target::new(Arc::new(driver)).with_cases(8))
    })
    .unwrap();
    for check in [
        "honesty_duplex",
        "sync_in_refuses_parent_target",
        "execute_timeout_kills_tree",
        "execute_stdin_roundtrip",
    ] {
        assert_eq!(suite.run_check(check), Some(Ok(())), "{check}");
    }
}
