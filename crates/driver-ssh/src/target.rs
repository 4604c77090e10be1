//! Which host an environment's leases live on: the driver's defaults, overridden by the
//! environment's configuration (`host`, `port`, `user`, `key`, `knownHosts` or
//! `known_hosts`, `acceptNewHostKey` or `accept_new_host_key`, `connectRetrySeconds` or
//! `connect_retry_seconds`).

use std::path::PathBuf;
use std::time::Duration;

use envrt_driver_api::{DriverError, JsonMap};

/// An SSH destination and how to trust and log in to it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SshTarget {
    /// Host name or address.
    pub host: String,
    /// Port; OpenSSH's default (22, or the user's ssh config) when `None`.
    pub port: Option<u16>,
    /// Login user; OpenSSH's default when `None`.
    pub user: Option<String>,
    /// Private key file; the agent (`SSH_AUTH_SOCK`) and OpenSSH's defaults when `None`.
    pub key: Option<PathBuf>,
    /// Known-hosts file the host key is checked against; OpenSSH's default
    /// (`~/.ssh/known_hosts`) when `None`.
    pub known_hosts: Option<PathBuf>,
    /// Accept (and record) the key of a host the known-hosts file does not list yet. A key
    /// that differs from a recorded one is refused regardless. Default false: unknown keys
    /// are refused.
    pub accept_new_host_key: bool,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// How long a connection that fails for a reason that may pass (refused, timed out,
    /// unreachable, reset: a host restarting, a network flap) is tried again, with growing
    /// pauses, before the failure is reported; default 5 s, `0` tries once. A host key or
    /// login refusal is never retried.
    pub connect_retry: Duration,
}

impl SshTarget {
    /// A target for `host` with every other setting at its default.
    pub fn new(host: impl Into<String>) -> SshTarget {
        SshTarget {
            host: host.into(),
            port: None,
            user: None,
            key: None,
            known_hosts: None,
            accept_new_host_key: false,
            connect_timeout: Duration::from_secs(10),
            connect_retry: Duration::from_secs(5),
        }
    }

    /// `user@host:port` as far as known, for messages.
    pub fn shown(&self) -> String {
        let mut out = String::new();
        if let Some(user) = &self.user {
            out.push_str(user);
            out.push('@');
        }
        out.push_str(&self.host);
        if let Some(port) = self.port {
            out.push_str(&format!(":{port}"));
        }
        out
    }

    /// `defaults` overridden by an environment's configuration.
    pub fn from_config(config: &JsonMap, defaults: Option<&SshTarget>) -> Result<SshTarget, DriverError> {
        let text = |key: &str| -> Result<Option<String>, DriverError> {
            match config.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
                Some(_) => Err(DriverError::invalid(format!(
                    "the ssh environment's \"{key}\" must be a non-empty string"
                ))),
            }
        };
        let host = match (text("host")?, defaults) {
            (Some(host), _) => host,
            (None, Some(d)) => d.host.clone(),
            (None, None) => {
                return Err(DriverError::invalid("the ssh environment names no \"host\""));
            }
        };
        if host.starts_with('-') || host.contains(char::is_whitespace) {
            return Err(DriverError::invalid(format!("the ssh host {host:?} is not valid")));
        }
        let mut target = match defaults {
            Some(d) => SshTarget { host, ..d.clone() },
            None => SshTarget::new(host),
        };
        match config.get("port") {
            None | Some(serde_json::Value::Null) => {}
            Some(value) => {
                target.port = Some(
                    value
                        .as_u64()
                        .and_then(|p| u16::try_from(p).ok())
                        .filter(|p| *p > 0)
                        .ok_or_else(|| DriverError::invalid("the ssh environment's \"port\" must be 1..65535"))?,
                );
            }
        }
        if let Some(user) = text("user")? {
            if user.starts_with('-') {
                return Err(DriverError::invalid(format!("the ssh user {user:?} is not valid")));
            }
            target.user = Some(user);
        }
        if let Some(key) = text("key")? {
            target.key = Some(PathBuf::from(key));
        }
        // envrt.toml spells keys in snake case; JSON configurations in camel case.
        if let Some(file) = text("knownHosts")?.or(text("known_hosts")?) {
            target.known_hosts = Some(PathBuf::from(file));
        }
        match config.get("acceptNewHostKey").or(config.get("accept_new_host_key")) {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::Bool(b)) => target.accept_new_host_key = *b,
            Some(_) => {
                return Err(DriverError::invalid(
                    "the ssh environment's \"acceptNewHostKey\" must be true or false",
                ));
            }
        }
        match config
            .get("connectRetrySeconds")
            .or(config.get("connect_retry_seconds"))
        {
            None | Some(serde_json::Value::Null) => {}
            Some(value) => {
                let seconds = value.as_u64().filter(|s| *s <= MAX_CONNECT_RETRY_SECONDS).ok_or_else(|| {
                    DriverError::invalid(format!(
                        "the ssh environment's \"connectRetrySeconds\" must be a whole number of seconds from 0 to {MAX_CONNECT_RETRY_SECONDS}"
                    ))
                })?;
                target.connect_retry = Duration::from_secs(seconds);
            }
        }
        Ok(target)
    }

    /// The target as lease metadata (so release works after the environment is gone).
    pub(crate) fn to_metadata(&self) -> JsonMap {
        let mut map = JsonMap::new();
        map.insert("host".into(), self.host.clone().into());
        if let Some(port) = self.port {
            map.insert("port".into(), port.into());
        }
        if let Some(user) = &self.user {
            map.insert("user".into(), user.clone().into());
        }
        if let Some(key) = &self.key {
            map.insert("key".into(), key.to_string_lossy().into_owned().into());
        }
        if let Some(file) = &self.known_hosts {
            map.insert("knownHosts".into(), file.to_string_lossy().into_owned().into());
        }
        map
    }
}

/// The longest `connectRetrySeconds` an environment may set.
pub const MAX_CONNECT_RETRY_SECONDS: u64 = 300;

/// Every key an ssh environment's config may hold (envrt.toml's snake case spellings of
/// the two-word keys included).
pub(crate) const KNOWN_CONFIG_KEYS: [&str; 10] = [
    "host",
    "port",
    "user",
    "key",
    "knownHosts",
    "known_hosts",
    "acceptNewHostKey",
    "accept_new_host_key",
    "connectRetrySeconds",
    "connect_retry_seconds",
];

/// Refuses an ssh environment config key the driver does not know.
pub(crate) fn check_config(config: &JsonMap) -> Result<(), DriverError> {
    envrt_driver_api::config_keys::check_known_keys("ssh environment config", config, &KNOWN_CONFIG_KEYS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: serde_json::Value) -> JsonMap {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn environment_config_overrides_defaults() {
        let mut defaults = SshTarget::new("a.example");
        defaults.user = Some("u".into());
        let t = SshTarget::from_config(&map(json!({"port": 2222, "knownHosts": "/k"})), Some(&defaults)).unwrap();
        assert_eq!(t.shown(), "u@a.example:2222");
        assert_eq!(t.known_hosts.as_deref(), Some(std::path::Path::new("/k")));
        let back = SshTarget::from_config(&t.to_metadata(), None).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn bad_configs_are_refused_with_their_text() {
        let err = |v| SshTarget::from_config(&map(v), None).unwrap_err().to_string();
        assert_eq!(err(json!({})), "Invalid input: the ssh environment names no \"host\"");
        assert_eq!(
            err(json!({"host": "h", "port": 70000})),
            "Invalid input: the ssh environment's \"port\" must be 1..65535"
        );
        assert_eq!(
            err(json!({"host": "-oProxyCommand=x"})),
            "Invalid input: the ssh host \"-oProxyCommand=x\" is not valid"
        );
        assert_eq!(
            err(json!({"host": "h", "user": 3})),
            "Invalid input: the ssh environment's \"user\" must be a non-empty string"
        );
        for bad in [json!(301), json!(-1), json!(1.5), json!("5")] {
            assert_eq!(
                err(json!({"host": "h", "connectRetrySeconds": bad})),
                "Invalid input: the ssh environment's \"connectRetrySeconds\" must be a whole number of seconds from 0 to 300"
            );
        }
    }

    #[test]
    fn the_connect_retry_defaults_to_five_seconds_and_either_spelling_sets_it() {
        let t = |v| SshTarget::from_config(&map(v), None).unwrap().connect_retry;
        assert_eq!(t(json!({"host": "h"})), Duration::from_secs(5));
        assert_eq!(t(json!({"host": "h", "connectRetrySeconds": 0})), Duration::ZERO);
        assert_eq!(
            t(json!({"host": "h", "connect_retry_seconds": 300})),
            Duration::from_secs(300)
        );
    }
}
