//! The service's API tokens (`envrt serve`, `envrt token`): one row per token in the
//! `tokens` table, created when first used, next to the leases. A row holds the token's
//! public id, its tenant, the operations it allows and the SHA-256 of its secret, never
//! the secret itself; a revoked token keeps its row with `revoked_at` set so that
//! `envrt token list` still shows it.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

use envrt_runtime_core::StoreError;

use crate::SqliteStore;

const TOKENS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tokens (
    id          TEXT PRIMARY KEY NOT NULL,
    tenant      TEXT NOT NULL,
    ops         TEXT NOT NULL,
    hash        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);
";

/// One stored token: everything but the secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenRecord {
    /// The public id (shown by `envrt token list`, named by `envrt token revoke`).
    pub id: String,
    /// The tenant (company) every request with this token acts for.
    pub tenant: String,
    /// The operations the token allows.
    pub ops: Vec<String>,
    /// Lowercase hex SHA-256 of the secret part of the token.
    pub hash: String,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at: i64,
    /// Revocation time, when revoked.
    pub revoked_at: Option<i64>,
}

fn err(what: &str, source: rusqlite::Error) -> StoreError {
    StoreError {
        message: format!("cannot {what} tokens: {source}"),
        source: Some(Box::new(source)),
    }
}

fn ensure(connection: &Connection) -> Result<(), StoreError> {
    connection
        .execute_batch(TOKENS_SCHEMA)
        .map_err(|e| err("create the table of", e))
}

fn row(row: &rusqlite::Row<'_>) -> rusqlite::Result<(String, String, String, String, i64, Option<i64>)> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
    ))
}

fn record(raw: (String, String, String, String, i64, Option<i64>)) -> TokenRecord {
    let (id, tenant, ops, hash, created_at, revoked_at) = raw;
    TokenRecord {
        id,
        tenant,
        ops: ops.split(',').filter(|o| !o.is_empty()).map(str::to_owned).collect(),
        hash,
        created_at,
        revoked_at,
    }
}

fn insert(connection: &mut Connection, token: &TokenRecord) -> Result<(), StoreError> {
    ensure(connection)?;
    let tx = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| err("write", e))?;
    tx.execute(
        "INSERT INTO tokens (id, tenant, ops, hash, created_at, revoked_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            token.id,
            token.tenant,
            token.ops.join(","),
            token.hash,
            token.created_at,
            token.revoked_at
        ],
    )
    .map_err(|e| err("write", e))?;
    tx.commit().map_err(|e| err("write", e))
}

const COLUMNS: &str = "SELECT id, tenant, ops, hash, created_at, revoked_at FROM tokens";

fn get(connection: &mut Connection, id: &str) -> Result<Option<TokenRecord>, StoreError> {
    ensure(connection)?;
    connection
        .query_row(&format!("{COLUMNS} WHERE id = ?1"), params![id], row)
        .optional()
        .map(|found| found.map(record))
        .map_err(|e| err("read", e))
}

fn list(connection: &mut Connection) -> Result<Vec<TokenRecord>, StoreError> {
    ensure(connection)?;
    let mut statement = connection
        .prepare(&format!("{COLUMNS} ORDER BY created_at, id"))
        .map_err(|e| err("read", e))?;
    let rows = statement.query_map([], row).map_err(|e| err("read", e))?;
    rows.map(|r| r.map(record).map_err(|e| err("read", e))).collect()
}

fn revoke(connection: &mut Connection, id: &str, at: i64) -> Result<bool, StoreError> {
    ensure(connection)?;
    let changed = connection
        .execute(
            "UPDATE tokens SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
            params![id, at],
        )
        .map_err(|e| err("write", e))?;
    Ok(changed == 1)
}

impl SqliteStore {
    /// Stores a new token. Fails when a token with its id exists.
    pub async fn put_token(&self, token: TokenRecord) -> Result<(), StoreError> {
        self.with(move |c| insert(c, &token)).await
    }

    /// The token with public id `id`, revoked or not.
    pub async fn token(&self, id: &str) -> Result<Option<TokenRecord>, StoreError> {
        let id = id.to_owned();
        self.with(move |c| get(c, &id)).await
    }

    /// Every token, oldest first.
    pub async fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        self.with(list).await
    }

    /// Marks token `id` revoked at `at` (ms since the epoch); `false` when there is no
    /// such token or it was revoked already.
    pub async fn revoke_token(&self, id: &str, at: i64) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.with(move |c| revoke(c, &id, at)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_token_is_stored_listed_and_revoked_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("db")).await.unwrap();
        assert!(store.tokens().await.unwrap().is_empty());
        let token = TokenRecord {
            id: "t1".into(),
            tenant: "acme".into(),
            ops: vec!["leases:read".into(), "execute".into()],
            hash: "ab".into(),
            created_at: 5,
            revoked_at: None,
        };
        store.put_token(token.clone()).await.unwrap();
        assert!(store.put_token(token.clone()).await.is_err());
        assert_eq!(store.token("t1").await.unwrap(), Some(token.clone()));
        assert_eq!(store.token("t2").await.unwrap(), None);
        assert!(store.revoke_token("t1", 9).await.unwrap());
        assert!(!store.revoke_token("t1", 10).await.unwrap());
        assert!(!store.revoke_token("nope", 10).await.unwrap());
        let listed = store.tokens().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].revoked_at, Some(9));
        assert_eq!(listed[0].ops, token.ops);
    }
}
