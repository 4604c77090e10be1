//! The connection to the engine: address resolution, a bounded first exchange, and the
//! mapping of bollard errors to [`DriverError`]s that name the engine's address.

use std::future::Future;
use std::time::Duration;

use bollard::errors::Error as BollardError;
use bollard::{API_DEFAULT_VERSION, Docker};
use envrt_runtime_core::DriverError;

use crate::config::DockerConfig;

/// A connected engine client plus what error messages need.
#[derive(Clone, Debug)]
pub(crate) struct Engine {
    pub(crate) docker: Docker,
    pub(crate) address: String,
    pub(crate) api_timeout: Duration,
}

/// The text of the error returned when the engine does not answer.
pub(crate) fn unreachable_message(address: &str, doing: &str) -> String {
    format!("Docker engine at {address} is not reachable ({doing}).")
}

impl Engine {
    /// Connects and checks that the engine answers within `config.connect_timeout`; the
    /// client speaks the engine's API version from then on.
    pub(crate) async fn connect(config: &DockerConfig) -> Result<Engine, DriverError> {
        let address = config.resolved_host();
        let unreachable = |source: Option<Box<dyn std::error::Error + Send + Sync>>| DriverError::Unavailable {
            message: unreachable_message(&address, "connecting"),
            source,
        };
        // bollard's own timeout is whole seconds and bounds every request until its
        // response head (an upload's whole body): the transfer bound, the longest one.
        let client_timeout = config.transfer_timeout.as_secs().max(1);
        let docker = if let Some(path) = address.strip_prefix("unix://") {
            Docker::connect_with_unix(path, client_timeout, API_DEFAULT_VERSION)
        } else if address.starts_with('/') {
            Docker::connect_with_unix(&address, client_timeout, API_DEFAULT_VERSION)
        } else if address.starts_with("tcp://") || address.starts_with("http://") {
            Docker::connect_with_http(&address, client_timeout, API_DEFAULT_VERSION)
        } else {
            return Err(DriverError::invalid(format!(
                "Docker host \"{address}\" is not supported: use unix:///path, tcp://host:port or http://host:port."
            )));
        }
        .map_err(|e| unreachable(Some(Box::new(e))))?;
        // The engine may speak an older API than bollard's default: negotiate (one
        // GET /version, which doubles as the ping), bounded.
        let docker = match tokio::time::timeout(config.connect_timeout, docker.negotiate_version()).await {
            Ok(Ok(docker)) => docker,
            Ok(Err(e)) => return Err(unreachable(Some(Box::new(e)))),
            Err(_) => {
                return Err(unreachable(Some(
                    format!("no answer within {} ms", config.connect_timeout.as_millis()).into(),
                )));
            }
        };
        Ok(Engine {
            docker,
            address,
            api_timeout: config.api_timeout,
        })
    }

    /// Runs one control request under the API timeout.
    pub(crate) async fn call<T>(&self, fut: impl Future<Output = Result<T, BollardError>>) -> Result<T, BollardError> {
        match tokio::time::timeout(self.api_timeout, fut).await {
            Ok(result) => result,
            Err(_) => Err(BollardError::RequestTimeoutError),
        }
    }

    /// Maps a bollard error met while `doing` something to a driver error naming the
    /// engine. Connection failures become [`DriverError::Unavailable`].
    pub(crate) fn error(&self, doing: &str, error: BollardError) -> DriverError {
        if is_connectivity(&error) {
            return DriverError::Unavailable {
                message: unreachable_message(&self.address, doing),
                source: Some(Box::new(error)),
            };
        }
        match error {
            BollardError::DockerResponseServerError { status_code, message } => DriverError::Other {
                message: format!(
                    "Docker engine at {} refused {doing}: {} (HTTP {status_code}).",
                    self.address,
                    message.trim()
                ),
                source: None,
            },
            other => DriverError::Other {
                message: format!("Docker engine at {} failed {doing}.", self.address),
                source: Some(Box::new(other)),
            },
        }
    }
}

/// Whether the error means the engine could not be reached or did not answer.
pub(crate) fn is_connectivity(error: &BollardError) -> bool {
    matches!(
        error,
        BollardError::RequestTimeoutError
            | BollardError::HyperResponseError { .. }
            | BollardError::HyperLegacyError { .. }
            | BollardError::IOError { .. }
            | BollardError::SocketNotFoundError(_)
    )
}

/// Whether the engine answered 404.
pub(crate) fn is_not_found(error: &BollardError) -> bool {
    matches!(error, BollardError::DockerResponseServerError { status_code: 404, .. })
}

/// Whether the engine answered with `status`.
pub(crate) fn has_status(error: &BollardError, status: u16) -> bool {
    matches!(error, BollardError::DockerResponseServerError { status_code, .. } if *status_code == status)
}
