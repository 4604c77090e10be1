//! `--server URL` (or `ENVRT_SERVER`): the tool acting through an `envrt serve` instead of
//! holding the runtime itself. The URL is `unix:PATH` (or an absolute socket path) or
//! `http://HOST:PORT`; the bearer token comes from `ENVRT_TOKEN` only (never an argument,
//! which every local user could read in the process list). One HTTP/1.1 exchange per
//! request (hyper's client on a tokio stream); the service's error body becomes
//! [`CliError::Service`] with its exact text, exit 2 for a 4xx and 1 otherwise.

use std::path::PathBuf;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::CliError;

/// Where the token comes from.
pub(crate) const TOKEN_VAR: &str = "ENVRT_TOKEN";

/// The longest NDJSON line read from a streamed answer (a chunk of output, base64).
const MAX_LINE: usize = 16 << 20;

#[derive(Debug)]
enum Endpoint {
    Unix(PathBuf),
    Tcp(String),
}

/// A service the tool acts through.
#[derive(Debug)]
pub(crate) struct Server {
    url: String,
    endpoint: Endpoint,
    token: String,
}

/// `envrt: "{url}" is not a service URL: give unix:PATH, an absolute socket path or http://HOST:PORT`.
fn not_a_url(url: &str) -> CliError {
    CliError::Usage(format!(
        "envrt: \"{url}\" is not a service URL: give unix:PATH, an absolute socket path or http://HOST:PORT"
    ))
}

impl Server {
    /// The service at `url` with `token` (from [`TOKEN_VAR`]).
    pub(crate) fn new(url: &str, token: Option<String>) -> Result<Server, CliError> {
        let endpoint = if let Some(path) = url.strip_prefix("unix://").or_else(|| url.strip_prefix("unix:")) {
            Endpoint::Unix(PathBuf::from(path))
        } else if url.starts_with('/') {
            Endpoint::Unix(PathBuf::from(url))
        } else if let Some(rest) = url.strip_prefix("http://") {
            let authority = rest.trim_end_matches('/');
            if authority.is_empty() || authority.contains('/') {
                return Err(not_a_url(url));
            }
            Endpoint::Tcp(authority.to_owned())
        } else if url.starts_with("https://") {
            return Err(CliError::Usage(format!(
                "envrt: the CLI reaches a service over its unix socket or plain http:// on loopback, not \"{url}\""
            )));
        } else {
            return Err(not_a_url(url));
        };
        let token = token.filter(|t| !t.is_empty()).ok_or_else(|| {
            CliError::Usage(format!(
                "envrt: --server needs a token: set {TOKEN_VAR} (envrt token create prints one)"
            ))
        })?;
        Ok(Server {
            url: url.to_owned(),
            endpoint,
            token,
        })
    }

    fn unreachable(&self, why: impl std::fmt::Display) -> CliError {
        CliError::Failure(format!("envrt: cannot reach the service at {}: {why}", self.url))
    }

    /// One request; the answer's head and its body still to read.
    async fn send(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<Response<Incoming>, CliError> {
        let host = match &self.endpoint {
            Endpoint::Unix(_) => "envrt",
            Endpoint::Tcp(authority) => authority,
        };
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, host)
            .header(hyper::header::AUTHORIZATION, format!("Bearer {}", self.token));
        if let Some(content_type) = content_type {
            request = request.header(hyper::header::CONTENT_TYPE, content_type);
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| CliError::Usage(format!("envrt: cannot make the request {path}: {e}")))?;
        match &self.endpoint {
            Endpoint::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(|e| self.unreachable(e))?;
                self.exchange(stream, request).await
            }
            Endpoint::Tcp(authority) => {
                let stream = tokio::net::TcpStream::connect(authority)
                    .await
                    .map_err(|e| self.unreachable(e))?;
                self.exchange(stream, request).await
            }
        }
    }

    async fn exchange<S>(&self, stream: S, request: Request<Full<Bytes>>) -> Result<Response<Incoming>, CliError>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| self.unreachable(e))?;
        // The connection ends with the answer's body (or when the sender is dropped).
        tokio::spawn(connection);
        let response = sender.send_request(request).await.map_err(|e| self.unreachable(e))?;
        if response.status().is_client_error() || response.status().is_server_error() {
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| self.unreachable(e))?
                .to_bytes();
            return Err(error_of(status, &body));
        }
        Ok(response)
    }

    /// A request whose answer is JSON.
    pub(crate) async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, CliError> {
        let bytes = self.bytes(method, path, body).await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| CliError::Failure(format!("envrt: the service answered {path} with unexpected JSON: {e}")))
    }

    /// A request with an optional JSON body; the whole answer.
    pub(crate) async fn bytes(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Bytes, CliError> {
        let (content_type, body) = match body {
            Some(value) => (Some("application/json"), Bytes::from(value.to_string())),
            None => (None, Bytes::new()),
        };
        self.raw(method, path, content_type, body).await
    }

    /// A request with a body of `content_type`; the whole answer.
    pub(crate) async fn raw(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<Bytes, CliError> {
        let response = self.send(method, path, content_type, body).await?;
        Ok(response
            .into_body()
            .collect()
            .await
            .map_err(|e| self.unreachable(e))?
            .to_bytes())
    }

    /// A streamed NDJSON answer, line by line.
    pub(crate) async fn lines(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Lines, CliError> {
        let (content_type, body) = match body {
            Some(value) => (Some("application/json"), Bytes::from(value.to_string())),
            None => (None, Bytes::new()),
        };
        let response = self.send(method, path, content_type, body).await?;
        Ok(Lines {
            body: response.into_body(),
            buffer: Vec::new(),
            url: self.url.clone(),
        })
    }
}

/// The service's error body as an error of the tool.
fn error_of(status: u16, body: &[u8]) -> CliError {
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        kind: String,
        message: String,
    }
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(error) => CliError::Service {
            status,
            kind: error.kind,
            message: error.message,
        },
        Err(_) => CliError::Failure(format!("envrt: the service answered {status} without an error body")),
    }
}

/// The lines of a streamed answer.
#[derive(Debug)]
pub(crate) struct Lines {
    body: Incoming,
    buffer: Vec<u8>,
    url: String,
}

impl Lines {
    /// The next line as JSON; `None` at the end. An `{"error": BODY}` line is returned
    /// as the error it carries.
    pub(crate) async fn next(&mut self) -> Result<Option<Value>, CliError> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let value: Value = serde_json::from_slice(&line)
                    .map_err(|e| CliError::Failure(format!("envrt: the service sent a line that is not JSON: {e}")))?;
                if let Some(error) = value.get("error") {
                    return Err(error_of(500, error.to_string().as_bytes()));
                }
                return Ok(Some(value));
            }
            if self.buffer.len() > MAX_LINE {
                return Err(CliError::Failure(format!(
                    "envrt: the service sent a line longer than {MAX_LINE} bytes"
                )));
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => {
                    return Err(CliError::Failure(format!(
                        "envrt: cannot reach the service at {}: {e}",
                        self.url
                    )));
                }
                None => return Ok(None),
            }
        }
    }
}

/// `segment` escaped for a path.
pub(crate) fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `/v1/leases/{lease}/processes/{n}` of a process id `{lease}/{n}`; a malformed id is the
/// facade's own refusal (`Process "{id}" was not found.`).
pub(crate) fn process_path(id: &str) -> Result<String, CliError> {
    let parsed: envrt::core::process::ProcessId =
        id.parse()
            .map_err(|e: envrt::core::process::ProcessError| CliError::Service {
                status: 404,
                kind: "process_not_found".into(),
                message: e.to_string(),
            })?;
    Ok(format!(
        "/v1/leases/{}/processes/{}",
        segment(&parsed.lease_id),
        parsed.number
    ))
}
