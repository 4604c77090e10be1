//! TLS for `http.fetch` to `https://`: rustls with full verification (chain to a trusted
//! root, the URL's host name, validity dates) against the system's CA bundle plus the
//! plugin's own extra roots (`http_roots`, PEM files). Built once per plugin.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// Where Linux distributions keep the system's CA bundle (Debian, Fedora, Alpine).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read the trusted roots in {}: {e}", path.display()))?
        .collect();
    let certs = certs.map_err(|e| format!("cannot read the trusted roots in {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// The client configuration: the first system bundle found, plus every certificate of
/// `extra`. An extra file that cannot be read, or one that holds no certificate, is an
/// error; no root at all is an error too (nothing could be verified).
pub(super) fn client_config(extra: &[PathBuf]) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(bundle) = SYSTEM_BUNDLES.iter().map(Path::new).find(|p| p.is_file()) {
        // A system bundle may carry certificates webpki cannot parse; the rest still count.
        let _ = roots.add_parsable_certificates(certificates(bundle).unwrap_or_default());
    }
    for path in extra {
        for cert in certificates(path)? {
            roots
                .add(cert)
                .map_err(|e| format!("{} is not a usable trusted root: {e}", path.display()))?;
        }
    }
    if roots.is_empty() {
        return Err("no trusted roots: no system CA bundle and no http_roots".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
