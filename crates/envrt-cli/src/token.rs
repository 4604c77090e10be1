//! `envrt token create | list | revoke`: the service's bearer tokens, in the lease store.
//! A token is printed once, on the last line of `create`; the store keeps only its hash.

use clap::Subcommand;
use envrt::Timestamp;
use envrt::config::{Paths, open_store};

use crate::error::CliError;

#[derive(Debug, Subcommand)]
pub(crate) enum TokenCommand {
    /// Make a token for a tenant; its last line is the token (shown only this once).
    Create {
        /// The tenant (company) the token acts for.
        #[arg(long, value_name = "TENANT")]
        tenant: String,
        /// Operations it allows (comma-separated or repeated); default every one.
        #[arg(long, value_name = "OPS", num_args = 1..)]
        ops: Vec<String>,
    },
    /// List tokens: id, tenant, operations, created, revoked.
    List {
        /// JSON (an array of token records, hashes left out).
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by id: the service refuses it from the next request on.
    Revoke {
        /// The token id (`envrt token list`).
        id: String,
    },
}

pub(crate) async fn run(paths: &Paths, command: TokenCommand) -> Result<u8, CliError> {
    let store = open_store(paths).await?;
    match command {
        TokenCommand::Create { tenant, ops } => {
            let ops = envrt_serve::auth::parse_ops(&ops).map_err(CliError::Usage)?;
            let made =
                envrt_serve::auth::new_token(&tenant, ops, Timestamp::now().0 as i64).map_err(CliError::Usage)?;
            store.put_token(made.record.clone()).await?;
            out!("id: {}", made.record.id);
            out!("tenant: {}", made.record.tenant);
            out!("ops: {}", made.record.ops.join(","));
            out!("{}", made.token);
        }
        TokenCommand::List { json } => {
            let tokens = store.tokens().await?;
            if json {
                let docs: Vec<serde_json::Value> = tokens
                    .iter()
                    .map(|t| {
                        serde_json::json!({
                            "id": t.id, "tenant": t.tenant, "ops": t.ops,
                            "createdAt": t.created_at, "revokedAt": t.revoked_at,
                        })
                    })
                    .collect();
                out!("{}", serde_json::Value::from(docs));
            } else {
                for t in tokens {
                    let revoked = t
                        .revoked_at
                        .map(|at| format!(" revoked {}", Timestamp(at as u64).to_rfc3339()))
                        .unwrap_or_default();
                    out!(
                        "{} {} {} {}{revoked}",
                        t.id,
                        t.tenant,
                        t.ops.join(","),
                        Timestamp(t.created_at as u64).to_rfc3339()
                    );
                }
            }
        }
        TokenCommand::Revoke { id } => {
            if !store.revoke_token(&id, Timestamp::now().0 as i64).await? {
                return Err(CliError::Usage(format!(
                    "envrt: no live token \"{id}\" (envrt token list shows them)"
                )));
            }
            out!("revoked {id}");
        }
    }
    Ok(0)
}
