//! What an environment enforces on the commands it runs, for `envrt caps` and
//! `envrt doctor` (the threat model per driver is in docs/security.md).

use envrt::Environment;

/// `(setting, value)` rows of what `environment` enforces, as its driver's descriptor
/// describes it.
pub(crate) fn enforcement(environment: &Environment) -> Vec<(String, String)> {
    envrt::registry::isolation(environment)
}

/// What network `environment`'s leases get (`no network`, `host network`,
/// `unrestricted (Docker network "bridge")`, ...) as its registered driver enforces it;
/// the refusal or the missing driver otherwise. Shown as the `egress` row.
pub(crate) fn egress(runtime: &envrt::EnvironmentRuntime, environment: &Environment) -> String {
    match runtime.network_level(environment) {
        Ok(level) => level.to_string(),
        Err(e) => format!("unknown: {e}"),
    }
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
