//! Execute over the worker: `environmentExecute`, with stdin streamed over the data plane
//! when it is large, output sent to the sink as the worker's `execute.log` notifications
//! arrive, and tail capture.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use base64::Engine as _;
use envrt_driver_api::{DriverError, Execute, ExecuteRequest, ExecuteResult, LeaseContext};
use serde_json::Value;

use super::SandboxDriver;
use crate::host::error::SandboxError;
use crate::host::worker::connection::ExecSink;
use crate::protocol::environment::{ExecuteParams, ExecuteResult as WireExecuteResult};
use crate::protocol::{methods, to_value};

#[async_trait]
impl Execute for SandboxDriver {
    async fn execute(&self, context: &LeaseContext, mut request: ExecuteRequest) -> Result<ExecuteResult, DriverError> {
        let binary = self.advertises(methods::EXECUTE_BINARY);
        let method = if binary {
            methods::EXECUTE_BINARY
        } else {
            methods::EXECUTE
        };
        self.require(method)?;
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut params = ExecuteParams {
            base: self.base(context),
            lease: Self::lease(context),
            command: request.command.clone(),
            args: request.args.clone(),
            cwd: request.cwd.clone(),
            env: request
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.expose().to_owned()))
                .collect(),
            timeout_ms: request.timeout.map(|timeout| timeout.as_millis() as u64),
            ..ExecuteParams::default()
        };
        if let Some(user) = &request.user {
            if !self.advertises(methods::EXECUTE_AS_USER) {
                return Err(DriverError::UserRefused {
                    user: user.clone(),
                    reason: format!("the plugin worker does not advertise \"{}\".", methods::EXECUTE_AS_USER),
                });
            }
            params.envrt_user = Some(user.clone());
        }
        // a text worker has no data plane stdin: its stdin must be UTF-8 in the request
        let stdin = request.stdin.take();
        if let (false, Some(stdin)) = (binary, &stdin)
            && std::str::from_utf8(stdin).is_err()
        {
            return Err(SandboxError::InvalidInput {
                message: "stdin is not valid UTF-8 and the worker does not advertise \"environmentExecuteBinary\""
                    .into(),
            }
            .into());
        }
        let sink: Option<ExecSink> = request.sink.clone().map(|sink| {
            let sink: ExecSink = Arc::new(move |stream, bytes: Vec<u8>| sink.on_chunk(stream, &bytes));
            sink
        });
        let tail = crate::host::driver::tail::TailCapture::for_request(&request);
        let sink = match &tail {
            Some(tail) => Some(tail.sink(sink)),
            None => sink,
        };
        let started = Instant::now();
        let company = Some(context.lease.company_id.as_str());
        // a command runs as long as it runs without a timeout: bound by the worker's life
        let call = crate::host::duplex::exec_stdin::ExecCall {
            method,
            timeout: request.timeout,
            company_id: company.map(str::to_owned),
            sink,
        };
        let encode = |bytes: Vec<u8>| -> Result<String, SandboxError> {
            Ok(if binary {
                b64.encode(bytes)
            } else {
                String::from_utf8(bytes).unwrap_or_default()
            })
        };
        let value = self
            .supervisor
            .call_execute(call, to_value(&params), stdin, encode)
            .await?;
        let duration = started.elapsed();
        let wire: WireExecuteResult = serde_json::from_value(value).map_err(|e| SandboxError::InvalidResult {
            method: method.to_owned(),
            message: e.to_string(),
        })?;
        let decode = |text: String, name: &str| -> Result<Vec<u8>, SandboxError> {
            if binary {
                b64.decode(text.as_bytes()).map_err(|e| SandboxError::InvalidResult {
                    method: method.to_owned(),
                    message: format!("{name} is not base64: {e}"),
                })
            } else {
                Ok(text.into_bytes())
            }
        };
        let metadata = wire.metadata.unwrap_or_default();
        let flagged = |key: &str| metadata.get(key).and_then(Value::as_bool) == Some(true);
        let mut stdout = request.output_buffer();
        stdout.push(&decode(wire.stdout, "stdout")?);
        let mut stderr = request.output_buffer();
        stderr.push(&decode(wire.stderr, "stderr")?);
        // What the worker itself cut counts too (not for a tail, taken from every chunk).
        let (mut stdout_cut, mut stderr_cut) = (flagged("stdoutTruncated"), flagged("stderrTruncated"));
        if let Some(tail) = tail {
            (stdout, stderr) = tail.into_buffers();
            (stdout_cut, stderr_cut) = (false, false);
        }
        let ending = envrt_driver_api::execute::Ending {
            exit_code: wire.exit_code,
            signal: wire.signal,
            timed_out: wire.timed_out,
        };
        let mut result = ExecuteResult::from_capped(ending, stdout, stderr, duration, metadata);
        result.stdout_truncated |= stdout_cut;
        result.stderr_truncated |= stderr_cut;
        Ok(result)
    }
}
