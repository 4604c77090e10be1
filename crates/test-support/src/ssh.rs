//! The test sshd of `scripts/start-sshd.sh`, found through its env file
//! (`ENVRT_TEST_SSH_ENV`, default `/var/lib/envrt-test-ssh/env`) of `KEY=value` lines.

use std::collections::HashMap;

/// The env file the test sshd's settings are read from when `ENVRT_TEST_SSH_ENV` is unset.
pub const DEFAULT_ENV_FILE: &str = "/var/lib/envrt-test-ssh/env";

/// The env file: `ENVRT_TEST_SSH_ENV`, else [`DEFAULT_ENV_FILE`].
pub fn env_file() -> String {
    std::env::var("ENVRT_TEST_SSH_ENV").unwrap_or_else(|_| DEFAULT_ENV_FILE.into())
}

/// The settings of the env file (`ENVRT_TEST_SSH_HOST`, `_PORT`, `_USER`, `_KEY`,
/// `_KNOWN_HOSTS`), or `{path}: {error}` when it cannot be read.
pub fn settings() -> Result<HashMap<String, String>, String> {
    let path = env_file();
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    Ok(parse(&text))
}

fn parse(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_key_value_lines_and_other_lines_are_ignored() {
        let vars = parse("ENVRT_TEST_SSH_HOST=127.0.0.1\n# a note\nENVRT_TEST_SSH_KEY=/k=v\n");
        assert_eq!(vars.len(), 2);
        assert_eq!(vars["ENVRT_TEST_SSH_HOST"], "127.0.0.1");
        assert_eq!(vars["ENVRT_TEST_SSH_KEY"], "/k=v");
    }
}
