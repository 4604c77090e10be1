//! `[[environment.network.credential]]`: a secret bound to one host and one request header,
//! which the egress proxy puts on the lease's requests to that host on their way out. The
//! lease holds a placeholder at most; the secret itself is read on the host (an environment
//! variable or a file of the process that starts the proxy), handed to the proxy process
//! over its stdin, and never written where the lease, the store or a log could read it.
//!
//! ```toml
//! [[environment.network.credential]]
//! host = "api.github.com"            # one name, optionally ":port" (443 when absent)
//! header = "Authorization"
//! value = "Bearer {secret}"          # "{secret}" exactly once
//! secret = "env:GITHUB_TOKEN"        # or "file:/absolute/path"
//! placeholder_env = "GITHUB_TOKEN"   # optional: the lease gets GITHUB_TOKEN=envrt-credential-placeholder
//! ```
//!
//! This module is the configuration and the resolved form ([`Brokered`]); the interception
//! itself is the proxy's (`broker`, feature `proxy`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::entry::{Host, parse_list};

/// The value a lease's `placeholder_env` variable holds instead of the secret.
pub const PLACEHOLDER: &str = "envrt-credential-placeholder";
/// The largest secret read from a file or an environment variable.
pub const MAX_SECRET_BYTES: usize = 64 * 1024;
/// Credentials one environment may declare.
pub const MAX_CREDENTIALS: usize = 64;

/// The TOML shape of one `[[environment.network.credential]]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCredential {
    /// The host (and optional port) whose requests get the header.
    pub host: String,
    /// The header's name.
    pub header: String,
    /// The header's value, `{secret}` standing for the secret.
    pub value: String,
    /// Where the secret is read: `env:NAME` or `file:/absolute/path`.
    pub secret: String,
    /// A variable the lease gets, set to [`PLACEHOLDER`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placeholder_env: Option<String>,
}

/// Where a secret is read, on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretRef {
    /// An environment variable of the process that starts the proxy.
    Env(String),
    /// A file (absolute path); one trailing newline is dropped.
    File(PathBuf),
}

impl std::fmt::Display for SecretRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretRef::Env(name) => write!(f, "env:{name}"),
            SecretRef::File(path) => write!(f, "file:{}", path.display()),
        }
    }
}

/// One checked credential (no secret in it: only where the secret is read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    /// The host name (lower-cased).
    pub host: String,
    /// The port (443 when the entry names none).
    pub port: u16,
    /// The header name (lower-cased).
    pub header: String,
    /// The value before `{secret}`.
    pub prefix: String,
    /// The value after `{secret}`.
    pub suffix: String,
    /// Where the secret is read.
    pub secret: SecretRef,
    /// The lease's placeholder variable.
    pub placeholder_env: Option<String>,
}

/// A credential that does not parse or cannot be resolved; each text is pinned by a test.
/// No text ever contains a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// More than [`MAX_CREDENTIALS`].
    #[error("credential: at most {MAX_CREDENTIALS} credentials, not {0}")]
    TooMany(usize),
    /// `host` is not one name (with an optional port).
    #[error(
        "credential {index}: host \"{host}\" must be one host name with an optional port (a wildcard or an address cannot carry a credential)"
    )]
    Host {
        /// Its position, from 0.
        index: usize,
        /// What was written.
        host: String,
    },
    /// `header` is not an HTTP field name.
    #[error("credential {index}: header \"{header}\" is not an HTTP header name")]
    HeaderName {
        /// Its position, from 0.
        index: usize,
        /// What was written.
        header: String,
    },
    /// `header` is one the proxy itself owns.
    #[error("credential {index}: header \"{header}\" cannot carry a credential (the proxy sets it)")]
    HeaderReserved {
        /// Its position, from 0.
        index: usize,
        /// What was written.
        header: String,
    },
    /// Two credentials for one host and header.
    #[error("credential {index}: host \"{host}\" already has a \"{header}\" credential (credential {first})")]
    Duplicate {
        /// Its position, from 0.
        index: usize,
        /// The earlier one.
        first: usize,
        /// The host.
        host: String,
        /// The header.
        header: String,
    },
    /// `value` lacks `{secret}`, has it twice, or has a character a header cannot carry.
    #[error(
        "credential {index}: value must contain \"{{secret}}\" exactly once, and otherwise only visible ASCII and spaces"
    )]
    Value {
        /// Its position, from 0.
        index: usize,
    },
    /// `secret` is neither form.
    #[error("credential {index}: secret \"{secret}\" must be \"env:NAME\" or \"file:/absolute/path\"")]
    SecretRef {
        /// Its position, from 0.
        index: usize,
        /// What was written (a reference, never a secret).
        secret: String,
    },
    /// `placeholder_env` is not a variable name.
    #[error("credential {index}: placeholder_env \"{name}\" is not an environment variable name")]
    Placeholder {
        /// Its position, from 0.
        index: usize,
        /// What was written.
        name: String,
    },
    /// The secret cannot be read.
    #[error("credential {index}: the secret {secret} cannot be read: {why}")]
    Unreadable {
        /// Its position, from 0.
        index: usize,
        /// Where it was looked for.
        secret: String,
        /// Why (never the secret).
        why: String,
    },
    /// The secret has a character a header value cannot carry (the secret is not shown).
    #[error(
        "credential {index}: the secret {secret} is empty, longer than {MAX_SECRET_BYTES} bytes, or holds a character an HTTP header cannot carry"
    )]
    BadSecret {
        /// Its position, from 0.
        index: usize,
        /// Where it was read.
        secret: String,
    },
}

/// Headers that frame the message: never a credential (nor any hop-by-hop header, which
/// the proxy owns: [`crate::hop::HOP`]).
const RESERVED: &[&str] = &["host", "content-length", "transfer-encoding"];

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn is_visible(s: &str) -> bool {
    s.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
}

fn is_env_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl Credential {
    /// Checks the entry at `index`.
    pub fn parse(index: usize, raw: &RawCredential) -> Result<Credential, CredentialError> {
        let host_error = || CredentialError::Host {
            index,
            host: raw.host.clone(),
        };
        let rule = parse_list("credential", &[raw.host.as_str()])
            .map_err(|_| host_error())?
            .pop()
            .ok_or_else(host_error)?;
        let Host::Name(host) = rule.host else {
            return Err(host_error());
        };
        if !is_token(&raw.header) {
            return Err(CredentialError::HeaderName {
                index,
                header: raw.header.clone(),
            });
        }
        let header = raw.header.to_ascii_lowercase();
        if RESERVED.contains(&header.as_str()) || crate::hop::HOP.contains(&header.as_str()) {
            return Err(CredentialError::HeaderReserved {
                index,
                header: raw.header.clone(),
            });
        }
        let (prefix, suffix) = match raw.value.split_once("{secret}") {
            Some((p, s)) if !s.contains("{secret}") && is_visible(p) && is_visible(s) => (p.to_owned(), s.to_owned()),
            _ => return Err(CredentialError::Value { index }),
        };
        let secret = match raw.secret.split_once(':') {
            Some(("env", name)) if is_env_name(name) => SecretRef::Env(name.to_owned()),
            Some(("file", path)) if path.starts_with('/') => SecretRef::File(PathBuf::from(path)),
            _ => {
                return Err(CredentialError::SecretRef {
                    index,
                    secret: raw.secret.clone(),
                });
            }
        };
        if let Some(name) = &raw.placeholder_env
            && !is_env_name(name)
        {
            return Err(CredentialError::Placeholder {
                index,
                name: name.clone(),
            });
        }
        Ok(Credential {
            host,
            port: rule.port.unwrap_or(443),
            header,
            prefix,
            suffix,
            secret,
            placeholder_env: raw.placeholder_env.clone(),
        })
    }

    /// Checks a whole list: each entry, their number, and one credential per host and header.
    pub fn parse_all(raw: &[RawCredential]) -> Result<Vec<Credential>, CredentialError> {
        if raw.len() > MAX_CREDENTIALS {
            return Err(CredentialError::TooMany(raw.len()));
        }
        let mut out: Vec<Credential> = Vec::with_capacity(raw.len());
        for (index, entry) in raw.iter().enumerate() {
            let c = Credential::parse(index, entry)?;
            if let Some(first) = out
                .iter()
                .position(|o| o.host == c.host && o.port == c.port && o.header == c.header)
            {
                return Err(CredentialError::Duplicate {
                    index,
                    first,
                    host: c.host,
                    header: entry.header.clone(),
                });
            }
            out.push(c);
        }
        Ok(out)
    }

    /// The TOML form back.
    pub fn to_raw(&self) -> RawCredential {
        RawCredential {
            host: if self.port == 443 {
                self.host.clone()
            } else {
                format!("{}:{}", self.host, self.port)
            },
            header: self.header.clone(),
            value: format!("{}{{secret}}{}", self.prefix, self.suffix),
            secret: self.secret.to_string(),
            placeholder_env: self.placeholder_env.clone(),
        }
    }

    /// Reads the secret (`index` names the credential in errors) and gives what the proxy
    /// needs. `env` looks a variable up (the caller's environment in production).
    pub fn resolve(&self, index: usize, env: impl Fn(&str) -> Option<String>) -> Result<Brokered, CredentialError> {
        let secret_ref = self.secret.to_string();
        let unreadable = |why: String| CredentialError::Unreadable {
            index,
            secret: secret_ref.clone(),
            why,
        };
        let secret = match &self.secret {
            SecretRef::Env(name) => env(name).ok_or_else(|| unreadable("the variable is not set".to_owned()))?,
            SecretRef::File(path) => read_secret_file(path).map_err(unreadable)?,
        };
        let secret = secret.strip_suffix('\n').unwrap_or(&secret);
        if secret.is_empty() || secret.len() > MAX_SECRET_BYTES || !is_visible(secret) {
            return Err(CredentialError::BadSecret {
                index,
                secret: secret_ref,
            });
        }
        Ok(Brokered {
            host: self.host.clone(),
            port: self.port,
            header: self.header.clone(),
            value: Secret(format!("{}{secret}{}", self.prefix, self.suffix)),
        })
    }
}

fn read_secret_file(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| e.kind().to_string())?;
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_BYTES as u64 + 2)
        .read_to_end(&mut bytes)
        .map_err(|e| e.kind().to_string())?;
    // Not UTF-8: shown as a bad secret (never the bytes).
    Ok(String::from_utf8(bytes).unwrap_or_else(|_| "\u{7f}".to_owned()))
}

/// A header value holding a secret: its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The value itself (for the one place that writes the header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// A resolved credential, as the proxy gets it (over its stdin, as JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Brokered {
    /// The host name (lower-cased).
    pub host: String,
    /// The port.
    pub port: u16,
    /// The header name (lower-cased).
    pub header: String,
    /// The whole header value.
    pub value: Secret,
}

/// The placeholder variables a lease gets for `credentials`, as (name, [`PLACEHOLDER`]).
pub fn placeholder_env(credentials: &[Credential]) -> Vec<(String, String)> {
    credentials
        .iter()
        .filter_map(|c| c.placeholder_env.clone())
        .map(|name| (name, PLACEHOLDER.to_owned()))
        .collect()
}

#[cfg(test)]
#[path = "credential_tests.rs"]
mod tests;
