//! `secrets.resolve`: a secret reference resolved from a source the host's configuration
//! names — `env:NAME` (the host's environment) or `file:/absolute/path` — and only when
//! the reference is on the plugin's list. The value is held as a
//! [`Secret`](envrt_driver_api::Secret): it goes to the worker in the answer and
//! nowhere else; errors name the reference, never a value; the host remembers resolved
//! values only to redact them from what the worker logs and from error texts.

use std::io::Read as _;

use envrt_driver_api::Secret;
use serde_json::Value;

use super::{WorkerCalls, invalid, refuse};
use crate::protocol::{ErrorObject, codes};

/// The largest secret file read (64 KiB).
const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

const METHOD: &str = "secrets.resolve";

pub(super) async fn resolve(calls: &WorkerCalls, params: &Value) -> Result<Value, ErrorObject> {
    let reference = match params.get("secretRef") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::Object(_)) => {
            return Err(invalid(
                METHOD,
                "secret bindings are not supported by this host; pass a reference string (env:NAME or file:/path)",
            ));
        }
        _ => return Err(invalid(METHOD, "secretRef must be a non-empty string")),
    };
    if !calls.options.secrets.contains(&reference) {
        return Err(refuse(
            codes::CAPABILITY_DENIED,
            format!(
                "secret reference \"{reference}\" is not configured for plugin '{}'",
                calls.plugin_id
            ),
        ));
    }
    let secret = tokio::task::spawn_blocking(move || read(&reference))
        .await
        .map_err(|_| refuse(codes::INTERNAL_ERROR, "secret resolution did not finish"))??;
    let value = Value::String(secret.expose().to_owned());
    calls.remember(secret);
    Ok(value)
}

fn read(reference: &str) -> Result<Secret, ErrorObject> {
    let failed = |why: String| refuse(codes::INTERNAL_ERROR, format!("secret reference \"{reference}\" {why}"));
    if let Some(name) = reference.strip_prefix("env:") {
        return match std::env::var(name) {
            Ok(value) if !value.is_empty() => Ok(Secret::new(value)),
            Ok(_) => Err(failed("names an empty environment variable".into())),
            Err(std::env::VarError::NotPresent) => Err(failed("names an unset environment variable".into())),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(failed("names an environment variable that is not UTF-8".into()))
            }
        };
    }
    if let Some(path) = reference.strip_prefix("file:") {
        if !path.starts_with('/') {
            return Err(failed("must name an absolute path".into()));
        }
        let file = std::fs::File::open(path).map_err(|e| failed(format!("cannot be read: {}", e.kind())))?;
        let mut bytes = Vec::new();
        file.take(MAX_SECRET_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| failed(format!("cannot be read: {}", e.kind())))?;
        if bytes.len() as u64 > MAX_SECRET_FILE_BYTES {
            return Err(failed(format!("is over {MAX_SECRET_FILE_BYTES} bytes")));
        }
        let mut text = String::from_utf8(bytes).map_err(|_| failed("is not UTF-8".into()))?;
        if text.ends_with('\n') {
            text.pop();
            if text.ends_with('\r') {
                text.pop();
            }
        }
        if text.is_empty() {
            return Err(failed("names an empty file".into()));
        }
        return Ok(Secret::new(text));
    }
    Err(failed(
        "has an unknown source (the host resolves env:NAME and file:/path)".into(),
    ))
}
