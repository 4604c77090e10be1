//! Bearer tokens: how one is made, what it may do, and how a request's token is checked.
//!
//! A token reads `envrt_<id>_<secret>`: `id` is 16 hex digits (public: `envrt token list`
//! shows it, the audit log names it), `secret` is 64 hex digits of 256 random bits. The
//! store keeps the id, the tenant, the allowed operations and the SHA-256 of the secret,
//! never the secret; a presented secret is hashed and compared with the stored hash in
//! constant time. Every failure to authenticate answers the same 401 body whatever the
//! cause (absent, malformed, unknown, revoked, wrong secret), so the answer tells nothing
//! about which tokens exist.

use std::fmt;

use envrt::sqlite::{SqliteStore, TokenRecord};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// Every operation a token can be allowed, as `--ops` names them.
pub const OPERATIONS: &[&str] = &[
    "environments:read",
    "leases:read",
    "leases:write",
    "leases:pause",
    "leases:fork",
    "leases:idle",
    "execute",
    "sync",
    "duplex",
    "templates:read",
    "templates:write",
    "processes:read",
    "processes:write",
    "network",
];

/// The prefix of every token.
const PREFIX: &str = "envrt_";

/// Who a request acts for: the token's id, tenant and operations.
#[derive(Clone, Debug)]
pub struct Principal {
    /// The token's public id (for the audit log).
    pub token_id: String,
    /// The tenant every lease and template of the request belongs to.
    pub tenant: String,
    /// The operations the token allows.
    pub ops: Vec<String>,
}

impl Principal {
    /// Refuses an operation the token does not allow:
    /// `Token "{id}" does not allow the operation "{op}".` (403 `forbidden`).
    pub fn require(&self, op: &'static str) -> Result<(), ApiError> {
        if self.ops.iter().any(|o| o == op) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "Token \"{}\" does not allow the operation \"{op}\".",
                self.token_id
            )))
        }
    }
}

/// A newly made token: its record (to store) and the whole token (shown once).
pub struct NewToken {
    /// What the store keeps.
    pub record: TokenRecord,
    /// The token to give to the client.
    pub token: String,
}

impl fmt::Debug for NewToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewToken")
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

fn sha256_hex(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

fn random_hex(bytes: usize) -> Result<String, String> {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer).map_err(|e| format!("envrt: no randomness for a token: {e}"))?;
    Ok(hex::encode(buffer))
}

/// Checks `--ops`: each must be one of [`OPERATIONS`]. An empty list allows every one.
pub fn parse_ops(ops: &[String]) -> Result<Vec<String>, String> {
    if ops.is_empty() {
        return Ok(OPERATIONS.iter().map(|o| (*o).to_owned()).collect());
    }
    let mut out = Vec::new();
    for op in ops
        .iter()
        .flat_map(|o| o.split(','))
        .map(str::trim)
        .filter(|o| !o.is_empty())
    {
        if !OPERATIONS.contains(&op) {
            return Err(format!(
                "envrt: unknown operation \"{op}\" (one of: {})",
                OPERATIONS.join(", ")
            ));
        }
        if !out.iter().any(|o| o == op) {
            out.push(op.to_owned());
        }
    }
    Ok(out)
}

/// Checks a tenant name: 1 to 128 characters of letters, digits, `-`, `_` and `.`.
pub fn check_tenant(tenant: &str) -> Result<(), String> {
    let ok = !tenant.is_empty()
        && tenant.len() <= 128
        && tenant
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "envrt: tenant \"{tenant}\" must be 1 to 128 letters, digits, '-', '_' or '.'"
        ))
    }
}

/// Makes a token for `tenant` allowing `ops` (already checked by [`parse_ops`]).
pub fn new_token(tenant: &str, ops: Vec<String>, now_ms: i64) -> Result<NewToken, String> {
    check_tenant(tenant)?;
    let id = random_hex(8)?;
    let secret = random_hex(32)?;
    Ok(NewToken {
        token: format!("{PREFIX}{id}_{secret}"),
        record: TokenRecord {
            id,
            tenant: tenant.to_owned(),
            ops,
            hash: sha256_hex(&secret),
            created_at: now_ms,
            revoked_at: None,
        },
    })
}

/// Splits `envrt_<16 hex>_<64 hex>` into id and secret.
fn split(token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix(PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    (hex(id, 16) && hex(secret, 64)).then_some((id, secret))
}

/// The principal of an `Authorization` header value, or the one 401 refusal.
pub async fn authenticate(store: &SqliteStore, header: Option<&str>) -> Result<Principal, ApiError> {
    let token = header
        .and_then(|h| h.strip_prefix("Bearer "))
        .ok_or_else(ApiError::unauthenticated)?;
    let (id, secret) = split(token.trim()).ok_or_else(ApiError::unauthenticated)?;
    let record = store
        .token(id)
        .await
        .map_err(|e| ApiError::internal(format!("the token store failed: {e}")))?;
    let Some(record) = record else {
        // Hash anyway, so an unknown id costs what a known one does.
        let _ = sha256_hex(secret).as_bytes().ct_eq(&[0u8; 64]);
        return Err(ApiError::unauthenticated());
    };
    let matches: bool = sha256_hex(secret).as_bytes().ct_eq(record.hash.as_bytes()).into();
    if !matches || record.revoked_at.is_some() {
        return Err(ApiError::unauthenticated());
    }
    Ok(Principal {
        token_id: record.id,
        tenant: record.tenant,
        ops: record.ops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_splits_into_its_id_and_secret_and_nothing_else_does() {
        let made = new_token("acme", vec!["execute".into()], 1).unwrap();
        let (id, secret) = split(&made.token).unwrap();
        assert_eq!(id, made.record.id);
        assert_eq!(sha256_hex(secret), made.record.hash);
        assert!(!made.record.hash.contains(secret));
        for bad in [
            "",
            "envrt_",
            "envrt_abc_def",
            "Envrt_0123456789abcdef_00",
            &made.token.to_uppercase(),
        ] {
            assert!(split(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn unknown_operations_and_bad_tenants_are_refused_with_their_text() {
        assert_eq!(
            parse_ops(&["execute,nope".into()]).unwrap_err(),
            "envrt: unknown operation \"nope\" (one of: environments:read, leases:read, leases:write, leases:pause, \
             leases:fork, leases:idle, execute, sync, duplex, templates:read, templates:write, processes:read, \
             processes:write, network)"
        );
        assert_eq!(parse_ops(&[]).unwrap().len(), OPERATIONS.len());
        assert_eq!(
            parse_ops(&["execute, execute".into()]).unwrap(),
            vec!["execute".to_owned()]
        );
        assert_eq!(
            check_tenant("a b").unwrap_err(),
            "envrt: tenant \"a b\" must be 1 to 128 letters, digits, '-', '_' or '.'"
        );
    }
}
