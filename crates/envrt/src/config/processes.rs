//! `[environment.processes]` in `envrt.toml`: the `keep` of a spawn that names none and
//! the bound on a lease's replay buffers (contract section 9).
//!
//! ```toml
//! [environment.processes]
//! keep = "1M"            # bytes held per stream for replay; default 8M, 1 byte to 1G
//! replay_bound = "64M"   # all of a lease's processes together; default 1G, at least
//!                        # twice keep (a process without a terminal holds two streams)
//! ```

use envrt_runtime_core::process::{DEFAULT_KEEP, DEFAULT_REPLAY_BOUND, MAX_KEEP, ProcessSettings, parse_size};
use serde::Deserialize;

/// The largest `replay_bound`: 64 GiB (a typo such as `"640G"` is refused).
const MAX_REPLAY_BOUND: u64 = 64 << 30;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProcessesEntry {
    keep: Option<toml::Value>,
    replay_bound: Option<toml::Value>,
}

/// One size key, checked against `1..=max` (the message, without file and environment).
fn size(key: &str, value: &toml::Value, max: u64) -> Result<u64, String> {
    let bytes = match value {
        toml::Value::String(raw) => parse_size(raw),
        toml::Value::Integer(n) => u64::try_from(*n).ok().filter(|n| *n > 0),
        _ => None,
    };
    match bytes {
        Some(bytes) if bytes <= max => Ok(bytes),
        _ => Err(format!(
            "[environment.processes] {key} expects a size like \"64K\" or \"8M\" from 1 byte to {max} bytes, got {}",
            super::file::shown(value)
        )),
    }
}

/// The checked settings of `[environment.processes]`.
pub(super) fn parse(entry: &ProcessesEntry) -> Result<ProcessSettings, String> {
    let keep = entry.keep.as_ref().map(|v| size("keep", v, MAX_KEEP)).transpose()?;
    let replay_bound = entry
        .replay_bound
        .as_ref()
        .map(|v| size("replay_bound", v, MAX_REPLAY_BOUND))
        .transpose()?;
    let (effective_keep, bound) = (
        keep.unwrap_or(DEFAULT_KEEP),
        replay_bound.unwrap_or(DEFAULT_REPLAY_BOUND),
    );
    if bound < 2 * effective_keep {
        return Err(format!(
            "[environment.processes] replay_bound of {bound} bytes is less than twice keep ({effective_keep} bytes): a process without a terminal holds keep bytes of each of its two streams"
        ));
    }
    Ok(ProcessSettings { keep, replay_bound })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<ProcessSettings, String> {
        let entry: ProcessesEntry = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        parse(&entry)
    }

    #[test]
    fn sizes_are_read_and_bad_ones_refused_exactly() {
        assert_eq!(
            read("keep = \"1M\"\nreplay_bound = \"64M\""),
            Ok(ProcessSettings {
                keep: Some(1 << 20),
                replay_bound: Some(64 << 20)
            })
        );
        assert_eq!(
            read("keep = 4096"),
            Ok(ProcessSettings {
                keep: Some(4096),
                replay_bound: None
            })
        );
        assert_eq!(read(""), Ok(ProcessSettings::default()));
        assert_eq!(
            read("keep = \"2G\"").unwrap_err(),
            "[environment.processes] keep expects a size like \"64K\" or \"8M\" from 1 byte to 1073741824 bytes, got \"2G\""
        );
        assert_eq!(
            read("keep = 0").unwrap_err(),
            "[environment.processes] keep expects a size like \"64K\" or \"8M\" from 1 byte to 1073741824 bytes, got 0"
        );
        assert_eq!(
            read("replay_bound = true").unwrap_err(),
            "[environment.processes] replay_bound expects a size like \"64K\" or \"8M\" from 1 byte to 68719476736 bytes, got true"
        );
        assert_eq!(
            read("replay_bound = \"8M\"").unwrap_err(),
            "[environment.processes] replay_bound of 8388608 bytes is less than twice keep (8388608 bytes): a process without a terminal holds keep bytes of each of its two streams"
        );
        assert_eq!(
            read("kept = 1").unwrap_err(),
            "unknown field `kept`, expected `keep` or `replay_bound`"
        );
    }
}
