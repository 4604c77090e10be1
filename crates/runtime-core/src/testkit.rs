//! A configurable in-memory driver that counts its calls, for testing the facade and the
//! conformance kit's capability checks. It runs nothing real.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::capability::{CapabilityDeclaration, CapabilityKey, CapabilitySnapshot};
use crate::driver::*;
use crate::error::DriverError;
use crate::execute::{ExecuteRequest, ExecuteResult};
use crate::model::Timestamp;
use crate::sync::{SyncOperation, SyncOperationResult, SyncResult};

/// Which optional groups a [`ProbeDriver`] has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeShape {
    /// Has resume.
    pub resume: bool,
    /// Has destroy.
    pub destroy: bool,
    /// Has realize.
    pub realize: bool,
    /// Has execute.
    pub execute: bool,
    /// Has sync.
    pub sync: bool,
    /// Has duplex.
    pub duplex: bool,
}

impl ProbeShape {
    /// Every optional group.
    pub fn full() -> Self {
        ProbeShape {
            resume: true,
            destroy: true,
            realize: true,
            execute: true,
            sync: true,
            duplex: true,
        }
    }
}

/// How a [`ProbeDriver`] answers a requested expiry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProbeExpiry {
    /// It attests exactly the requested expiry.
    #[default]
    Honour,
    /// It attests none (it cannot bound its resource).
    Unbounded,
    /// It attests one second later than requested (a dishonest driver).
    Late,
}

/// A driver whose optional groups, declaration and failures are configurable, and which
/// records every call it receives.
pub struct ProbeDriver {
    key: String,
    shape: ProbeShape,
    declaration: Option<CapabilityDeclaration>,
    fail_capabilities: AtomicBool,
    fail_release: AtomicBool,
    expiry: Mutex<ProbeExpiry>,
    calls: Mutex<BTreeMap<&'static str, usize>>,
    destroyed: Mutex<std::collections::BTreeSet<String>>,
    execute_gate: Mutex<Option<Arc<ProbeGate>>>,
    release_gate: Mutex<Option<Arc<ProbeGate>>>,
}

/// Where the probe's execute waits once it is in the driver (past the facade's gate):
/// `started` is notified, then it waits for a permit of `go`.
pub struct ProbeGate {
    /// Notified when an execute reached the driver.
    pub started: tokio::sync::Notify,
    /// A permit lets one waiting execute go on.
    pub go: tokio::sync::Semaphore,
}

impl ProbeDriver {
    /// A driver under `key` with `shape` and an optional declaration.
    pub fn new(key: impl Into<String>, shape: ProbeShape, declaration: Option<CapabilityDeclaration>) -> Self {
        ProbeDriver {
            key: key.into(),
            shape,
            declaration,
            fail_capabilities: AtomicBool::new(false),
            fail_release: AtomicBool::new(false),
            expiry: Mutex::new(ProbeExpiry::Honour),
            calls: Mutex::new(BTreeMap::new()),
            destroyed: Mutex::new(Default::default()),
            execute_gate: Mutex::new(None),
            release_gate: Mutex::new(None),
        }
    }

    /// Makes every execute wait at the returned gate once it is in the driver.
    pub fn hold_executes(&self) -> Arc<ProbeGate> {
        let gate = Arc::new(ProbeGate {
            started: tokio::sync::Notify::new(),
            go: tokio::sync::Semaphore::new(0),
        });
        *self.execute_gate.lock().unwrap() = Some(gate.clone());
        gate
    }

    /// Makes every release wait at the returned gate once it is in the driver.
    pub fn hold_releases(&self) -> Arc<ProbeGate> {
        let gate = Arc::new(ProbeGate {
            started: tokio::sync::Notify::new(),
            go: tokio::sync::Semaphore::new(0),
        });
        *self.release_gate.lock().unwrap() = Some(gate.clone());
        gate
    }

    /// Makes `resolve_capabilities` fail (or succeed again).
    pub fn set_fail_capabilities(&self, fail: bool) {
        self.fail_capabilities.store(fail, Ordering::SeqCst);
    }

    /// Makes `release_lease` fail (or succeed again).
    pub fn set_fail_release(&self, fail: bool) {
        self.fail_release.store(fail, Ordering::SeqCst);
    }

    /// How `acquire_lease` answers a requested expiry.
    pub fn set_expiry(&self, expiry: ProbeExpiry) {
        *self.expiry.lock().unwrap() = expiry;
    }

    /// Makes the resource of `lease_id` gone, as if it died outside envrt: resume answers
    /// that it no longer exists, execute that the resource does not exist.
    pub fn kill_resource(&self, lease_id: &str) {
        self.destroyed.lock().unwrap().insert(lease_id.to_owned());
    }

    /// How many times `operation` was called.
    pub fn calls(&self, operation: &str) -> usize {
        self.calls.lock().unwrap().get(operation).copied().unwrap_or(0)
    }

    /// Total calls of every operation except `resolve_capabilities`.
    pub fn operation_calls(&self) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| **k != "resolve_capabilities")
            .map(|(_, v)| v)
            .sum()
    }

    fn record(&self, operation: &'static str) {
        *self.calls.lock().unwrap().entry(operation).or_default() += 1;
    }
}

#[async_trait]
impl EnvironmentDriver for ProbeDriver {
    fn key(&self) -> &str {
        &self.key
    }

    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        self.record("acquire_lease");
        let expiry = *self.expiry.lock().unwrap();
        let expires_at = input.requested_expires_at.and_then(|at| match expiry {
            ProbeExpiry::Honour => Some(at),
            ProbeExpiry::Unbounded => None,
            ProbeExpiry::Late => Some(Timestamp(at.0 + 1000)),
        });
        Ok(LeaseGrant {
            provider: Some("probe".into()),
            provider_lease_id: Some(format!("probe-{}", input.lease_id)),
            expires_at,
            ..Default::default()
        })
    }

    async fn release_lease(&self, _input: &ReleaseInput) -> Result<(), DriverError> {
        self.record("release_lease");
        let gate = self.release_gate.lock().unwrap().clone();
        if let Some(gate) = gate {
            gate.started.notify_one();
            let _permit = gate.go.acquire().await;
        }
        if self.fail_release.load(Ordering::SeqCst) {
            return Err(DriverError::other("probe release failed"));
        }
        Ok(())
    }

    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        self.record("resolve_capabilities");
        if self.fail_capabilities.load(Ordering::SeqCst) {
            return Err(DriverError::other("probe capability resolution failed"));
        }
        // Every key but persistentProcessSessions: the probe has no process group, and a
        // driver that grants the key without it is dishonest (`honesty_processes`).
        let supported = CapabilityKey::ALL
            .into_iter()
            .filter(|key| *key != CapabilityKey::PersistentProcessSessions)
            .collect();
        Ok(classify_driver(self, supported, self.declaration.as_ref(), input, true))
    }

    fn as_resume(&self) -> Option<&dyn ResumeLease> {
        self.shape.resume.then_some(self as _)
    }
    fn as_destroy(&self) -> Option<&dyn DestroyLease> {
        self.shape.destroy.then_some(self as _)
    }
    fn as_realize(&self) -> Option<&dyn RealizeWorkspace> {
        self.shape.realize.then_some(self as _)
    }
    fn as_execute(&self) -> Option<&dyn Execute> {
        self.shape.execute.then_some(self as _)
    }
    fn as_sync(&self) -> Option<&dyn FileSync> {
        self.shape.sync.then_some(self as _)
    }
    fn as_duplex(&self) -> Option<&dyn DuplexChannels> {
        self.shape.duplex.then_some(self as _)
    }
}

#[async_trait]
impl ResumeLease for ProbeDriver {
    async fn resume_lease(&self, context: &LeaseContext) -> Result<Option<LeaseGrant>, DriverError> {
        self.record("resume_lease");
        if self.destroyed.lock().unwrap().contains(&context.lease.id) {
            return Ok(None);
        }
        Ok(Some(LeaseGrant {
            provider_lease_id: context.lease.provider_lease_id.clone(),
            ..Default::default()
        }))
    }
}

#[async_trait]
impl DestroyLease for ProbeDriver {
    async fn destroy_lease(&self, context: &LeaseContext) -> Result<(), DriverError> {
        self.record("destroy_lease");
        self.destroyed.lock().unwrap().insert(context.lease.id.clone());
        Ok(())
    }
}

#[async_trait]
impl RealizeWorkspace for ProbeDriver {
    async fn realize_workspace(
        &self,
        context: &LeaseContext,
        _request: &WorkspaceRequest,
    ) -> Result<RealizedWorkspace, DriverError> {
        self.record("realize_workspace");
        Ok(RealizedWorkspace {
            cwd: format!("/probe/{}", context.lease.id),
            metadata: None,
        })
    }
}

#[async_trait]
impl Execute for ProbeDriver {
    async fn execute(&self, context: &LeaseContext, request: ExecuteRequest) -> Result<ExecuteResult, DriverError> {
        self.record("execute");
        let gate = self.execute_gate.lock().unwrap().clone();
        if let Some(gate) = gate {
            gate.started.notify_one();
            let _permit = gate.go.acquire().await;
        }
        if self.destroyed.lock().unwrap().contains(&context.lease.id) {
            return Err(DriverError::ResourceGone {
                id: context.lease.provider_lease_id.clone().unwrap_or_default(),
            });
        }
        let mut stdout = request.command.into_bytes();
        for arg in request.args {
            stdout.push(b' ');
            stdout.extend(arg.into_bytes());
        }
        Ok(ExecuteResult {
            exit_code: Some(0),
            stdout,
            ..Default::default()
        })
    }
}

fn counts(operations: &[SyncOperation]) -> SyncResult {
    SyncResult {
        operations: operations
            .iter()
            .map(|op| SyncOperationResult {
                operation_id: op.operation_id.clone(),
                files_transferred: op.files.len() as u64,
                bytes_transferred: 0,
            })
            .collect(),
    }
}

#[async_trait]
impl FileSync for ProbeDriver {
    async fn sync_in(&self, _context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        self.record("sync_in");
        Ok(counts(operations))
    }

    async fn sync_out(&self, _context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        self.record("sync_out");
        Ok(counts(operations))
    }
}

#[async_trait]
impl DuplexChannels for ProbeDriver {
    async fn open_duplex_channel(
        &self,
        _context: &LeaseContext,
        _command: &[String],
    ) -> Result<Box<dyn DuplexChannel>, DriverError> {
        self.record("open_duplex_channel");
        Ok(Box::new(EchoChannel::default()))
    }
}

/// An in-memory channel that echoes what is written, like `cat`.
#[derive(Default)]
struct EchoChannel {
    state: Mutex<EchoState>,
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct EchoState {
    queue: VecDeque<Vec<u8>>,
    input_closed: bool,
    closed: bool,
}

#[async_trait]
impl DuplexChannel for EchoChannel {
    async fn write(&self, data: &[u8]) -> Result<(), DriverError> {
        let mut state = self.state.lock().unwrap();
        if state.input_closed || state.closed {
            return Err(DriverError::ChannelClosed);
        }
        if !data.is_empty() {
            state.queue.push_back(data.to_vec());
        }
        self.wake.notify_waiters();
        Ok(())
    }

    async fn read(&self) -> Result<Option<Vec<u8>>, DriverError> {
        loop {
            let notified = self.wake.notified();
            {
                let mut state = self.state.lock().unwrap();
                if let Some(chunk) = state.queue.pop_front() {
                    return Ok(Some(chunk));
                }
                if state.input_closed || state.closed {
                    return Ok(None);
                }
            }
            notified.await;
        }
    }

    async fn close_input(&self) -> Result<(), DriverError> {
        self.state.lock().unwrap().input_closed = true;
        self.wake.notify_waiters();
        Ok(())
    }

    async fn stop(&self) -> Result<(), DriverError> {
        self.close().await
    }

    async fn close(&self) -> Result<(), DriverError> {
        self.state.lock().unwrap().closed = true;
        self.wake.notify_waiters();
        Ok(())
    }

    async fn wait(&self) -> Result<DuplexExit, DriverError> {
        loop {
            let notified = self.wake.notified();
            {
                let state = self.state.lock().unwrap();
                if state.closed {
                    return Ok(DuplexExit {
                        exit_code: None,
                        transport_closed: false,
                    });
                }
                if state.input_closed && state.queue.is_empty() {
                    return Ok(DuplexExit {
                        exit_code: Some(0),
                        transport_closed: false,
                    });
                }
            }
            notified.await;
        }
    }
}
