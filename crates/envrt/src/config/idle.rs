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
        None => Ok(()),
        Some("release" | "pause") if idle_timeout.is_some() => Ok(()),
        Some("release" | "pause") => Err("on_idle needs an idle_timeout".into()),
        Some(other) => Err(format!("on_idle must be \"release\" or \"pause\", got \"{other}\"")),
    }
}

/// Checks an environment's `max_ttl` against its `ttl` and pool (the message, without the
/// file and environment).
pub(super) fn check_max_ttl(ttl: Option<&str>, max_ttl: Option<&str>, pooled: bool) -> Result<(), String> {
    let Some(raw) = max_ttl else {
        return Ok(());
    };
    let max = super::parse_duration("max_ttl", raw).map_err(|e| e.to_string())?;
    if pooled {
        return Err(
            "a pool cannot be combined with max_ttl (pooled leases are acquired ahead and carry no expiry)".into(),
        );
    }
    if let Some(ttl_raw) = ttl
        && super::parse_duration("ttl", ttl_raw).is_ok_and(|ttl| ttl > max)
    {
        return Err(format!("ttl \"{ttl_raw}\" is longer than max_ttl \"{raw}\""));
    }
    Ok(())
}

/// The environments whose idle timeout pauses the lease (`on_idle = "pause"`).
pub(super) fn pausing<'a>(
    environments: impl Iterator<Item = (&'a String, Option<&'a str>)>,
) -> std::collections::BTreeSet<String> {
    environments
        .filter(|(_, on_idle)| *on_idle == Some("pause"))
        .map(|(id, _)| id.clone())
        .collect()
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
        assert_eq!(check(Some("1m"), Some("pause")), Ok(()));
        assert_eq!(
            check(Some("1m"), Some("stop")).unwrap_err(),
            "on_idle must be \"release\" or \"pause\", got \"stop\""
        );
        assert_eq!(check(None, Some("pause")).unwrap_err(), "on_idle needs an idle_timeout");
        assert_eq!(
            check(None, Some("release")).unwrap_err(),
            "on_idle needs an idle_timeout"
        );
    }

    #[test]
    fn max_ttl_is_checked_against_ttl_and_pools() {
        assert_eq!(check_max_ttl(None, None, true), Ok(()));
        assert_eq!(check_max_ttl(Some("1h"), Some("2h"), false), Ok(()));
        assert_eq!(check_max_ttl(Some("2h"), Some("2h"), false), Ok(()));
        assert_eq!(
            check_max_ttl(Some("3h"), Some("2h"), false).unwrap_err(),
            "ttl \"3h\" is longer than max_ttl \"2h\""
        );
        assert_eq!(
            check_max_ttl(None, Some("2h"), true).unwrap_err(),
            "a pool cannot be combined with max_ttl (pooled leases are acquired ahead and carry no expiry)"
        );
        assert_eq!(
            check_max_ttl(None, Some("forever"), false).unwrap_err(),
            "max_ttl expects a positive duration such as 90, 1.5, 500ms, 1s, 2m or 1h30m, got \"forever\""
        );
    }
}
