//! Durations as people write them on a command line: `90`, `1.5` (seconds), `500ms`,
//! `1s`, `2m`, `1h`, and sums such as `1m30s`.

use std::time::Duration;

/// The longest duration accepted: a year, far past any sane timeout or lease.
const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// A duration that [`parse_duration`] refused; its text names the option and the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{flag} expects a positive duration such as 90, 1.5, 500ms, 1s, 2m or 1h30m, got \"{raw}\"")]
pub struct DurationError {
    /// The option or key the value was given for (`--ttl`, `ttl`).
    pub flag: String,
    /// The value as written.
    pub raw: String,
}

/// Parses `raw` for the option `flag`; zero, negative and absurd (over a year) values are
/// refused.
pub fn parse_duration(flag: &str, raw: &str) -> Result<Duration, DurationError> {
    let refuse = || DurationError {
        flag: flag.to_owned(),
        raw: raw.to_owned(),
    };
    let text = raw.trim();
    if text.is_empty() {
        return Err(refuse());
    }
    // A bare number is seconds.
    if let Ok(seconds) = text.parse::<f64>() {
        return positive(seconds).ok_or_else(refuse);
    }
    let mut total = 0.0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let unit_len = rest[digits..]
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len() - digits);
        let (number, unit) = (&rest[..digits], &rest[digits..digits + unit_len]);
        let value: f64 = number.parse().map_err(|_| refuse())?;
        let scale = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(refuse()),
        };
        total += value * scale;
        rest = &rest[digits + unit_len..];
    }
    positive(total).ok_or_else(refuse)
}

fn positive(seconds: f64) -> Option<Duration> {
    (seconds.is_finite() && seconds > 0.0 && seconds <= MAX_SECONDS).then(|| Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usual_spellings_parse() {
        let ok = |raw: &str| parse_duration("--timeout", raw).unwrap();
        assert_eq!(ok("90"), Duration::from_secs(90));
        assert_eq!(ok("1.5"), Duration::from_millis(1500));
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("1s"), Duration::from_secs(1));
        assert_eq!(ok("2m"), Duration::from_secs(120));
        assert_eq!(ok("1h"), Duration::from_secs(3600));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("1h30m"), Duration::from_secs(5400));
        assert_eq!(ok("0.25s"), Duration::from_millis(250));
        assert_eq!(ok(" 2m "), Duration::from_secs(120));
    }

    #[test]
    fn everything_else_is_refused_with_one_text() {
        for raw in [
            "",
            "0",
            "-1",
            "0s",
            "abc",
            "1x",
            "1.2.3s",
            "s",
            "ms5",
            "1e400",
            "nan",
            "inf",
            "400d",
            "9999999999",
        ] {
            let err = parse_duration("--timeout", raw).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("--timeout expects a positive duration such as 90, 1.5, 500ms, 1s, 2m or 1h30m, got \"{raw}\""),
                "for {raw:?}"
            );
        }
    }
}
