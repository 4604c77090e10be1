//! The operations on a live lease: realize its workspace, execute, sync in and out,
//! open a duplex channel, and read its capabilities. Each passes the gate first.

use crate::capability::CapabilitySnapshot;
use crate::driver::{CapabilityInput, DuplexChannel, RealizedWorkspace, WorkspaceRequest};
use crate::error::RuntimeError;
use crate::execute::{ExecuteRequest, ExecuteResult};
use crate::model::resolve_driver_key;
use crate::sync::{SyncOperation, SyncResult};

use super::EnvironmentRuntime;
use super::gate::{Operation, gate, snapshot};

impl EnvironmentRuntime {
    /// Returns the lease's working directory.
    pub async fn realize_workspace(
        &self,
        lease_id: &str,
        request: &WorkspaceRequest,
    ) -> Result<RealizedWorkspace, RuntimeError> {
        self.traced("realize_workspace", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let realize = gate(&resolved, Operation::Realize, |d| d.as_realize(), |_| true).await?;
            Ok(realize.realize_workspace(&resolved.context, request).await?)
        })
        .await
    }

    /// Runs a command on the lease.
    pub async fn execute(&self, lease_id: &str, request: ExecuteRequest) -> Result<ExecuteResult, RuntimeError> {
        self.traced("execute", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let execute = gate(&resolved, Operation::Execute, |d| d.as_execute(), |_| true).await?;
            Ok(execute.execute(&resolved.context, request).await?)
        })
        .await
    }

    /// Host → environment transfer; needs the driver's sync and `nativeSyncIn`.
    pub async fn sync_in(&self, lease_id: &str, operations: &[SyncOperation]) -> Result<SyncResult, RuntimeError> {
        self.traced("sync_in", lease_id, self.sync(lease_id, operations, Operation::SyncIn))
            .await
    }

    /// Environment → host transfer; needs the driver's sync and `nativeSyncOut`.
    pub async fn sync_out(&self, lease_id: &str, operations: &[SyncOperation]) -> Result<SyncResult, RuntimeError> {
        self.traced(
            "sync_out",
            lease_id,
            self.sync(lease_id, operations, Operation::SyncOut),
        )
        .await
    }

    async fn sync(
        &self,
        lease_id: &str,
        operations: &[SyncOperation],
        direction: Operation,
    ) -> Result<SyncResult, RuntimeError> {
        let resolved = self.resolve(lease_id).await?;
        let context = &resolved.context;
        let sync = gate(&resolved, direction, |d| d.as_sync(), |s| s.supports_sync(context)).await?;
        Ok(match direction {
            Operation::SyncOut => sync
                .sync_out(context, operations)
                .await
                .map_err(|e| file_system(e, operations, true))?,
            _ => sync
                .sync_in(context, operations)
                .await
                .map_err(|e| file_system(e, operations, false))?,
        })
    }

    /// Whether native sync (both directions) works on this lease. Never an error: an
    /// unknown lease, an unregistered key or a driver without sync give `false`.
    pub async fn supports_sync(&self, lease_id: &str) -> bool {
        let Ok(resolved) = self.resolve(lease_id).await else {
            return false;
        };
        let Some(sync) = resolved.driver.as_sync() else {
            return false;
        };
        match snapshot(&resolved).await {
            Ok(s) => s.native_sync_in && s.native_sync_out && sync.supports_sync(&resolved.context),
            Err(_) => false,
        }
    }

    /// Opens a duplex channel to `command` (argv). Refused when the driver has no duplex,
    /// then when the lease's snapshot lacks `duplexCommandStream` or cannot be resolved;
    /// a refusal never reaches the driver.
    pub async fn open_duplex_channel(
        &self,
        lease_id: &str,
        command: &[String],
    ) -> Result<Box<dyn DuplexChannel>, RuntimeError> {
        self.traced("open_duplex_channel", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let duplex = gate(&resolved, Operation::Duplex, |d| d.as_duplex(), |_| true).await?;
            if command.is_empty() {
                return Err(crate::DriverError::invalid("a duplex command needs at least a program").into());
            }
            Ok(duplex.open_duplex_channel(&resolved.context, command).await?)
        })
        .await
    }

    /// The lease's effective snapshot; `Ok(None)` when its driver key is not registered.
    pub async fn resolve_capabilities(&self, lease_id: &str) -> Result<Option<CapabilitySnapshot>, RuntimeError> {
        let context = self.load(lease_id).await?;
        let key = resolve_driver_key(&context.lease, context.environment.as_ref());
        let Some(driver) = self.driver(key) else {
            return Ok(None);
        };
        let input = CapabilityInput {
            environment: context.environment,
            lease: Some(context.lease),
        };
        Ok(Some(driver.resolve_capabilities(&input).await?))
    }

    /// An environment's snapshot before any lease; `Ok(None)` when its driver is not
    /// registered.
    pub async fn environment_capabilities(
        &self,
        environment_id: &str,
    ) -> Result<Option<CapabilitySnapshot>, RuntimeError> {
        let environment = self.known_environment(environment_id).await?;
        let Some(driver) = self.driver(&environment.driver) else {
            return Ok(None);
        };
        let input = CapabilityInput {
            environment: Some(environment),
            lease: None,
        };
        Ok(Some(driver.resolve_capabilities(&input).await?))
    }
}

/// A sync's I/O failure because the file system it writes is full or read-only becomes
/// one typed error whatever the driver: [`crate::DriverError::HostFileSystem`] for a sync
/// out (the host target's), [`crate::DriverError::LeaseFileSystem`] for a sync in (the
/// lease target's), naming the operation's targets. Drivers that report the operating
/// system's error (local, Docker's and ssh's sync out) and those that type it themselves
/// (the sandbox's worker) give the same text; the drivers stage and rename, so nothing
/// partial is left. Any other error passes unchanged.
fn file_system(error: crate::DriverError, operations: &[SyncOperation], out: bool) -> crate::DriverError {
    let why = match &error {
        crate::DriverError::Io { source, .. } => match source.kind() {
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => "full",
            std::io::ErrorKind::ReadOnlyFilesystem => "read-only",
            _ => return error,
        },
        crate::DriverError::HostFileSystem { why, .. } if out => why,
        crate::DriverError::LeaseFileSystem { why, .. } if !out => why,
        _ => return error,
    };
    let targets: Vec<&str> = operations
        .iter()
        .flat_map(|op| op.files.iter().map(|f| f.target_path.as_str()))
        .collect();
    let target = targets.join(", ");
    match out {
        true => crate::DriverError::HostFileSystem { target, why },
        false => crate::DriverError::LeaseFileSystem { target, why },
    }
}
