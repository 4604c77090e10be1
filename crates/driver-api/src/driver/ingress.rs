//! Paperclip's runner WebSocket ingress (capability `runnerWebSocketIngress`, contract
//! section 10): an authenticated endpoint on the host that carries WebSocket upgrades to a
//! port inside the lease. The endpoint's secret header values are [`Secret`]s, so neither
//! `Debug` nor `Display` of an endpoint shows them.

use async_trait::async_trait;

use super::LeaseContext;
use crate::error::DriverError;
use crate::secret::Secret;

/// The longest path a runner ingress endpoint takes.
pub const MAX_INGRESS_PATH: usize = 1024;

/// Checks a runner ingress request before any driver sees it: the port is 1 to 65535 and
/// the path starts with `/` and is at most [`MAX_INGRESS_PATH`] visible ASCII characters
/// without `?` or `#`. The refusals are
/// `Invalid input: runner ingress port must be 1 to 65535, not 0` and
/// `Invalid input: runner ingress path must start with "/" and be at most 1024 visible ASCII characters without "?" or "#", not "{path}"`.
pub fn check_ingress_request(port: u16, path: &str) -> Result<(), DriverError> {
    if port == 0 {
        return Err(DriverError::invalid("runner ingress port must be 1 to 65535, not 0"));
    }
    let visible = path.bytes().all(|b| b.is_ascii_graphic());
    if !path.starts_with('/') || path.len() > MAX_INGRESS_PATH || !visible || path.contains(['?', '#']) {
        // A path of control characters or one too long is shown escaped and cut.
        let shown: String = path.chars().take(64).collect();
        let cut = if path.chars().count() > 64 { "..." } else { "" };
        return Err(DriverError::invalid(format!(
            "runner ingress path must start with \"/\" and be at most {MAX_INGRESS_PATH} visible ASCII characters without \"?\" or \"#\", not {shown:?}{cut}"
        )));
    }
    Ok(())
}

/// One header a client must send to the endpoint; its value is secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngressHeader {
    /// The header's name (an HTTP token).
    pub name: String,
    /// Its value (never shown by `Debug` or `Display`).
    pub value: Secret,
}

/// An open runner ingress endpoint (Paperclip's `authenticated_websocket`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerIngressEndpoint {
    /// Where to connect: `ws://{loopback address}:{port}{path}`.
    pub websocket_url: String,
    /// Headers every upgrade request must carry (at least one).
    pub secret_headers: Vec<IngressHeader>,
    /// Changes whenever the endpoint does (another listener, another token).
    pub generation: String,
}

/// Runner WebSocket ingress, if the driver has it.
#[async_trait]
pub trait RunnerIngress: Send + Sync {
    /// An endpoint on the host that carries each WebSocket upgrade request for `path`
    /// carrying [`RunnerIngressEndpoint::secret_headers`] to `127.0.0.1:{port}` inside the
    /// lease, and refuses every other request before anything reaches the lease.
    ///
    /// Needs `runnerWebSocketIngress`. Before the call the facade has checked, in the
    /// gate's order (section 3), that the driver has the group, that the lease's snapshot
    /// grants the capability (else `Environment driver "{key}" does not support runner
    /// WebSocket ingress.`, also when the snapshot cannot be resolved), that the lease is
    /// not past its expiry and that it is active, and then the request
    /// ([`check_ingress_request`]).
    ///
    /// - MUST listen on the host's loopback only, and refuse a request without the secret
    ///   headers (the kit's `ingress_websocket_reaches_the_lease`).
    /// - MUST close the endpoint, with its connections, when the lease ends.
    /// - MUST NOT put a secret value into errors, logs or `Debug` output.
    async fn runner_ingress_endpoint(
        &self,
        context: &LeaseContext,
        port: u16,
        path: &str,
    ) -> Result<RunnerIngressEndpoint, DriverError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_checked_with_exact_texts() {
        assert!(check_ingress_request(8080, "/runner").is_ok());
        assert!(check_ingress_request(65535, "/").is_ok());
        assert_eq!(
            check_ingress_request(0, "/r").unwrap_err().to_string(),
            "Invalid input: runner ingress port must be 1 to 65535, not 0"
        );
        let refusal = |shown: &str| {
            format!(
                "Invalid input: runner ingress path must start with \"/\" and be at most 1024 visible ASCII characters without \"?\" or \"#\", not {shown}"
            )
        };
        for path in ["r", "", "/a b", "/r?x=1", "/r#f", "/\u{e9}"] {
            assert_eq!(
                check_ingress_request(80, path).unwrap_err().to_string(),
                refusal(&format!("{path:?}")),
                "{path}"
            );
        }
        let long = format!("/{}", "a".repeat(1024));
        let shown = format!("{:?}...", &long[..64]);
        assert_eq!(
            check_ingress_request(80, &long).unwrap_err().to_string(),
            refusal(&shown)
        );
        assert!(check_ingress_request(80, &long[..1024]).is_ok());
    }

    #[test]
    fn debug_never_shows_a_secret_value() {
        let endpoint = RunnerIngressEndpoint {
            websocket_url: "ws://127.0.0.1:1/r".into(),
            secret_headers: vec![IngressHeader {
                name: "x-token".into(),
                value: Secret::new("hunter2"),
            }],
            generation: "g1".into(),
        };
        let shown = format!("{endpoint:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("x-token"), "{shown}");
    }
}
