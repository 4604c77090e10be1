//! The connection to the engine: address resolution, a bounded first exchange, how each
//! request is waited for and repeated, and the mapping of bollard errors to
//! [`DriverError`]s that name the engine's address.
//!
//! A slow engine is not an unreachable one. Every failed request is classified as a
//! [`Fault`]:
//! - nobody listens at the address (no socket file, connection refused): the request fails
//!   at once with "not reachable";
//! - the connection could not be made for another reason (the request never left) or broke
//!   before the answer: an idempotent request ([`Engine::retry`]) is sent again, with a
//!   short backoff, for up to the API timeout;
//! - no answer within the API timeout: the engine is asked for a `/_ping` on another
//!   connection; while it answers, the request is simply waited for (up to the transfer
//!   timeout, the longest bound), and only a silent engine fails the request.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use bollard::errors::Error as BollardError;
use bollard::{API_DEFAULT_VERSION, ClientVersion, Docker};
use envrt_driver_api::DriverError;

use crate::config::DockerConfig;

/// A connected engine client plus what error messages need.
#[derive(Clone, Debug)]
pub(crate) struct Engine {
    pub(crate) docker: Docker,
    pub(crate) address: String,
    pub(crate) api_timeout: Duration,
    /// bollard's own whole-request bound, in seconds (the transfer timeout).
    client_timeout: u64,
    /// Bound on the liveness ping asked when a request is slow (the longer of the connect
    /// and API timeouts).
    ping_timeout: Duration,
    /// Longest a single request is waited for while the engine still answers pings.
    patience: Duration,
}

/// A client of the engine at `address` speaking `version`; `None` for an address of no
/// supported kind. Makes no request.
fn client(address: &str, timeout: u64, version: &ClientVersion) -> Option<Result<Docker, BollardError>> {
    if let Some(path) = address.strip_prefix("unix://") {
        Some(Docker::connect_with_unix(path, timeout, version))
    } else if address.starts_with('/') {
        Some(Docker::connect_with_unix(address, timeout, version))
    } else if address.starts_with("tcp://") || address.starts_with("http://") {
        Some(Docker::connect_with_http(address, timeout, version))
    } else {
        None
    }
}

/// What a failed request says about the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Nobody listens at the address: no socket file, or the connection was refused.
    Absent,
    /// The connection could not be made for another reason (say a full accept queue): the
    /// request never left, so sending it again is always safe.
    NotSent,
    /// The connection broke after the request left: only an idempotent request may be
    /// sent again.
    Lost,
    /// No answer in time, and the engine did not answer a ping either.
    Silent,
    /// The engine answered (an HTTP error, a body that does not parse): not about reaching it.
    Answered,
}

/// Classifies a bollard error.
pub(crate) fn fault(error: &BollardError) -> Fault {
    match error {
        BollardError::SocketNotFoundError(_) => Fault::Absent,
        BollardError::RequestTimeoutError => Fault::Silent,
        BollardError::HyperLegacyError { err } if err.is_connect() => {
            let absent = io_kinds(err).any(|kind| {
                matches!(
                    kind,
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                )
            });
            if absent { Fault::Absent } else { Fault::NotSent }
        }
        BollardError::HyperLegacyError { .. }
        | BollardError::HyperResponseError { .. }
        | BollardError::IOError { .. } => Fault::Lost,
        _ => Fault::Answered,
    }
}

/// The kinds of every I/O error in `error`'s source chain.
fn io_kinds<'a>(error: &'a (dyn std::error::Error + 'static)) -> impl Iterator<Item = std::io::ErrorKind> + 'a {
    std::iter::successors(Some(error), |e| e.source())
        .filter_map(|e| e.downcast_ref::<std::io::Error>().map(|io| io.kind()))
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
        let Some(docker) = client(&address, client_timeout, API_DEFAULT_VERSION) else {
            return Err(DriverError::invalid(format!(
                "Docker host \"{address}\" is not supported: use unix:///path, tcp://host:port or http://host:port."
            )));
        };
        let docker = docker.map_err(|e| unreachable(Some(Box::new(e))))?;
        // The engine may speak an older API than bollard's default: negotiate (one
        // GET /version, which doubles as the ping), bounded; a connection that could not
        // be made or broke (not an absent engine) is tried again within the bound.
        let deadline = Instant::now() + config.connect_timeout;
        let mut delay = Duration::from_millis(10);
        let docker = loop {
            match tokio::time::timeout_at(deadline, docker.clone().negotiate_version()).await {
                Ok(Ok(docker)) => break docker,
                Ok(Err(e))
                    if matches!(fault(&e), Fault::NotSent | Fault::Lost) && Instant::now() + delay < deadline =>
                {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_millis(500));
                }
                Ok(Err(e)) => return Err(unreachable(Some(Box::new(e)))),
                Err(_) => {
                    return Err(unreachable(Some(
                        format!("no answer within {} ms", config.connect_timeout.as_millis()).into(),
                    )));
                }
            }
        };
        Ok(Engine {
            docker,
            address,
            client_timeout,
            api_timeout: config.api_timeout,
            // A loaded engine answers a ping slowly too: as long as a request may take.
            ping_timeout: config.connect_timeout.max(config.api_timeout),
            patience: config.transfer_timeout.max(config.api_timeout),
        })
    }

    /// The same engine through a client of its own (no connection shared with this one),
    /// speaking the version this one negotiated: for work done on another async runtime
    /// than the one this client's connections live on (a dropped execute's kill).
    pub(crate) fn detached(&self) -> Result<Engine, BollardError> {
        let version = self.docker.client_version();
        let docker = client(&self.address, self.client_timeout, &version).ok_or_else(|| {
            BollardError::UnsupportedURISchemeError {
                uri: self.address.clone(),
            }
        })??;
        Ok(Engine { docker, ..self.clone() })
    }

    /// Runs one control request, sent once. When it has no answer within the API
    /// timeout, the engine is pinged: while it answers, the request is waited for in
    /// further API-timeout steps (up to the transfer timeout); a silent engine fails it
    /// with [`BollardError::RequestTimeoutError`].
    pub(crate) async fn call<T>(&self, fut: impl Future<Output = Result<T, BollardError>>) -> Result<T, BollardError> {
        tokio::pin!(fut);
        let ceiling = Instant::now() + self.patience;
        let mut step = (Instant::now() + self.api_timeout).min(ceiling);
        loop {
            if let Ok(result) = tokio::time::timeout_at(step, &mut fut).await {
                return result;
            }
            if Instant::now() >= ceiling {
                return Err(BollardError::RequestTimeoutError);
            }
            // Slow or gone? Ask on another connection, still taking the answer if it comes.
            tokio::select! {
                biased;
                result = &mut fut => return result,
                alive = self.answers() => {
                    if !alive {
                        return Err(BollardError::RequestTimeoutError);
                    }
                }
            }
            tracing::debug!(address = %self.address, "the engine is slow but answers: still waiting");
            step = (Instant::now() + self.api_timeout).min(ceiling);
        }
    }

    /// Runs an idempotent request made by `request`: waited for like [`Engine::call`], and
    /// sent again (short backoff, for up to the API timeout) when its connection could not
    /// be made or broke before the answer. An absent engine fails it at once.
    pub(crate) async fn retry<T, F, Fut>(&self, mut request: F) -> Result<T, BollardError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, BollardError>>,
    {
        let deadline = Instant::now() + self.api_timeout;
        let mut delay = Duration::from_millis(10);
        loop {
            match self.call(request()).await {
                Err(e) if matches!(fault(&e), Fault::NotSent | Fault::Lost) && Instant::now() < deadline => {
                    tracing::debug!(address = %self.address, error = %e, "an idempotent request lost its connection: sending it again");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_millis(500));
                }
                other => return other,
            }
        }
    }

    /// Longest a single request is waited for while the engine still answers pings.
    pub(crate) fn patience(&self) -> Duration {
        self.patience
    }

    /// Whether the engine answers a ping within the ping bound.
    pub(crate) async fn answers(&self) -> bool {
        matches!(
            tokio::time::timeout(self.ping_timeout, self.docker.ping()).await,
            Ok(Ok(_))
        )
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
    fault(error) != Fault::Answered
}

/// Whether `error` is an unreachable engine whose request may be sent again: its
/// connection could not be made (but someone listens) or broke on the way.
pub(crate) fn is_repeatable(error: &DriverError) -> bool {
    let DriverError::Unavailable {
        source: Some(source), ..
    } = error
    else {
        return false;
    };
    source
        .downcast_ref::<BollardError>()
        .is_some_and(|e| matches!(fault(e), Fault::NotSent | Fault::Lost))
}

/// Whether the engine answered 404.
pub(crate) fn is_not_found(error: &BollardError) -> bool {
    matches!(error, BollardError::DockerResponseServerError { status_code: 404, .. })
}

/// Whether the engine answered with `status`.
pub(crate) fn has_status(error: &BollardError, status: u16) -> bool {
    matches!(error, BollardError::DockerResponseServerError { status_code, .. } if *status_code == status)
}
