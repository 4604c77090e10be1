//! The worker's command line: flags, their defaults, and the usage text.

use std::path::PathBuf;
use std::time::Duration;

use envrt_driver_api::execute::DEFAULT_OUTPUT_LIMIT;

use super::uids::{self, Ids};
use super::{MAX_LINE, policy};

/// The usage line.
const USAGE: &str = "usage: envrt-sandbox-worker [--root DIR] [--bwrap PATH] [--kill-grace-ms N] [--max-output-bytes N] [--no-duplex] [--sandbox-uids BASE:COUNT] [--sandbox-uid N] [--sandbox-gid N] [--fresh-tmp] [--tmp-size BYTES] [--shm-size BYTES] [--max-processes N] [--max-memory BYTES] [--max-line-bytes N]";

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
    let mut chose_range = false;
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
                let (uid, gid) = match config.policy.ids {
                    Ids::Fixed(uid, gid) => (uid, gid),
                    Ids::Range { .. } if chose_range => {
                        return Err("--sandbox-uids excludes --sandbox-uid and --sandbox-gid".to_owned());
                    }
                    _ => (policy::DEFAULT_SANDBOX_ID, policy::DEFAULT_SANDBOX_ID),
                };
                config.policy.ids = if flag == "--sandbox-uid" {
                    Ids::Fixed(id, gid)
                } else {
                    Ids::Fixed(uid, id)
                };
            }
            "--sandbox-uids" => {
                let ids = uids::parse_range(&value()?)?;
                if !root {
                    return Err(format!(
                        "{flag}: only a worker running as root can choose the sandbox identity"
                    ));
                }
                if matches!(config.policy.ids, Ids::Fixed(..)) {
                    return Err("--sandbox-uids excludes --sandbox-uid and --sandbox-gid".to_owned());
                }
                chose_range = true;
                config.policy.ids = ids;
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
            assert_eq!(c.policy.ids, Ids::Fixed(1234, 5678));
            let gid_only = |args: &[&str]| parse_args(args.iter().map(|a| a.to_string())).map(|c| c.policy.ids);
            assert_eq!(gid_only(&["--sandbox-gid", "7"]), Ok(Ids::Fixed(65534, 7)));
            assert_eq!(
                gid_only(&["--sandbox-uids", "3000000:5"]),
                Ok(Ids::Range {
                    base: 3000000,
                    count: 5
                })
            );
            assert_eq!(
                parse_args(std::iter::empty()).unwrap().policy.ids,
                Ids::Range {
                    base: uids::DEFAULT_BASE,
                    count: uids::DEFAULT_COUNT
                }
            );
            for both in [
                ["--sandbox-uids", "3000000:5", "--sandbox-uid", "5"],
                ["--sandbox-gid", "5", "--sandbox-uids", "3000000:5"],
            ] {
                assert_eq!(
                    gid_only(&both).unwrap_err(),
                    "--sandbox-uids excludes --sandbox-uid and --sandbox-gid"
                );
            }
        } else {
            assert_eq!(parse_args(std::iter::empty()).unwrap().policy.ids, Ids::Own);
            assert_eq!(
                parse_args(["--sandbox-uids".to_string(), "3000000:5".to_string()].into_iter()).unwrap_err(),
                "--sandbox-uids: only a worker running as root can choose the sandbox identity"
            );
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
