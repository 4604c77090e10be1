//! An environment's default idle timeout in `envrt.toml` (`idle_timeout`, `on_idle`;
//! contract section 8, "Idle timeout and keep-alive").

use std::collections::BTreeMap;
use std::time::Duration;

/// Checks an environment's `idle_timeout` and `on_idle` (the message, without the file
/// and environment).
pub(super) fn check(idle_timeout: Option<&str>, on_idle: Option<&str>) -> Result<(), String> {
    if let Some(raw) = idle_timeout {
        super::parse_duration("idle_timeout", raw).map_err(|e| e.to_string())?;
    }
    match on_idle {
        None | Some("release") if idle_timeout.is_some() || on_idle.is_none() => Ok(()),
        None | Some("release") => Err("on_idle needs an idle_timeout".into()),
        Some("pause") => Err("on_idle = \"pause\" is not built yet (only \"release\")".into()),
        Some(other) => Err(format!("on_idle must be \"release\", got \"{other}\"")),
    }
}

/// The default idle timeout of each environment that sets one (already checked).
pub(super) fn defaults<'a>(
    environments: impl Iterator<Item = (&'a String, Option<&'a str>)>,
) -> BTreeMap<String, Duration> {
    environments
        .filter_map(|(id, raw)| Some((id.clone(), super::parse_duration("idle_timeout", raw?).ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_values_pass_and_bad_ones_get_their_texts() {
        assert_eq!(check(None, None), Ok(()));
        assert_eq!(check(Some("10m"), None), Ok(()));
        assert_eq!(check(Some("1s"), Some("release")), Ok(()));
        assert_eq!(
            check(Some("soon"), None).unwrap_err(),
            "idle_timeout expects a positive duration such as 90, 1.5, 500ms, 1s, 2m or 1h30m, got \"soon\""
        );
        assert_eq!(
            check(Some("1m"), Some("pause")).unwrap_err(),
            "on_idle = \"pause\" is not built yet (only \"release\")"
        );
        assert_eq!(
            check(Some("1m"), Some("stop")).unwrap_err(),
            "on_idle must be \"release\", got \"stop\""
        );
        assert_eq!(
            check(None, Some("release")).unwrap_err(),
            "on_idle needs an idle_timeout"
        );
    }
}
