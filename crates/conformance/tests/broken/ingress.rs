//! Runner ingress faults: drivers that grant `runnerWebSocketIngress` on the local driver
//! (whose leases share the host's network, so a lease's port is the host's) and hand out
//! an endpoint that does not keep its promise.

use async_trait::async_trait;
use envrt_runtime_core::driver::IngressHeader;
use envrt_runtime_core::{DriverError, LeaseContext, RunnerIngress, RunnerIngressEndpoint, Secret};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Fault, Faulty};

/// The verb the faulty drivers claim.
pub(crate) const VERB: &str = "environmentRunnerIngressEndpoint";

/// Whether `fault` is one of these.
pub(crate) fn claims_ingress(fault: Fault) -> bool {
    matches!(fault, Fault::IngressWithoutToken | Fault::IngressNotToTheLease)
}

fn endpoint(url: String, token: &str) -> RunnerIngressEndpoint {
    RunnerIngressEndpoint {
        websocket_url: url,
        secret_headers: vec![IngressHeader {
            name: "x-faulty-token".into(),
            value: Secret::new(token),
        }],
        generation: "1".into(),
    }
}

#[async_trait]
impl RunnerIngress for Faulty {
    async fn runner_ingress_endpoint(
        &self,
        _context: &LeaseContext,
        port: u16,
        path: &str,
    ) -> Result<RunnerIngressEndpoint, DriverError> {
        if self.has(Fault::IngressWithoutToken) {
            // The lease's port itself: a token is named, and nothing checks it.
            return Ok(endpoint(format!("ws://127.0.0.1:{port}{path}"), "never-checked"));
        }
        // A listener of its own that checks the token and answers every upgrade itself:
        // nothing reaches the lease.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| DriverError::io("bind", e))?;
        let addr = listener.local_addr().map_err(|e| DriverError::io("bind", e))?;
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && head.len() < 65536 {
                        match conn.read(&mut byte).await {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let authorised = String::from_utf8_lossy(&head).contains("x-faulty-token: checked-token");
                    let answer: &[u8] = if authorised {
                        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nend\n"
                    } else {
                        b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n"
                    };
                    let _ = conn.write_all(answer).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Ok(endpoint(format!("ws://{addr}{path}"), "checked-token"))
    }
}
