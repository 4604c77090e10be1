//! The one check every driver applies to an environment's `config` object: a key the
//! driver does not know is refused, naming the key and the known ones in the shape
//! `envrt.toml`'s own strict keys use (`unknown field `{key}`, expected one of `{a}`, `{b}``),
//! so a misspelled setting (`pidLimit`, `readonlyRootFs`) never silently falls back to
//! a default.

use crate::error::DriverError;
use crate::model::JsonMap;

/// Refuses the first key of `config` that is not in `known`, with
/// `Invalid input: {what}: ` and [`unknown_key`]'s text.
pub fn check_known_keys(what: &str, config: &JsonMap, known: &[&str]) -> Result<(), DriverError> {
    match unknown_key(config, known) {
        None => Ok(()),
        Some(message) => Err(DriverError::invalid(format!("{what}: {message}"))),
    }
}

/// The first key of `config` not in `known`, as `unknown field `{key}`, expected one of
/// `{a}`, `{b}`` (`expected `{a}`` with one known key, `there are no fields` with none).
pub fn unknown_key(config: &JsonMap, known: &[&str]) -> Option<String> {
    let unknown = config.keys().find(|key| !known.contains(&key.as_str()))?;
    let listed = known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
    let expected = match known.len() {
        0 => "there are no fields".to_owned(),
        1 => format!("expected {listed}"),
        _ => format!("expected one of {listed}"),
    };
    Some(format!("unknown field `{unknown}`, {expected}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(value: serde_json::Value) -> JsonMap {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn unknown_keys_are_named_with_the_known_ones() {
        assert!(check_known_keys("x config", &map(serde_json::json!({"a": 1})), &["a", "b"]).is_ok());
        let refused = |config, known: &[&str]| {
            check_known_keys("x config", &map(config), known)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refused(serde_json::json!({"a": 1, "c": 2}), &["a", "b"]),
            "Invalid input: x config: unknown field `c`, expected one of `a`, `b`"
        );
        assert_eq!(
            refused(serde_json::json!({"c": 2}), &["a"]),
            "Invalid input: x config: unknown field `c`, expected `a`"
        );
        assert_eq!(
            refused(serde_json::json!({"c": 2}), &[]),
            "Invalid input: x config: unknown field `c`, there are no fields"
        );
    }
}
