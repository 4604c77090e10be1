//! `envrt caps`: the nine-key capability matrix of the configured environments, as a
//! table (keys down, environments across) or JSON.

use clap::Args;
use envrt::{CapabilityKey, CapabilitySnapshot};
use serde::Serialize;

use crate::app::App;
use crate::error::CliError;
use envrt::config::Paths;

#[derive(Debug, Args)]
pub(crate) struct CapsArgs {
    /// JSON: an array of `{environment, driver, capabilities, error, enforces}`, where
    /// `enforces` maps each setting the environment enforces on its commands to its value
    /// (`envrt doctor` prints the same).
    #[arg(long)]
    json: bool,
}

/// One environment's column.
#[derive(Debug, Serialize)]
struct Column {
    environment: String,
    driver: String,
    /// The snapshot, when it could be resolved.
    capabilities: Option<CapabilitySnapshot>,
    /// Why not, otherwise.
    error: Option<String>,
    /// What the environment enforces on its commands (`setting` → `value`).
    enforces: std::collections::BTreeMap<String, String>,
}

pub(crate) async fn run(paths: &Paths, args: CapsArgs) -> Result<u8, CliError> {
    let app = App::open(paths).await?;
    let mut columns = Vec::new();
    for environment in &app.config.environments {
        let (capabilities, error) = match app.check_driver(&environment.driver) {
            Err(e) => (None, Some(e.to_string())),
            Ok(()) => match app.runtime.environment_capabilities(&environment.id).await {
                Ok(Some(snapshot)) => (Some(snapshot), None),
                Ok(None) => (
                    None,
                    Some(
                        envrt::RuntimeError::DriverNotRegistered {
                            key: environment.driver.clone(),
                        }
                        .to_string(),
                    ),
                ),
                Err(e) => (None, Some(e.to_string())),
            },
        };
        columns.push(Column {
            environment: environment.id.clone(),
            driver: environment.driver.clone(),
            capabilities,
            error,
            enforces: crate::isolation::enforcement(environment)
                .into_iter()
                .chain([("egress".to_owned(), crate::isolation::egress(&app.runtime, environment))])
                .collect(),
        });
    }
    if args.json {
        crate::out!(
            "{}",
            serde_json::to_string_pretty(&columns).unwrap_or_else(|_| "[]".into())
        );
    } else {
        crate::output::write(table(&columns).as_bytes());
    }
    Ok(0)
}

fn table(columns: &[Column]) -> String {
    let key_width = CapabilityKey::ALL
        .iter()
        .map(|k| k.as_str().len())
        .max()
        .unwrap_or(0)
        .max("ENVIRONMENT".len());
    let heads: Vec<String> = columns
        .iter()
        .map(|c| format!("{} ({})", c.environment, c.driver))
        .collect();
    let widths: Vec<usize> = heads.iter().map(|h| h.chars().count().max(3)).collect();
    let mut out = String::new();
    let mut line = format!("{:<key_width$}", "ENVIRONMENT");
    for (h, w) in heads.iter().zip(&widths) {
        line.push_str(&format!("  {h:<w$}"));
    }
    out.push_str(line.trim_end());
    out.push('\n');
    for key in CapabilityKey::ALL {
        let mut line = format!("{:<key_width$}", key.as_str());
        for (c, w) in columns.iter().zip(&widths) {
            let cell = match &c.capabilities {
                Some(s) if s.get(key) => "yes",
                Some(_) => "no",
                None => "?",
            };
            line.push_str(&format!("  {cell:<w$}"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    for c in columns {
        if let Some(e) = &c.error {
            out.push_str(&format!("? {}: {e}\n", c.environment));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_nine_rows_and_explains_unknown_columns() {
        let snapshot = CapabilitySnapshot {
            native_sync_in: true,
            ..Default::default()
        };
        let t = table(&[
            Column {
                environment: "local".into(),
                driver: "local".into(),
                capabilities: Some(snapshot),
                error: None,
                enforces: Default::default(),
            },
            Column {
                environment: "box".into(),
                driver: "docker".into(),
                capabilities: None,
                error: Some("nope".into()),
                enforces: Default::default(),
            },
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 1 + 9 + 1);
        assert_eq!(lines[0], "ENVIRONMENT                 local (local)  box (docker)");
        assert_eq!(lines[1], "reusableLeases              no             ?");
        assert_eq!(lines[2], "nativeSyncIn                yes            ?");
        assert_eq!(lines[10], "? box: nope");
    }
}
