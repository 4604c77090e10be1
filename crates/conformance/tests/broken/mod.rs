//! Deliberately faulty drivers for the kit's own tests: a wrapper around the real local
//! driver that breaks exactly one promise at a time. The faults are ours, one or more per
//! class the kit guards; each must make the check that guards it fail, naming it, while
//! the honest local driver passes that check.

mod duplex;
mod idle;
mod ingress;
mod lease_life;
mod pause;
pub(crate) mod processes;
mod sink;
mod tree_kill;

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use envrt_conformance::{ResourceFuture, ResourceProbe, Suite, Target};
use envrt_driver_local::{LocalConfig, LocalDriver};
use envrt_runtime_core::capability::VerbSet;
use envrt_runtime_core::driver::*;
use envrt_runtime_core::{
    CapabilitySnapshot, DriverError, Environment, ExecuteRequest, ExecuteResult, Lease, LeasePolicy, SyncKind,
    SyncOperation, SyncResult, TemplateRef, Templates,
};

/// One broken promise.
#[allow(dead_code, reason = "each test binary uses some of the faults")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// None: the honest local driver behind the same wrapper.
    Honest,
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
    /// Class 1: a second release of the same lease fails.
    ReleaseNotIdempotent,
    /// Class 1: an ephemeral release keeps the workspace (only destroy removes it).
    EphemeralReleaseKeepsWorkspace,
    /// Class 1: resume hands out a grant even when the workspace is gone.
    ResumesGhosts,
    /// Class 1: destroy fails when the workspace is already gone.
    DestroyFailsWhenGone,
    /// Class 2: a relative subdirectory cwd is ignored (the command runs at the root).
    IgnoresSubdirCwd,
    /// Class 2: env values are cut at their first `=`.
    CutsEnvAtEquals,
    /// Class 2: empty directories of a synced tree are dropped.
    DropsEmptyDirs,
    /// Class 3: a duplex group that is verified but never granted.
    DuplexNeverGranted,
    /// Class 3: grants duplex, then answers opens with the method refusal's text.
    DuplexOwnRefusalText,
    /// Class 4: runs one command at a time (a global lock around execute).
    SerializesExecutes,
    /// Class 5: logs env values, secrets included, to tracing.
    LogsSecrets,
    /// Class 5: writes synced files world-readable first and tightens the mode later.
    LooseWhileWriting,
    /// Class 5: the same on the host side of a sync out.
    LooseWhileWritingOut,
    /// Class 5: copies set-uid, set-gid and sticky bits both ways as if every request
    /// asked to keep them.
    KeepsSpecialBits,
    /// Class 6: realize never returns.
    BlocksInRealize,
    /// Class 6: panics when asked to run a program that does not exist.
    PanicsOnMissingProgram,
    /// Class 6: accepts a cwd outside the workspace (runs at the workspace root).
    AcceptsOutsideCwd,
    /// Class 1: a lease "from a template" is a copy of the source lease as it is now,
    /// later changes included (the template is a live link, not a capture).
    TemplateIsLive,
    /// Class 1: deleting a template answers `true` and keeps it.
    DeleteKeepsTemplate,
    /// Class 1: every lease's commands run in the workspace of the first lease that ran
    /// one (leases are not apart, so a pool hands out dirty leases).
    SharesOneWorkspace,
    /// Class 5: starts the command itself, passing it every descriptor the host program
    /// holds without close-on-exec.
    LeaksHostDescriptors,
    /// Runs each command as a detached host process that a dropped execute leaves running.
    LeavesCommandRunningOnDrop,
    /// Class 2: a missing program is worded as a shell would (`{program}: command not
    /// found`) instead of the contract's text, exit code 127 kept.
    OwnNotFoundText,
    /// Class 2: a missing cwd is refused in the driver's own words.
    OwnMissingCwdText,
    /// Class 3: a working duplex channel that drops the command's stderr.
    DuplexDropsStderr,
    /// Class 3: a working duplex channel that carries stderr only after all of stdout.
    DuplexStderrLast,
    /// Class 7: one broken promise of the process verbs.
    Process(processes::ProcessFault),
    /// Class 5: declares that its leases have no network while commands share the host's.
    ClaimsNoNetwork,
    /// Class 5: declares an egress proxy (a policy enforced) while its commands share the
    /// host's network and the policy is ignored.
    ClaimsEgressProxy,
    /// At a timeout, kills the command's process group only: a child in a new session
    /// or a process group of its own survives.
    KillsOnlyTheProcessGroup,
    /// Class 5: `println!`s each command and its env values, secrets included, to the
    /// host's standard output.
    PrintsEnv,
    /// Class 5: the same with `eprintln!`, to the host's standard error.
    EprintsEnv,
    /// Relays output to the caller's sink through a queue of two chunks and drops what
    /// does not fit while the sink is slow.
    DropsChunksWhenTheSinkIsSlow,
    /// Hands a chunk on after the next one of its stream whenever the sink was slow.
    SwapsChunksWhenTheSinkIsSlow,
    /// Returns empty stdout and stderr for a command killed at its timeout.
    EmptyOutputOnTimeout,
    /// At a timeout, SIGKILLs the command's process alone.
    KillsOnlyTheCommand,
    /// At a timeout, SIGKILLs the command and each descendant it finds through parent
    /// links: a daemon that double-forked away survives.
    KillsOnlyDescendants,
    /// At a timeout, sends SIGTERM to the command's group and descendants and never a
    /// SIGKILL: a child that ignores SIGTERM survives.
    TermsWithoutKill,
    /// Pause answers success and stops nothing.
    PauseStopsNothing,
    /// Unpause answers success and leaves the lease frozen.
    UnpauseContinuesNothing,
    /// Class 1: a fork's copies start empty instead of from the source's state.
    ForkCopiesAreEmpty,
    /// Class 1: resume hands back the lease with its workspace emptied.
    ResumeEmptiesWorkspace,
    /// Class 1: destroy answers success and keeps the workspace.
    DestroyKeepsWorkspace,
    /// Arming an idle timeout arms 30 days instead of the length asked for.
    IdleNeverEnds,
    /// Resetting the idle clock answers success and resets nothing.
    KeepAliveResetsNothing,
    /// Acquire returns before the lease's workspace is in place; it appears only after
    /// the lease's first execute or spawn, which fails.
    NotReadyAtAcquire,
    /// The same for the process supervisor: the first execute puts the workspace in place
    /// first and works, the first spawn fails.
    SpawnNotReadyAtAcquire,
    /// Grants runnerWebSocketIngress and hands out the lease's port itself: the secret
    /// header it names is never checked.
    IngressWithoutToken,
    /// Grants runnerWebSocketIngress and hands out an endpoint of its own that checks the
    /// token and answers every upgrade itself, reaching nothing in the lease.
    IngressNotToTheLease,
}

/// The local driver with one fault.
pub(crate) struct Faulty {
    inner: LocalDriver,
    fault: Fault,
    key: String,
    released: Mutex<HashSet<String>>,
    one_at_a_time: tokio::sync::Mutex<()>,
    first_executed: Mutex<Option<String>>,
}

impl Faulty {
    fn has(&self, fault: Fault) -> bool {
        self.fault == fault
    }
}

#[async_trait]
impl EnvironmentDriver for Faulty {
    fn key(&self) -> &str {
        &self.key
    }
    fn network_boundary(&self, environment: &Environment) -> envrt_runtime_core::network::NetworkBoundary {
        if self.has(Fault::ClaimsNoNetwork) {
            return envrt_runtime_core::network::NetworkBoundary::Isolated;
        }
        if self.has(Fault::ClaimsEgressProxy) {
            return envrt_runtime_core::network::NetworkBoundary::Proxied;
        }
        self.inner.network_boundary(environment)
    }
    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        if self.has(Fault::TemplateIsLive)
            && let Some(source) = input.template.as_ref().and_then(|t| t.source_lease_id.clone())
        {
            let mut clean = input.clone();
            clean.template = None;
            let mut grant = self.inner.acquire_lease(&clean).await?;
            let from = self.inner.workspace_of(&source)?;
            let to = self.inner.workspace_of(&input.lease_id)?;
            let copied = std::process::Command::new("cp")
                .arg("-a")
                .arg(from.join("."))
                .arg(&to)
                .status()
                .map_err(|e| DriverError::io("cp", e))?;
            if !copied.success() {
                return Err(DriverError::other("cp failed"));
            }
            grant.metadata.insert("driver".into(), self.key().into());
            return Ok(grant);
        }
        let mut grant = self.inner.acquire_lease(input).await?;
        // The facade writes metadata.driver only when absent; make it ours.
        grant.metadata.insert("driver".into(), self.key().into());
        if self.has(Fault::NotReadyAtAcquire) || self.has(Fault::SpawnNotReadyAtAcquire) {
            self.hide_workspace(&input.lease_id)?;
        }
        Ok(grant)
    }
    async fn release_lease(&self, input: &ReleaseInput) -> Result<(), DriverError> {
        let lease = &input.context.lease;
        self.settle(&lease.id);
        if self.has(Fault::ReleaseNotIdempotent) && !self.released.lock().unwrap().insert(lease.id.clone()) {
            return Err(DriverError::other(format!("lease {} was already released", lease.id)));
        }
        if self.has(Fault::EphemeralReleaseKeepsWorkspace) && lease.lease_policy == LeasePolicy::Ephemeral {
            return Ok(());
        }
        self.inner.release_lease(input).await
    }
    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        let mut snapshot = self.inner.resolve_capabilities(input).await?;
        if [
            Fault::ClaimsDuplexButRefuses,
            Fault::DuplexOwnRefusalText,
            Fault::DuplexDropsStderr,
            Fault::DuplexStderrLast,
        ]
        .contains(&self.fault)
        {
            snapshot.duplex_command_stream = true;
        }
        if ingress::claims_ingress(self.fault) {
            snapshot.runner_web_socket_ingress = true;
        }
        Ok(snapshot)
    }
    fn as_resume(&self) -> Option<&dyn ResumeLease> {
        Some(self)
    }
    fn as_destroy(&self) -> Option<&dyn DestroyLease> {
        Some(self)
    }
    fn as_realize(&self) -> Option<&dyn RealizeWorkspace> {
        Some(self)
    }
    fn as_execute(&self) -> Option<&dyn Execute> {
        Some(self)
    }
    fn as_sync(&self) -> Option<&dyn FileSync> {
        Some(self)
    }
    fn as_duplex(&self) -> Option<&dyn DuplexChannels> {
        let duplex = [
            Fault::ClaimsDuplexButRefuses,
            Fault::DuplexNeverGranted,
            Fault::DuplexOwnRefusalText,
            Fault::DuplexDropsStderr,
            Fault::DuplexStderrLast,
        ];
        duplex.contains(&self.fault).then_some(self as _)
    }
    fn as_processes(&self) -> Option<&dyn ProcessSessions> {
        if self.fault == Fault::Process(processes::ProcessFault::GrantsWithoutTheGroup) {
            return None;
        }
        self.inner.as_processes().map(|_| self as _)
    }
    fn as_templates(&self) -> Option<&dyn Templates> {
        Some(self)
    }
    fn as_runner_ingress(&self) -> Option<&dyn envrt_runtime_core::RunnerIngress> {
        ingress::claims_ingress(self.fault).then_some(self as _)
    }
    fn as_pause(&self) -> Option<&dyn PauseLease> {
        Some(self)
    }
    fn as_fork(&self) -> Option<&dyn ForkLease> {
        Some(self)
    }
    fn as_idle(&self) -> Option<&dyn envrt_runtime_core::IdleTimeout> {
        Some(self)
    }
    fn as_recovery(&self) -> Option<&dyn envrt_runtime_core::Recovery> {
        self.inner.as_recovery()
    }
    fn verified_verbs(&self) -> VerbSet {
        let mut verbs = self.inner.verified_verbs();
        if self.as_duplex().is_some() {
            verbs.insert("duplexChannelOpen".into());
        }
        if self.as_runner_ingress().is_some() {
            verbs.insert(ingress::VERB.into());
        }
        verbs
    }
}

#[async_trait]
impl ResumeLease for Faulty {
    async fn resume_lease(&self, context: &LeaseContext) -> Result<Option<LeaseGrant>, DriverError> {
        let resumed = self
            .inner
            .as_resume()
            .expect("local resumes")
            .resume_lease(context)
            .await?;
        if resumed.is_none() && self.has(Fault::ResumesGhosts) {
            return Ok(Some(LeaseGrant {
                provider: Some("local".into()),
                provider_lease_id: context.lease.provider_lease_id.clone(),
                metadata: context.lease.metadata.clone(),
                expires_at: None,
            }));
        }
        // The facade writes the grant's metadata over the lease's: keep the driver ours.
        let resumed = resumed.map(|mut grant| {
            grant.metadata.insert("driver".into(), self.key().into());
            grant
        });
        if self.has(Fault::ResumeEmptiesWorkspace) && resumed.is_some() {
            lease_life::empty(&self.inner.workspace_of(&context.lease.id)?);
        }
        Ok(resumed)
    }
}

#[async_trait]
impl DestroyLease for Faulty {
    async fn destroy_lease(&self, context: &LeaseContext) -> Result<(), DriverError> {
        if self.has(Fault::DestroyKeepsWorkspace) {
            return Ok(());
        }
        let workspace = context.lease.metadata.get("workspace").and_then(|v| v.as_str());
        if self.has(Fault::DestroyFailsWhenGone) && workspace.is_none_or(|w| !Path::new(w).exists()) {
            return Err(DriverError::other(format!(
                "no workspace for lease {}",
                context.lease.id
            )));
        }
        self.inner
            .as_destroy()
            .expect("local destroys")
            .destroy_lease(context)
            .await
    }
}

#[async_trait]
impl RealizeWorkspace for Faulty {
    async fn realize_workspace(
        &self,
        context: &LeaseContext,
        request: &WorkspaceRequest,
    ) -> Result<RealizedWorkspace, DriverError> {
        if self.has(Fault::BlocksInRealize) {
            futures::future::pending::<()>().await;
        }
        let inner = self.inner.as_realize().expect("local realizes");
        inner.realize_workspace(context, request).await
    }
}

#[async_trait]
impl Execute for Faulty {
    async fn execute(&self, context: &LeaseContext, mut request: ExecuteRequest) -> Result<ExecuteResult, DriverError> {
        let inner = self.inner.as_execute().expect("local executes");
        if self.has(Fault::SpawnNotReadyAtAcquire) {
            self.settle(&context.lease.id);
        }
        if self.has(Fault::NotReadyAtAcquire) {
            let result = inner.execute(context, request).await;
            self.settle(&context.lease.id);
            return result;
        }
        let _turn = if self.has(Fault::SerializesExecutes) {
            Some(self.one_at_a_time.lock().await)
        } else {
            None
        };
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
            Fault::IgnoresSubdirCwd if request.cwd.as_deref().is_some_and(|c| !c.starts_with("..")) => {
                request.cwd = None;
            }
            Fault::AcceptsOutsideCwd if request.cwd.as_deref().is_some_and(|c| c.starts_with("..")) => {
                request.cwd = None;
            }
            Fault::CutsEnvAtEquals => {
                for value in request.env.values_mut() {
                    if let Some((head, _)) = value.expose().split_once('=') {
                        *value = head.to_owned().into();
                    }
                }
            }
            Fault::PrintsEnv | Fault::EprintsEnv => {
                let values: Vec<&str> = request.env.values().map(|v| v.expose()).collect();
                if self.has(Fault::PrintsEnv) {
                    println!("faulty driver runs {} with env {values:?}", request.command);
                } else {
                    eprintln!("faulty driver runs {} with env {values:?}", request.command);
                }
            }
            Fault::DropsChunksWhenTheSinkIsSlow | Fault::SwapsChunksWhenTheSinkIsSlow if request.sink.is_some() => {
                let how = match self.fault {
                    Fault::DropsChunksWhenTheSinkIsSlow => sink::SinkFault::DropsWhenFull,
                    _ => sink::SinkFault::SwapsWhenSlow,
                };
                let relay = sink::Relay::new(request.sink.take().expect("a sink"), how);
                request.sink = Some(relay.clone());
                let result = inner.execute(context, request).await;
                relay.finish();
                return result;
            }
            Fault::EmptyOutputOnTimeout => {
                let mut result = inner.execute(context, request).await?;
                if result.timed_out {
                    result.stdout.clear();
                    result.stderr.clear();
                }
                return Ok(result);
            }
            Fault::KillsOnlyTheCommand
            | Fault::KillsOnlyDescendants
            | Fault::TermsWithoutKill
            | Fault::KillsOnlyTheProcessGroup
                if request.timeout.is_some() =>
            {
                let reach = match self.fault {
                    Fault::KillsOnlyTheCommand => tree_kill::Reach::Command,
                    Fault::KillsOnlyDescendants => tree_kill::Reach::Descendants,
                    Fault::KillsOnlyTheProcessGroup => tree_kill::Reach::Group,
                    _ => tree_kill::Reach::TermOnly,
                };
                return tree_kill::reaching_execute(&workspace_of(context), &request, reach).await;
            }
            Fault::LogsSecrets => {
                let values: Vec<&str> = request.env.values().map(|v| v.expose()).collect();
                tracing::debug!(command = %request.command, env = ?values, "faulty driver executes");
            }
            Fault::PanicsOnMissingProgram if request.command.contains("no-such-program") => {
                panic!("the faulty driver cannot bear a missing program");
            }
            Fault::LeavesCommandRunningOnDrop => {
                let mut child = std::process::Command::new("setsid")
                    .arg(&request.command)
                    .args(&request.args)
                    .current_dir(workspace_of(context))
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .map_err(|e| DriverError::other(e.to_string()))?;
                // Polled, never killed: dropping this future leaves the command running.
                let status = loop {
                    if let Some(status) = child.try_wait().map_err(|e| DriverError::other(e.to_string()))? {
                        break status;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                };
                let ending = envrt_runtime_core::execute::Ending {
                    exit_code: status.code(),
                    signal: None,
                    timed_out: false,
                };
                let buffer = request.output_buffer();
                return Ok(ExecuteResult::from_capped(
                    ending,
                    buffer.clone(),
                    buffer,
                    std::time::Duration::ZERO,
                    Default::default(),
                ));
            }
            Fault::SharesOneWorkspace => {
                let first = self
                    .first_executed
                    .lock()
                    .unwrap()
                    .get_or_insert_with(|| context.lease.id.clone())
                    .clone();
                let mut shared = context.clone();
                shared.lease.id = first;
                return inner.execute(&shared, request).await;
            }
            Fault::LeaksHostDescriptors => return leaky_execute(context, &request),
            Fault::OwnNotFoundText => {
                let command = request.command.clone();
                let mut result = inner.execute(context, request).await?;
                if result.exit_code == Some(127) {
                    result.stderr = format!("{command}: command not found\n").into_bytes();
                }
                return Ok(result);
            }
            Fault::OwnMissingCwdText => {
                let cwd = request.cwd.clone().unwrap_or_default();
                return inner.execute(context, request).await.map_err(|e| match e {
                    DriverError::InvalidInput { .. } => {
                        DriverError::invalid(format!("working directory {cwd:?} does not exist"))
                    }
                    other => other,
                });
            }
            _ => {}
        }
        inner.execute(context, request).await
    }
}

/// Runs the command as a naive driver would: `std::process::Command` in the workspace,
/// with nothing done about the descriptors it inherits.
fn leaky_execute(context: &LeaseContext, request: &ExecuteRequest) -> Result<ExecuteResult, DriverError> {
    let started = std::time::Instant::now();
    let output = std::process::Command::new(&request.command)
        .args(&request.args)
        .current_dir(workspace_of(context))
        .output()
        .map_err(|e| DriverError::io("cannot run the command", e))?;
    Ok(ExecuteResult {
        exit_code: output.status.code(),
        signal: None,
        timed_out: false,
        stdout: output.stdout,
        stderr: output.stderr,
        stdout_truncated: false,
        stderr_truncated: false,
        duration: started.elapsed(),
        metadata: Default::default(),
    })
}

fn workspace_of(context: &LeaseContext) -> PathBuf {
    PathBuf::from(
        context.lease.metadata["workspace"]
            .as_str()
            .expect("local lease workspace"),
    )
}

/// Removes every empty directory under `dir` (deepest first), keeping `dir`.
fn remove_empty_dirs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.symlink_metadata().is_ok_and(|m| m.is_dir()) {
            remove_empty_dirs(&path);
            let _ = std::fs::remove_dir(&path);
        }
    }
}

#[async_trait]
impl FileSync for Faulty {
    async fn sync_in(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        let operations = &keeping_bits(operations, self.has(Fault::KeepsSpecialBits))[..];
        let files = || operations.iter().flat_map(|o| &o.files);
        let escaping = files().find(|f| f.target_path.starts_with("../"));
        match (self.fault, escaping) {
            (Fault::WrongRefusalText, Some(_)) => return Err(DriverError::invalid("bad path")),
            (Fault::WritesOutsideTarget, Some(file)) => {
                let outside = workspace_of(context).join(&file.target_path);
                std::fs::copy(&file.source_path, &outside).map_err(|e| DriverError::io("copy", e))?;
                return Ok(SyncResult::default());
            }
            _ => {}
        }
        if self.has(Fault::LooseWhileWriting) {
            for file in files().filter(|f| f.kind == SyncKind::File && f.mode.is_some()) {
                let target = workspace_of(context).join(&file.target_path);
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| DriverError::io("mkdir", e))?;
                }
                std::fs::copy(&file.source_path, &target).map_err(|e| DriverError::io("copy", e))?;
                std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644))
                    .map_err(|e| DriverError::io("chmod", e))?;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let result = self
            .inner
            .as_sync()
            .expect("local syncs")
            .sync_in(context, operations)
            .await?;
        if self.has(Fault::DropsEmptyDirs) {
            for file in files().filter(|f| f.kind == SyncKind::Directory) {
                remove_empty_dirs(&workspace_of(context).join(&file.target_path));
            }
        }
        Ok(result)
    }
    async fn sync_out(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        let operations = &keeping_bits(operations, self.has(Fault::KeepsSpecialBits))[..];
        if self.has(Fault::LooseWhileWritingOut) {
            let files = operations.iter().flat_map(|o| &o.files);
            for file in files.filter(|f| f.kind == SyncKind::File && f.mode.is_some()) {
                let source = workspace_of(context).join(&file.source_path);
                std::fs::copy(&source, &file.target_path).map_err(|e| DriverError::io("copy", e))?;
                std::fs::set_permissions(&file.target_path, std::fs::Permissions::from_mode(0o644))
                    .map_err(|e| DriverError::io("chmod", e))?;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        self.inner
            .as_sync()
            .expect("local syncs")
            .sync_out(context, operations)
            .await
    }
}

/// `operations` with every entry keeping its special bits when `keep` (the
/// [`Fault::KeepsSpecialBits`] fault), unchanged otherwise.
fn keeping_bits(operations: &[SyncOperation], keep: bool) -> Vec<SyncOperation> {
    let mut operations = operations.to_vec();
    if keep {
        for file in operations.iter_mut().flat_map(|o| o.files.iter_mut()) {
            file.keep_special_bits = Some(true);
        }
    }
    operations
}

#[async_trait]
impl DuplexChannels for Faulty {
    async fn open_duplex_channel(
        &self,
        context: &LeaseContext,
        command: &[String],
    ) -> Result<Box<dyn DuplexChannel>, DriverError> {
        let stderr = match self.fault {
            Fault::DuplexDropsStderr => Some(duplex::StderrFault::Dropped),
            Fault::DuplexStderrLast => Some(duplex::StderrFault::AfterStdout),
            _ => None,
        };
        if let Some(stderr) = stderr {
            return Ok(Box::new(duplex::LocalChannel::open(
                &workspace_of(context),
                command,
                stderr,
            )?));
        }
        if self.has(Fault::DuplexOwnRefusalText) {
            return Err(DriverError::other(format!(
                "Environment driver \"{}\" does not support duplex channels.",
                self.key
            )));
        }
        Err(DriverError::other("duplex is not really here"))
    }
}

#[async_trait]
impl Templates for Faulty {
    async fn capture_template(&self, context: &LeaseContext, label: Option<&str>) -> Result<TemplateRef, DriverError> {
        self.inner.capture_template(context, label).await
    }
    async fn list_templates(
        &self,
        environment: &Environment,
        company_id: &str,
    ) -> Result<Vec<TemplateRef>, DriverError> {
        self.inner.list_templates(environment, company_id).await
    }
    async fn delete_template(&self, environment: &Environment, template: &TemplateRef) -> Result<bool, DriverError> {
        if self.has(Fault::DeleteKeepsTemplate) {
            return Ok(true);
        }
        self.inner.delete_template(environment, template).await
    }
}

/// The local resource probe: a lease's workspace directory exists.
pub(crate) fn workspace_probe() -> ResourceProbe {
    Arc::new(|lease: &Lease| -> ResourceFuture {
        let dir = lease
            .metadata
            .get("workspace")
            .and_then(|v| v.as_str())
            .map(String::from);
        Box::pin(async move {
            let dir = dir.ok_or("the lease has no metadata.workspace")?;
            Ok(Path::new(&dir).exists())
        })
    })
}

/// A target for `fault` with its workspaces under `root`, 8 cases, the workspace probe.
pub(crate) fn target(fault: Fault, root: &Path) -> impl std::future::Future<Output = Result<Target, String>> {
    let root = root.to_path_buf();
    async move {
        let inner = LocalDriver::new(LocalConfig {
            root: Some(root),
            ..LocalConfig::default()
        })
        .map_err(|e| e.to_string())?;
        let key = format!("faulty_{fault:?}").to_lowercase();
        let driver = Faulty {
            inner,
            fault,
            key,
            released: Mutex::new(HashSet::new()),
            one_at_a_time: tokio::sync::Mutex::new(()),
            first_executed: Mutex::new(None),
        };
        Ok(Target::new(Arc::new(driver))
            .with_cases(8)
            .with_resource_probe(workspace_probe()))
    }
}

/// A suite for `fault`.
pub(crate) fn suite(fault: Fault, root: &Path) -> Suite {
    Suite::build(|| target(fault, root)).expect("suite")
}
