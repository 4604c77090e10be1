//! `activity.log`, `metrics.write`, `telemetry.track`, `log` (request or notification)
//! and `span.record`: recorded as `tracing` events (target `envrt::plugin`) with the
//! plugin's key as a field, every text passed through the secret redaction first.

use serde_json::Value;

use super::{WorkerCalls, invalid};
use crate::protocol::ErrorObject;

/// The `tracing` target of everything a worker records.
pub(crate) const TARGET: &str = "envrt::plugin";

fn string<'a>(method: &str, params: &'a Value, field: &str) -> Result<&'a str, ErrorObject> {
    params
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(method, &format!("{field} must be a string")))
}

fn json(params: &Value, field: &str) -> String {
    params
        .get(field)
        .filter(|v| !v.is_null())
        .map(Value::to_string)
        .unwrap_or_default()
}

pub(super) fn record(
    calls: &WorkerCalls,
    method: &str,
    params: &Value,
    parent: Option<&str>,
) -> Result<Value, ErrorObject> {
    let plugin = calls.plugin_id.as_str();
    match method {
        "activity.log" => {
            let message = calls.redact(string(method, params, "message")?);
            let company = params.get("companyId").and_then(Value::as_str).unwrap_or_default();
            let entity = params.get("entityId").and_then(Value::as_str).unwrap_or_default();
            let metadata = calls.redact(&json(params, "metadata"));
            tracing::info!(target: TARGET, plugin, method, company, entity, metadata, "plugin activity: {message}");
        }
        "metrics.write" => {
            let name = calls.redact(string(method, params, "name")?);
            let value = params
                .get("value")
                .and_then(Value::as_f64)
                .ok_or_else(|| invalid(method, "value must be a number"))?;
            let tags = calls.redact(&json(params, "tags"));
            tracing::info!(target: TARGET, plugin, method, metric = %name, value, tags, "plugin metric");
        }
        "telemetry.track" => {
            let event = calls.redact(string(method, params, "eventName")?);
            let dimensions = calls.redact(&json(params, "dimensions"));
            tracing::info!(target: TARGET, plugin, method, event = %event, dimensions, "plugin telemetry");
        }
        "log" => log(calls, params)?,
        _ => {
            let name = calls.redact(string(method, params, "name")?);
            let attributes = calls.redact(&json(params, "attributes"));
            let status = calls.redact(&json(params, "status"));
            let start = params.get("startTimeMs").and_then(Value::as_f64).unwrap_or_default();
            let end = params.get("endTimeMs").and_then(Value::as_f64).unwrap_or_default();
            // Parented as Paperclip's host does: under the span of the host request the
            // worker made it in (the trace and span ids of the traceparent the host minted
            // for it), with a span id of its own; none when the echoed invocation is not
            // one in flight (a worker cannot pick its parent).
            let (trace_id, parent_span_id) = parent.and_then(split_traceparent).unwrap_or_default();
            let span_id = if trace_id.is_empty() {
                String::new()
            } else {
                uuid::Uuid::new_v4().simple().to_string()[..16].to_owned()
            };
            tracing::info!(
                target: TARGET,
                plugin,
                method,
                span = %name,
                attributes,
                status,
                start,
                end,
                trace_id = %trace_id,
                parent_span_id = %parent_span_id,
                span_id = %span_id,
                "plugin span"
            );
        }
    }
    Ok(Value::Null)
}

/// A `log` record (the SDK's logger sends it as a notification).
pub(super) fn log(calls: &WorkerCalls, params: &Value) -> Result<(), ErrorObject> {
    let plugin = calls.plugin_id.as_str();
    let message = calls.redact(string("log", params, "message")?);
    let meta = calls.redact(&json(params, "meta"));
    match params.get("level").and_then(Value::as_str).unwrap_or("info") {
        "error" => tracing::error!(target: TARGET, plugin, meta, "worker log: {message}"),
        "warn" => tracing::warn!(target: TARGET, plugin, meta, "worker log: {message}"),
        "debug" => tracing::debug!(target: TARGET, plugin, meta, "worker log: {message}"),
        "info" => tracing::info!(target: TARGET, plugin, meta, "worker log: {message}"),
        _ => return Err(invalid("log", "level must be one of info, warn, error, debug")),
    }
    Ok(())
}

/// The trace id and span id of a W3C `traceparent` (`00-{32 hex}-{16 hex}-{2 hex}`).
fn split_traceparent(traceparent: &str) -> Option<(&str, &str)> {
    let mut parts = traceparent.split('-');
    let (_version, trace, span, _flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    (trace.len() == 32 && span.len() == 16 && parts.next().is_none()).then_some((trace, span))
}
