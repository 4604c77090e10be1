//! Brokered credentials (`[[environment.network.credential]]`), the part every driver with
//! an egress proxy shares: the lease gets the CA bundle's path in the variables TLS clients
//! read and a placeholder in each `placeholder_env`; the secrets are read on the host when
//! the lease's proxy starts (from the environment of the process that starts it, or the
//! named file) and written to the proxy's stdin, never to its command line or a file. The
//! proxy makes the lease's CA and writes the bundle (the CA certificate, then the host's
//! roots) as [`CA_BUNDLE`] into the lease's sockets directory; each driver shows that file
//! to the lease read-only at [`LEASE_CA_BUNDLE`].

use std::path::{Path, PathBuf};

use envrt_driver_api::network::{Credential, EnvironmentNetwork};
use envrt_driver_api::{DriverError, Environment};

use super::ProxyCredentials;

/// The bundle's file name in the lease's sockets directory.
pub const CA_BUNDLE: &str = "ca-bundle.pem";
/// Where the lease sees the bundle (the directory Docker mounts the sockets directory on).
pub const LEASE_CA_BUNDLE: &str = "/.envrt/egress/ca-bundle.pem";
/// The host's roots, appended to the bundle so the lease's other TLS still verifies.
const HOST_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The variables the common TLS clients read a CA file from (OpenSSL and what links it,
/// Python requests, curl, Node).
pub const CA_VARIABLES: [&str; 4] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
];

/// The environment's credentials (none without a policy section).
pub fn of(environment: Option<&Environment>) -> &[Credential] {
    match environment.and_then(|e| e.network.as_ref()) {
        Some(EnvironmentNetwork::Policy(config)) => config.credentials(),
        _ => &[],
    }
}

/// The lease's variables for `credentials`: the CA bundle for every TLS client, and the
/// placeholders, as (name, value). Nothing when there are none.
pub fn lease_env(credentials: &[Credential]) -> Vec<(String, String)> {
    if credentials.is_empty() {
        return Vec::new();
    }
    let mut env: Vec<(String, String)> = CA_VARIABLES
        .iter()
        .map(|name| ((*name).to_owned(), LEASE_CA_BUNDLE.to_owned()))
        .collect();
    env.extend(envrt_driver_api::network::placeholder_env(credentials));
    env
}

/// Reads the secrets of `credentials` (none: `None`) for the proxy whose sockets are in
/// `sockets`; `extra_roots` are trusted besides the system's roots.
pub fn brokering(
    credentials: &[Credential],
    sockets: &Path,
    extra_roots: Option<&Path>,
) -> Result<Option<ProxyCredentials>, DriverError> {
    if credentials.is_empty() {
        return Ok(None);
    }
    let resolved = credentials
        .iter()
        .enumerate()
        .map(|(i, c)| c.resolve(i, |name| std::env::var(name).ok()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| DriverError::other(format!("cannot broker the lease's credentials: {e}")))?;
    let stdin = serde_json::to_vec(&resolved)
        .map_err(|_| DriverError::other("cannot broker the lease's credentials: they do not encode"))?;
    let mut args: Vec<std::ffi::OsString> = vec!["--credentials-stdin".into(), "--ca-bundle".into()];
    args.push(sockets.join(CA_BUNDLE).into());
    if Path::new(HOST_BUNDLE).is_file() {
        args.push("--base-bundle".into());
        args.push(HOST_BUNDLE.into());
    }
    if let Some(roots) = extra_roots {
        args.push("--extra-roots".into());
        args.push(PathBuf::from(roots).into());
    }
    Ok(Some(ProxyCredentials { args, stdin }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(secret: &str, placeholder: Option<&str>) -> Credential {
        Credential::parse(
            0,
            &envrt_driver_api::network::RawCredential {
                host: "api.test".into(),
                header: "Authorization".into(),
                value: "Bearer {secret}".into(),
                secret: secret.into(),
                placeholder_env: placeholder.map(str::to_owned),
            },
        )
        .unwrap()
    }

    #[test]
    fn the_lease_gets_the_bundle_in_every_ca_variable_and_only_placeholders() {
        assert!(lease_env(&[]).is_empty());
        let pair = |n: &str, v: &str| (n.to_owned(), v.to_owned());
        assert_eq!(
            lease_env(&[credential("env:T", Some("API_TOKEN"))]),
            vec![
                pair("SSL_CERT_FILE", "/.envrt/egress/ca-bundle.pem"),
                pair("REQUESTS_CA_BUNDLE", "/.envrt/egress/ca-bundle.pem"),
                pair("CURL_CA_BUNDLE", "/.envrt/egress/ca-bundle.pem"),
                pair("NODE_EXTRA_CA_CERTS", "/.envrt/egress/ca-bundle.pem"),
                pair("API_TOKEN", "envrt-credential-placeholder"),
            ]
        );
    }

    #[test]
    fn the_secret_goes_to_stdin_only_and_a_missing_one_is_named_without_a_value() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "s3cr3t\n").unwrap();
        let c = credential(&format!("file:{}", file.display()), None);
        let b = brokering(&[c], Path::new("/l/egress"), Some(Path::new("/roots.pem")))
            .unwrap()
            .unwrap();
        assert!(String::from_utf8_lossy(&b.stdin).contains("Bearer s3cr3t"));
        assert!(!format!("{:?}", b.args).contains("s3cr3t"));
        assert!(!format!("{b:?}").contains("s3cr3t"));
        assert_eq!(
            b.args[..3],
            ["--credentials-stdin", "--ca-bundle", "/l/egress/ca-bundle.pem"]
        );
        assert_eq!(b.args[b.args.len() - 2..], ["--extra-roots", "/roots.pem"]);
        let missing = credential("file:/nonexistent/envrt-token", None);
        assert_eq!(
            brokering(&[missing], Path::new("/l"), None).unwrap_err().to_string(),
            "cannot broker the lease's credentials: credential 0: the secret file:/nonexistent/envrt-token cannot be read: entity not found"
        );
    }
}
