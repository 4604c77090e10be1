//! What an environment enforces on the commands it runs, for `envrt caps` and
//! `envrt doctor` (the threat model per driver is in docs/security.md).

use envrt::Environment;

/// `(setting, value)` rows of what `environment` enforces.
pub(crate) fn enforcement(environment: &Environment) -> Vec<(String, String)> {
    let rows: Vec<(&str, String)> = match environment.driver.as_str() {
        "local" => vec![
            (
                "isolation",
                "none: commands run as this user, with its access to everything".to_owned(),
            ),
            ("processes", envrt::local::describe_containment(true)),
        ],
        "docker" => match envrt::docker::EnvConfig::of(environment) {
            Ok(config) => config.enforcement(),
            Err(e) => vec![("config", e.to_string())],
        },
        _ => vec![("isolation", "set by the plugin worker".to_owned())],
    };
    rows.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// The rows as one line: `k=v, k=v`.
pub(crate) fn line(rows: &[(String, String)]) -> String {
    rows.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_rows_show_the_hardening_defaults() {
        let mut config = envrt::JsonMap::new();
        config.insert("image".into(), "img".into());
        let env = Environment::new("box", "box", "docker").with_config(config);
        let text = line(&enforcement(&env));
        assert_eq!(
            text,
            "capabilities=all dropped but CHOWN, DAC_OVERRIDE, FOWNER, noNewPrivileges=yes, pidsLimit=4096, \
             memoryBytes=2147483648, nanoCpus=unlimited, readOnlyRootFs=no, user=the image's (often root), network=none"
        );
        let local = Environment::new("l", "l", "local");
        assert!(line(&enforcement(&local)).starts_with("isolation=none: commands run as this user"));
    }
}
