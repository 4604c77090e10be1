//! How the `envrt-egress` process gets its credentials and hands out its CA: the resolved
//! credentials arrive on stdin (JSON, bounded, read to end of file), so a secret is never on
//! a command line (`/proc/PID/cmdline` is world-readable) nor in a file; the CA is made in
//! the process and only its certificate leaves it, as the bundle file the lease trusts.
//! Errors never show a secret: a JSON error is reported by line and column only.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::broker::Broker;
use crate::credential::Brokered;

/// The most bytes of credentials read from stdin.
pub const MAX_CREDENTIALS_BYTES: u64 = 1024 * 1024;
/// The most bytes of a `--base-bundle` file.
pub const MAX_BUNDLE_BYTES: u64 = 8 * 1024 * 1024;

/// The brokering options as given on the command line.
#[derive(Debug, Default)]
pub(crate) struct BrokerArgs {
    pub(crate) stdin: bool,
    pub(crate) ca_bundle: Option<PathBuf>,
    pub(crate) base_bundle: Option<PathBuf>,
    pub(crate) extra_roots: Option<PathBuf>,
}

/// Credential brokering, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerOptions {
    /// Where the lease's CA bundle is written.
    pub ca_bundle: PathBuf,
    /// Roots appended to the bundle (the host's, so the lease's other TLS still verifies).
    pub base_bundle: Option<PathBuf>,
    /// Extra roots the real hosts are verified against.
    pub extra_roots: Option<PathBuf>,
}

impl BrokerArgs {
    pub(crate) fn check(self) -> Result<Option<BrokerOptions>, String> {
        if !self.stdin {
            if self.ca_bundle.is_some() || self.base_bundle.is_some() || self.extra_roots.is_some() {
                return Err(
                    "--ca-bundle, --base-bundle and --extra-roots are for credential brokering: add --credentials-stdin"
                        .to_owned(),
                );
            }
            return Ok(None);
        }
        let ca_bundle = self
            .ca_bundle
            .ok_or("--credentials-stdin needs --ca-bundle FILE (where the lease's CA bundle is written)")?;
        Ok(Some(BrokerOptions {
            ca_bundle,
            base_bundle: self.base_bundle,
            extra_roots: self.extra_roots,
        }))
    }
}

/// Reads the credentials from `input` to its end and checks each (host, header, value).
pub fn read_brokered(input: impl Read) -> Result<Vec<Brokered>, String> {
    let mut bytes = Vec::new();
    input
        .take(MAX_CREDENTIALS_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the credentials on stdin: {e}"))?;
    if bytes.len() as u64 > MAX_CREDENTIALS_BYTES {
        return Err(format!(
            "the credentials on stdin are larger than {MAX_CREDENTIALS_BYTES} bytes"
        ));
    }
    let list: Vec<Brokered> = serde_json::from_slice(&bytes).map_err(|e| {
        format!(
            "the credentials on stdin are not a JSON list of credentials (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    if list.is_empty() {
        return Err("the credentials on stdin are an empty list".to_owned());
    }
    for (i, c) in list.iter().enumerate() {
        let name_ok = crate::tls::server_name(&c.host).is_some() && c.host == crate::policy::normalize(&c.host);
        let header_ok = hyper::header::HeaderName::from_bytes(c.header.as_bytes()).is_ok();
        let value_ok = hyper::header::HeaderValue::from_str(c.value.expose()).is_ok();
        if !(name_ok && header_ok && value_ok && c.port != 0) {
            return Err(format!(
                "credential {i} on stdin has a bad host, port, header name or header value"
            ));
        }
    }
    Ok(list)
}

/// Reads the credentials from `input`, makes the broker (and its CA), and writes the CA
/// bundle.
pub(crate) fn start(options: &BrokerOptions, input: impl Read) -> Result<Broker, String> {
    let credentials = read_brokered(input)?;
    let broker = Broker::new(credentials, options.extra_roots.as_deref()).map_err(|e| e.to_string())?;
    write_bundle(&options.ca_bundle, &broker.ca_pem(), options.base_bundle.as_deref())?;
    Ok(broker)
}

/// Writes the CA certificate, then the base bundle, to `path` (another name, then renamed),
/// mode 0644: the lease reads it.
fn write_bundle(path: &Path, ca_pem: &str, base: Option<&Path>) -> Result<(), String> {
    let mut text = ca_pem.to_owned();
    if let Some(base) = base {
        let file = std::fs::File::open(base).map_err(|e| format!("cannot open {}: {e}", base.display()))?;
        let mut more = String::new();
        file.take(MAX_BUNDLE_BYTES + 1)
            .read_to_string(&mut more)
            .map_err(|e| format!("cannot read {}: {e}", base.display()))?;
        if more.len() as u64 > MAX_BUNDLE_BYTES {
            return Err(format!("{} is larger than {MAX_BUNDLE_BYTES} bytes", base.display()));
        }
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&more);
    }
    let mut next = path.as_os_str().to_owned();
    next.push(".next");
    let next = PathBuf::from(next);
    let write = |p: &Path| -> std::io::Result<()> {
        std::fs::write(p, text.as_bytes())?;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644))?;
        std::fs::rename(p, path)
    };
    write(&next).map_err(|e| format!("cannot write the CA bundle {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_read_from_stdin_within_bounds_and_errors_never_show_them() {
        let good = br#"[{"host":"api.test","port":443,"header":"authorization","value":"Bearer s3cr3t"}]"#;
        let list = read_brokered(&good[..]).unwrap();
        assert_eq!(list[0].value.expose(), "Bearer s3cr3t");
        assert!(!format!("{list:?}").contains("s3cr3t"));
        // A wrong type would make serde quote the value: only line and column are said.
        let bad = br#"[{"host":"api.test","port":"s3cr3t","header":"a","value":"b"}]"#;
        assert_eq!(
            read_brokered(&bad[..]),
            Err("the credentials on stdin are not a JSON list of credentials (line 1, column 35)".into())
        );
        let newline = b"[{\"host\":\"api.test\",\"port\":443,\"header\":\"a\",\"value\":\"s3cr3t\\r\\nx: y\"}]";
        assert_eq!(
            read_brokered(&newline[..]),
            Err("credential 0 on stdin has a bad host, port, header name or header value".into())
        );
        assert_eq!(
            read_brokered(&b"[]"[..]),
            Err("the credentials on stdin are an empty list".into())
        );
        let huge = vec![b' '; MAX_CREDENTIALS_BYTES as usize + 1];
        assert_eq!(
            read_brokered(&huge[..]),
            Err("the credentials on stdin are larger than 1048576 bytes".into())
        );
    }

    #[test]
    fn brokering_options_are_checked_with_exact_texts() {
        let base: Vec<String> = [
            "--proxy-socket",
            "p",
            "--dns-socket",
            "d",
            "--policy",
            "f",
            "--upstream",
            "192.0.2.1:53",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let with = |more: &[&str]| {
            let mut args = base.clone();
            args.extend(more.iter().map(|s| (*s).to_owned()));
            crate::standalone::Options::parse(&args)
        };
        assert_eq!(with(&[]).unwrap().credentials, None);
        assert_eq!(
            with(&[
                "--credentials-stdin",
                "--ca-bundle",
                "/b.pem",
                "--extra-roots",
                "/r.pem"
            ])
            .unwrap()
            .credentials,
            Some(BrokerOptions {
                ca_bundle: "/b.pem".into(),
                base_bundle: None,
                extra_roots: Some("/r.pem".into()),
            })
        );
        assert_eq!(
            with(&["--credentials-stdin"]).unwrap_err(),
            "--credentials-stdin needs --ca-bundle FILE (where the lease's CA bundle is written)"
        );
        assert_eq!(
            with(&["--extra-roots", "/r.pem"]).unwrap_err(),
            "--ca-bundle, --base-bundle and --extra-roots are for credential brokering: add --credentials-stdin"
        );
    }

    #[test]
    fn the_bundle_holds_the_ca_then_the_base_roots_and_is_readable_by_the_lease() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base.pem");
        std::fs::write(&base, "BASE ROOTS\n").unwrap();
        let path = dir.path().join("bundle.pem");
        write_bundle(&path, "CA\n", Some(&base)).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "CA\nBASE ROOTS\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        assert!(!dir.path().join("bundle.pem.next").exists());
    }
}
