//! `ready_command` and `ready_timeout` of an `[[environment]]` in `envrt.toml`: the
//! readiness command every new lease must pass before its acquire returns (the facade runs
//! it; contract section 8, "Readiness").

use envrt_runtime_core::{MAX_READY_TIMEOUT, MAX_READY_WORDS, Readiness};

/// The timeout when `ready_command` is given without `ready_timeout`.
pub(super) const DEFAULT_READY_TIMEOUT_MS: u64 = 60_000;

/// The checked readiness of an environment entry; `None` when it declares none.
pub(super) fn parse(command: Option<&toml::Value>, timeout: Option<&str>) -> Result<Option<Readiness>, String> {
    let Some(command) = command else {
        return match timeout {
            Some(_) => Err("ready_timeout needs ready_command".into()),
            None => Ok(None),
        };
    };
    let words: Option<Vec<String>> = command
        .as_array()
        .map(|items| items.iter().map(|v| v.as_str().map(str::to_owned)).collect())
        .and_then(|words: Option<Vec<String>>| words);
    let Some(words) = words else {
        return Err(format!(
            "ready_command expects an array of strings, got {}",
            super::file::shown(command)
        ));
    };
    if words.first().is_none_or(|w| w.is_empty()) {
        return Err("ready_command needs a program".into());
    }
    if words.len() > MAX_READY_WORDS {
        return Err(format!("ready_command has more than {MAX_READY_WORDS} words"));
    }
    let timeout_ms = match timeout {
        None => DEFAULT_READY_TIMEOUT_MS,
        Some(raw) => {
            let duration = super::parse_duration("ready_timeout", raw).map_err(|e| e.to_string())?;
            if duration > MAX_READY_TIMEOUT || duration.as_millis() == 0 {
                return Err(format!(
                    "ready_timeout must be from 1 ms to {} s",
                    MAX_READY_TIMEOUT.as_secs()
                ));
            }
            duration.as_millis() as u64
        }
    };
    Ok(Some(Readiness {
        command: words,
        timeout_ms,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str) -> toml::Value {
        toml::from_str::<toml::Table>(&format!("v = {text}")).unwrap()["v"].clone()
    }

    #[test]
    fn a_readiness_entry_is_read_or_refused_with_its_text() {
        let ok = parse(Some(&value(r#"["sh", "-c", "true"]"#)), Some("2s"))
            .unwrap()
            .unwrap();
        assert_eq!(ok.command, ["sh", "-c", "true"]);
        assert_eq!(ok.timeout_ms, 2000);
        let default = parse(Some(&value(r#"["true"]"#)), None).unwrap().unwrap();
        assert_eq!(default.timeout_ms, DEFAULT_READY_TIMEOUT_MS);
        assert_eq!(parse(None, None).unwrap(), None);
        let refused = |c: Option<&str>, t: Option<&str>| parse(c.map(value).as_ref(), t).unwrap_err();
        assert_eq!(refused(None, Some("1s")), "ready_timeout needs ready_command");
        assert_eq!(
            refused(Some(r#""true""#), None),
            "ready_command expects an array of strings, got \"true\""
        );
        assert_eq!(
            refused(Some("[1, 2]"), None),
            "ready_command expects an array of strings, got an array"
        );
        assert_eq!(refused(Some("[]"), None), "ready_command needs a program");
        assert_eq!(
            refused(Some(r#"["true"]"#), Some("11m")),
            "ready_timeout must be from 1 ms to 600 s"
        );
        assert_eq!(
            refused(Some(r#"["true"]"#), Some("soon")),
            "ready_timeout expects a positive duration such as 90, 1.5, 500ms, 1s, 2m or 1h30m, got \"soon\""
        );
    }
}
