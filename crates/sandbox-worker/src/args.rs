//! The worker's command line: flags, their defaults, and the usage text.

use std::path::PathBuf;
use std::time::Duration;

use envrt_runtime_core::execute::DEFAULT_OUTPUT_LIMIT;

use super::{MAX_LINE, policy};

/// The usage line.
const USAGE: &str = "usage: envrt-sandbox-worker [--root DIR] [--bwrap PATH] [--kill-grace-ms N] [--max-output-bytes N] [--no-duplex] [--sandbox-uid N] [--sandbox-gid N] [--fresh-tmp] [--tmp-size BYTES] [--shm-size BYTES] [--max-processes N] [--max-memory BYTES] [--max-line-bytes N]";

/// What the command line chose.
#[derive(Debug)]
pub(super) struct Config {
    pub(super) root: PathBuf,
    pub(super) bwrap: Option<PathBuf>,
    pub(super) grace: Duration,
    pub(super) max_output: usize,
    pub(super) no_duplex: bool,
    /// Never accept the `envrt.dataPlane` offer: duplex stays on JSON frames.
    pub(super) no_data_plane: bool,
    pub(super) policy: policy::Policy,
    pub(super) max_line: usize,
}

fn number<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("{flag}: bad number {v:?}"))
}

/// Reads the flags; an error is the message to print (with the usage where it helps).
pub(super) fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Config, String> {
    let mut config = Config {
        root: std::env::var_os("ENVRT_SANDBOX_ROOT")
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("envrt-sandbox-leases")),
        bwrap: std::env::var_os("ENVRT_BWRAP").map(PathBuf::from),
        grace: Duration::from_millis(1000),
        max_output: DEFAULT_OUTPUT_LIMIT,
        no_duplex: false,
        no_data_plane: false,
        policy: policy::Policy::default(),
        max_line: MAX_LINE,
    };
    let root = rustix::process::geteuid().is_root();
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--root" => config.root = PathBuf::from(value()?),
            "--bwrap" => config.bwrap = Some(PathBuf::from(value()?)),
            "--kill-grace-ms" => {
                let v = value()?;
                config.grace =
                    Duration::from_millis(v.parse().map_err(|_| format!("--kill-grace-ms: bad number {v:?}"))?);
            }
            "--max-output-bytes" => {
                let v = value()?;
                config.max_output = v.parse().map_err(|_| format!("--max-output-bytes: bad number {v:?}"))?;
            }
            "--no-duplex" => config.no_duplex = true,
            "--no-data-plane" => config.no_data_plane = true,
            "--sandbox-uid" | "--sandbox-gid" => {
                let id: u32 = number(&flag, &value()?)?;
                if !root {
                    return Err(format!(
                        "{flag}: only a worker running as root can choose the sandbox identity"
                    ));
                }
                let (uid, gid) = config.policy.identity.unwrap_or((0, 0));
                config.policy.identity = Some(if flag == "--sandbox-uid" { (id, gid) } else { (uid, id) });
            }
            "--tmp-size" => config.policy.tmp_bytes = number(&flag, &value()?)?,
            "--fresh-tmp" => config.policy.persistent_tmp = false,
            "--shm-size" => config.policy.shm_bytes = number(&flag, &value()?)?,
            "--max-processes" => config.policy.max_processes = number(&flag, &value()?)?,
            "--max-memory" => config.policy.max_memory = number(&flag, &value()?)?,
            "--max-line-bytes" => config.max_line = number(&flag, &value()?)?,
            "--help" | "-h" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        let c = parse_args(
            [
                "--root",
                "/r",
                "--bwrap",
                "/b",
                "--kill-grace-ms",
                "5",
                "--max-output-bytes",
                "7",
            ]
            .into_iter()
            .map(String::from),
        )
        .unwrap();
        assert_eq!(
            (c.root, c.bwrap, c.grace, c.max_output),
            (
                PathBuf::from("/r"),
                Some(PathBuf::from("/b")),
                Duration::from_millis(5),
                7
            )
        );
        let c = parse_args(
            [
                "--tmp-size",
                "1024",
                "--shm-size",
                "2048",
                "--max-processes",
                "9",
                "--max-memory",
                "0",
                "--max-line-bytes",
                "77",
                "--fresh-tmp",
            ]
            .into_iter()
            .map(String::from),
        )
        .unwrap();
        assert_eq!(
            (
                c.policy.tmp_bytes,
                c.policy.shm_bytes,
                c.policy.max_processes,
                c.policy.max_memory,
                c.max_line
            ),
            (1024, 2048, 9, 0, 77)
        );
        assert!(!c.policy.persistent_tmp);
        assert!(parse_args(std::iter::empty()).unwrap().policy.persistent_tmp);
        assert_eq!(
            parse_args(["--max-processes".to_string(), "many".to_string()].into_iter()).unwrap_err(),
            "--max-processes: bad number \"many\""
        );
        if rustix::process::geteuid().is_root() {
            let c = parse_args(
                ["--sandbox-uid", "1234", "--sandbox-gid", "5678"]
                    .into_iter()
                    .map(String::from),
            )
            .unwrap();
            assert_eq!(c.policy.identity, Some((1234, 5678)));
        } else {
            assert_eq!(
                parse_args(["--sandbox-uid".to_string(), "1".to_string()].into_iter()).unwrap_err(),
                "--sandbox-uid: only a worker running as root can choose the sandbox identity"
            );
        }
        assert_eq!(
            parse_args(["--nope".to_string()].into_iter()).unwrap_err(),
            format!("unknown argument \"--nope\"\n{USAGE}")
        );
        assert_eq!(
            parse_args(["--root".to_string()].into_iter()).unwrap_err(),
            format!("--root needs a value\n{USAGE}")
        );
    }
}
