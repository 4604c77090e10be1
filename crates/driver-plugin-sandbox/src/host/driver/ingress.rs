//! Runner WebSocket ingress (`runnerWebSocketIngress`): the host forwards
//! `environmentRunnerIngressEndpoint {lease, port, path}` to a worker that advertises it,
//! and takes the answer as untrusted: it becomes an endpoint only when it is exactly an
//! `authenticated_websocket` on the host's loopback, for the path asked, with at least one
//! bounded secret header ([`endpoint_of`]); otherwise the call fails with
//! `Worker returned an invalid result for "environmentRunnerIngressEndpoint": {why}`,
//! where `why` never carries a header's value.
//!
//! When the worker also advertises `envrtStartProcessSupervisor` (the reference worker
//! reaches the lease's port through the lease's process supervisor), the host starts the
//! supervisor first when none answers, as `expose` does, and names the directory it listens
//! in (`envrtSocketDir`): a supervisor outlives the worker that started it, so the worker
//! asked may not be the one that started it.

use std::net::IpAddr;

use async_trait::async_trait;
use envrt_driver_agent::AgentHost;
use envrt_driver_api::driver::{IngressHeader, RunnerIngress, RunnerIngressEndpoint, check_ingress_request};
use envrt_driver_api::{DriverError, LeaseContext, Secret};
use serde_json::Value;

use super::SandboxDriver;
use crate::host::error::SandboxError;
use crate::protocol::environment::RunnerIngressEndpointParams;
use crate::protocol::methods;

/// The longest `websocketUrl` taken.
pub(crate) const MAX_URL: usize = 2048;
/// The most secret headers taken.
pub(crate) const MAX_HEADERS: usize = 8;
/// The longest header name taken.
pub(crate) const MAX_HEADER_NAME: usize = 64;
/// The longest header value taken.
pub(crate) const MAX_HEADER_VALUE: usize = 1024;
/// The longest `generation` taken.
pub(crate) const MAX_GENERATION: usize = 256;

/// Headers a worker may not name: the request's own framing and the WebSocket handshake,
/// which a client sets itself.
const RESERVED: [&str; 8] = [
    "host",
    "upgrade",
    "connection",
    "content-length",
    "transfer-encoding",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
];

#[async_trait]
impl RunnerIngress for SandboxDriver {
    async fn runner_ingress_endpoint(
        &self,
        context: &LeaseContext,
        port: u16,
        path: &str,
    ) -> Result<RunnerIngressEndpoint, DriverError> {
        self.require(methods::RUNNER_INGRESS_ENDPOINT)?;
        // Checked here too for a caller that is not the facade.
        check_ingress_request(port, path)?;
        let socket_dir = if self.advertises(methods::START_PROCESS_SUPERVISOR) {
            self.agent(context, true).await?;
            self.socket_dirs
                .dir_of(&context.lease.id)?
                .map(|dir| dir.to_string_lossy().into_owned())
        } else {
            None
        };
        let params = RunnerIngressEndpointParams {
            base: self.base(context),
            lease: Self::lease(context),
            port,
            path: path.to_owned(),
            envrt_socket_dir: socket_dir,
        };
        let answer = self
            .rpc(methods::RUNNER_INGRESS_ENDPOINT, &params, &context.lease.company_id)
            .await?;
        Ok(endpoint_of(answer, path)?)
    }
}

fn invalid(why: impl Into<String>) -> SandboxError {
    SandboxError::InvalidResult {
        method: methods::RUNNER_INGRESS_ENDPOINT.to_owned(),
        message: why.into(),
    }
}

/// A string field of `object`, at most `max` bytes.
fn text<'a>(object: &'a serde_json::Map<String, Value>, field: &str, max: usize) -> Result<&'a str, SandboxError> {
    match object.get(field) {
        Some(Value::String(s)) if s.len() <= max => Ok(s),
        Some(Value::String(_)) => Err(invalid(format!("{field} is longer than {max} bytes"))),
        Some(_) => Err(invalid(format!("{field} is not a string"))),
        None => Err(invalid(format!("{field} is missing"))),
    }
}

/// Whether `name` is an HTTP header name (an RFC 9110 token).
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The worker's answer for `path` as an endpoint, or why it is not one (never showing a
/// header's value).
pub(crate) fn endpoint_of(answer: Value, path: &str) -> Result<RunnerIngressEndpoint, SandboxError> {
    let Value::Object(object) = answer else {
        return Err(invalid("expected an object"));
    };
    let kind = text(&object, "kind", 64)?;
    if kind != "authenticated_websocket" {
        return Err(invalid(format!(
            "kind must be \"authenticated_websocket\", not {kind:?}"
        )));
    }
    let url = text(&object, "websocketUrl", MAX_URL)?;
    check_url(url, path)?;
    let generation = text(&object, "generation", MAX_GENERATION)?;
    if generation.is_empty() || !generation.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid("generation must be 1 to 256 visible ASCII characters"));
    }
    let headers = match object.get("secretHeaders") {
        Some(Value::Array(headers)) => headers,
        Some(_) => return Err(invalid("secretHeaders is not an array")),
        None => return Err(invalid("secretHeaders is missing")),
    };
    if headers.is_empty() || headers.len() > MAX_HEADERS {
        return Err(invalid(format!(
            "secretHeaders must hold 1 to {MAX_HEADERS} headers, not {}",
            headers.len()
        )));
    }
    let mut secret_headers: Vec<IngressHeader> = Vec::with_capacity(headers.len());
    for (i, header) in headers.iter().enumerate() {
        let Value::Object(header) = header else {
            return Err(invalid(format!("secretHeaders[{i}] is not an object")));
        };
        let name = text(header, "name", MAX_HEADER_NAME).map_err(|_| {
            invalid(format!(
                "secretHeaders[{i}].name must be a string of at most {MAX_HEADER_NAME} bytes"
            ))
        })?;
        if !is_token(name) {
            return Err(invalid(format!(
                "secretHeaders[{i}].name {name:?} is not an HTTP header name"
            )));
        }
        let lower = name.to_ascii_lowercase();
        if RESERVED.contains(&lower.as_str()) {
            return Err(invalid(format!(
                "secretHeaders[{i}].name {name:?} is a header the client sets itself"
            )));
        }
        if secret_headers.iter().any(|h| h.name.eq_ignore_ascii_case(name)) {
            return Err(invalid(format!("secretHeaders[{i}].name {name:?} is named twice")));
        }
        // The value is never shown, whatever is wrong with it.
        let value = match header.get("value") {
            Some(Value::String(v)) => v,
            _ => return Err(invalid(format!("secretHeaders[{i}].value is not a string"))),
        };
        let printable = value.bytes().all(|b| (0x20..=0x7e).contains(&b)) && value.trim() == value;
        if value.is_empty() || value.len() > MAX_HEADER_VALUE || !printable {
            return Err(invalid(format!(
                "secretHeaders[{i}].value must be 1 to {MAX_HEADER_VALUE} printable ASCII characters, no space at either end"
            )));
        }
        secret_headers.push(IngressHeader {
            name: name.to_owned(),
            value: Secret::new(value.clone()),
        });
    }
    Ok(RunnerIngressEndpoint {
        websocket_url: url.to_owned(),
        secret_headers,
        generation: generation.to_owned(),
    })
}

/// `url` is `ws://{loopback IP}:{port}{path}`: an IP literal (a name could resolve
/// anywhere), no user information, a port, and exactly the path asked for.
fn check_url(url: &str, path: &str) -> Result<(), SandboxError> {
    let refused = || {
        invalid(format!(
            "websocketUrl must be ws://{{a loopback address}}:{{port}}{path}, not {url:?}"
        ))
    };
    let rest = url.strip_prefix("ws://").ok_or_else(refused)?;
    let (authority, tail) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    if tail != path {
        return Err(refused());
    }
    let (host, port) = authority.rsplit_once(':').ok_or_else(refused)?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let loopback = host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    let port_ok = !port.is_empty()
        && port.len() <= 5
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p != 0);
    if !loopback || !port_ok {
        return Err(refused());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(url: &str, headers: Value) -> Value {
        json!({"kind": "authenticated_websocket", "websocketUrl": url, "secretHeaders": headers, "generation": "g:1"})
    }

    fn why(answer: Value) -> String {
        endpoint_of(answer, "/runner").unwrap_err().to_string()
    }

    const SECRET: &str = "s3cret-value-0123";

    #[test]
    fn a_loopback_endpoint_for_the_path_is_taken() {
        let headers = json!([{"name": "x-envrt-ingress-token", "value": SECRET}, {"name": "Authorization", "value": "Bearer a b"}]);
        for url in [
            "ws://127.0.0.1:4000/runner",
            "ws://[::1]:4000/runner",
            "ws://127.9.0.1:1/runner",
        ] {
            let endpoint = endpoint_of(answer(url, headers.clone()), "/runner").unwrap();
            assert_eq!(endpoint.websocket_url, url);
            assert_eq!(endpoint.secret_headers[0].name, "x-envrt-ingress-token");
            assert_eq!(endpoint.secret_headers[0].value.expose(), SECRET);
            assert_eq!(endpoint.generation, "g:1");
        }
    }

    #[test]
    fn an_untrusted_answer_is_refused_with_exact_texts_that_never_show_a_value() {
        let good = json!([{"name": "x-token", "value": SECRET}]);
        let head = "Worker returned an invalid result for \"environmentRunnerIngressEndpoint\": ";
        let url_refusal =
            |url: &str| format!("{head}websocketUrl must be ws://{{a loopback address}}:{{port}}/runner, not {url:?}");
        for url in [
            "wss://127.0.0.1:4000/runner",
            "ws://10.0.0.1:4000/runner",
            "ws://0.0.0.0:4000/runner",
            "ws://localhost:4000/runner",
            "ws://evil@127.0.0.1:4000/runner",
            "ws://127.0.0.1/runner",
            "ws://127.0.0.1:0/runner",
            "ws://127.0.0.1:65536/runner",
            "ws://127.0.0.1:4000/other",
            "ws://127.0.0.1:4000/runner?x=1",
            "ws://127.0.0.1:4000",
        ] {
            assert_eq!(why(answer(url, good.clone())), url_refusal(url), "{url}");
        }
        let url = "ws://127.0.0.1:4000/runner";
        let mut other = answer(url, good.clone());
        other["kind"] = json!("plain_websocket");
        assert_eq!(
            why(other),
            format!("{head}kind must be \"authenticated_websocket\", not \"plain_websocket\"")
        );
        assert_eq!(why(json!([1])), format!("{head}expected an object"));
        let mut no_generation = answer(url, good.clone());
        no_generation.as_object_mut().unwrap().remove("generation");
        assert_eq!(why(no_generation), format!("{head}generation is missing"));
        let mut long = answer(url, good.clone());
        long["websocketUrl"] = json!(format!("ws://127.0.0.1:1/{}", "a".repeat(MAX_URL)));
        assert_eq!(why(long), format!("{head}websocketUrl is longer than 2048 bytes"));
        assert_eq!(
            why(answer(url, json!([]))),
            format!("{head}secretHeaders must hold 1 to 8 headers, not 0")
        );
        let many: Vec<Value> = (0..9)
            .map(|i| json!({"name": format!("x-{i}"), "value": SECRET}))
            .collect();
        assert_eq!(
            why(answer(url, Value::Array(many))),
            format!("{head}secretHeaders must hold 1 to 8 headers, not 9")
        );
        let cases = [
            (
                json!([{"name": "bad name", "value": SECRET}]),
                "secretHeaders[0].name \"bad name\" is not an HTTP header name",
            ),
            (
                json!([{"name": "Host", "value": SECRET}]),
                "secretHeaders[0].name \"Host\" is a header the client sets itself",
            ),
            (
                json!([{"name": "x-a", "value": SECRET}, {"name": "X-A", "value": SECRET}]),
                "secretHeaders[1].name \"X-A\" is named twice",
            ),
            (
                json!([{"name": "x".repeat(65), "value": SECRET}]),
                "secretHeaders[0].name must be a string of at most 64 bytes",
            ),
            (
                json!([{"name": "x-a", "value": format!("{SECRET}\r\nx-evil: 1")}]),
                "secretHeaders[0].value must be 1 to 1024 printable ASCII characters, no space at either end",
            ),
            (
                json!([{"name": "x-a", "value": SECRET.repeat(100)}]),
                "secretHeaders[0].value must be 1 to 1024 printable ASCII characters, no space at either end",
            ),
            (
                json!([{"name": "x-a", "value": format!(" {SECRET}")}]),
                "secretHeaders[0].value must be 1 to 1024 printable ASCII characters, no space at either end",
            ),
            (
                json!([{"name": "x-a", "value": ""}]),
                "secretHeaders[0].value must be 1 to 1024 printable ASCII characters, no space at either end",
            ),
            (
                json!([{"name": "x-a", "value": 7}]),
                "secretHeaders[0].value is not a string",
            ),
        ];
        for (headers, text) in cases {
            let got = why(answer(url, headers));
            assert_eq!(got, format!("{head}{text}"));
            assert!(!got.contains(SECRET), "{got}");
        }
    }
}
