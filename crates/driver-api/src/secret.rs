//! A string whose `Debug` and `Display` never show the value.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A secret value (a token, a password). `Debug` prints `Secret(***)`, `Display` prints
/// `***`; only [`Secret::expose`] gives the value. Serialization writes the value, so a
/// secret can still be sent to a worker that needs it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value. Do not log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// An environment variable's value for a command: plain or secret.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EnvValue {
    /// Shown in `Debug`.
    Plain(String),
    /// Never shown.
    Secret(Secret),
}

impl EnvValue {
    /// The value, for handing to the command.
    pub fn expose(&self) -> &str {
        match self {
            EnvValue::Plain(s) => s,
            EnvValue::Secret(s) => s.expose(),
        }
    }

    /// Whether the value is secret.
    pub fn is_secret(&self) -> bool {
        matches!(self, EnvValue::Secret(_))
    }
}

impl fmt::Debug for EnvValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvValue::Plain(s) => fmt::Debug::fmt(s, f),
            EnvValue::Secret(s) => fmt::Debug::fmt(s, f),
        }
    }
}

impl From<&str> for EnvValue {
    fn from(s: &str) -> Self {
        EnvValue::Plain(s.to_owned())
    }
}

impl From<String> for EnvValue {
    fn from(s: String) -> Self {
        EnvValue::Plain(s)
    }
}

impl From<Secret> for EnvValue {
    fn from(s: Secret) -> Self {
        EnvValue::Secret(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_never_shows_in_debug_or_display() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "Secret(***)");
        assert_eq!(format!("{s}"), "***");
        let v = EnvValue::from(s.clone());
        assert_eq!(format!("{v:?}"), "Secret(***)");
        assert_eq!(v.expose(), "hunter2");
        let env = std::collections::BTreeMap::from([("TOKEN".to_string(), v)]);
        assert!(!format!("{env:?}").contains("hunter2"));
        assert_eq!(format!("{:?}", EnvValue::from("plain")), "\"plain\"");
    }
}
