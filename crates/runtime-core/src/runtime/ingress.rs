//! Paperclip's runner WebSocket ingress (contract section 10, `runner_ingress`): the
//! facade passes the gate (the driver's [`RunnerIngress`](crate::driver::RunnerIngress)
//! group and the lease's `runnerWebSocketIngress`), checks the port and path, and hands
//! back the driver's endpoint. The endpoint is the driver's (the sandbox's is opened by
//! its worker); its secret header values are [`Secret`](crate::Secret)s, never shown by
//! `Debug` nor recorded in the trace.

use crate::driver::{RunnerIngressEndpoint, check_ingress_request};
use crate::error::RuntimeError;

use super::EnvironmentRuntime;
use super::gate::{Operation, gate};

impl EnvironmentRuntime {
    /// An authenticated WebSocket endpoint on the host for `path` that reaches
    /// `127.0.0.1:{port}` inside the lease. Refused, before the driver is called, with
    /// the gate's texts (`Environment driver "{key}" does not support runner WebSocket
    /// ingress.` when the driver lacks the group or the lease's snapshot denies
    /// `runnerWebSocketIngress`), then with [`check_ingress_request`]'s.
    pub async fn runner_ingress(
        &self,
        lease_id: &str,
        port: u16,
        path: &str,
    ) -> Result<RunnerIngressEndpoint, RuntimeError> {
        self.traced("runner_ingress", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let ingress = gate(&resolved, Operation::RunnerIngress, |d| d.as_runner_ingress(), |_| true).await?;
            check_ingress_request(port, path)?;
            Ok(ingress.runner_ingress_endpoint(&resolved.context, port, path).await?)
        })
        .await
    }
}
