//! `state.get` / `state.set` / `state.delete`: the SDK's scoped key/value state, kept in
//! the host's [`PluginStateStore`](envrt_driver_api::PluginStateStore), keyed as the
//! SDK's harness keys it (a missing `scopeId` is `""`, a missing `namespace` `default`).

use envrt_driver_api::StateKey;
use serde_json::Value;

use super::{WorkerCalls, invalid, refuse};
use crate::protocol::{ErrorObject, codes};

fn text<'a>(method: &str, params: &'a Value, field: &str, required: bool) -> Result<Option<&'a str>, ErrorObject> {
    match params.get(field) {
        None | Some(Value::Null) if !required => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s)),
        Some(Value::String(_)) if !required => Ok(Some("")),
        _ => Err(invalid(method, &format!("{field} must be a non-empty string"))),
    }
}

fn key(calls: &WorkerCalls, method: &str, params: &Value) -> Result<StateKey, ErrorObject> {
    Ok(StateKey {
        plugin: calls.plugin_id.clone(),
        scope_kind: text(method, params, "scopeKind", true)?.unwrap_or_default().to_owned(),
        scope_id: text(method, params, "scopeId", false)?.unwrap_or_default().to_owned(),
        namespace: text(method, params, "namespace", false)?
            .unwrap_or("default")
            .to_owned(),
        state_key: text(method, params, "stateKey", true)?.unwrap_or_default().to_owned(),
    })
}

fn store_failed(method: &str, error: envrt_driver_api::StoreError) -> ErrorObject {
    refuse(codes::INTERNAL_ERROR, format!("\"{method}\" failed: {}", error.message))
}

pub(super) async fn answer(calls: &WorkerCalls, method: &str, params: &Value) -> Result<Value, ErrorObject> {
    let key = key(calls, method, params)?;
    let store = &calls.options.state;
    match method {
        "state.get" => match store.get_state(&key).await.map_err(|e| store_failed(method, e))? {
            None => Ok(Value::Null),
            Some(text) => serde_json::from_str(&text).map_err(|e| {
                refuse(
                    codes::INTERNAL_ERROR,
                    format!("\"{method}\": the stored value is corrupt: {e}"),
                )
            }),
        },
        "state.set" => {
            let value = params.get("value").cloned().unwrap_or(Value::Null);
            let text = value.to_string();
            let limits = &calls.options.limits;
            let _one_writer = calls.state_writes.lock().await;
            if text.len() > limits.max_state_value_bytes {
                return Err(invalid(
                    method,
                    &format!(
                        "the value is {} bytes as JSON, over the limit of {} bytes",
                        text.len(),
                        limits.max_state_value_bytes
                    ),
                ));
            }
            let exists = store
                .get_state(&key)
                .await
                .map_err(|e| store_failed(method, e))?
                .is_some();
            if !exists {
                let count = store
                    .count_state(&key.plugin)
                    .await
                    .map_err(|e| store_failed(method, e))?;
                if count >= limits.max_state_keys {
                    return Err(invalid(
                        method,
                        &format!("plugin '{}' already holds {count} state keys, the limit", key.plugin),
                    ));
                }
            }
            store
                .set_state(&key, &text)
                .await
                .map_err(|e| store_failed(method, e))?;
            Ok(Value::Null)
        }
        _ => {
            store.delete_state(&key).await.map_err(|e| store_failed(method, e))?;
            Ok(Value::Null)
        }
    }
}
