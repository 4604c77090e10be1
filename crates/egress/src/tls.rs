//! TLS for credential brokering: the lease's own certificate authority (made in the proxy
//! process, its private key never leaving that process's memory), a leaf certificate per
//! credentialed host minted by it, and the client side that re-originates TLS to the real
//! host with full verification (the system's roots plus configured extra roots).
//!
//! The CA is name-constrained to the credentialed hosts: even a copy of its key could not
//! vouch for any other name to a client that honours name constraints.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, GeneralSubtree, IsCa,
    KeyPair, KeyUsagePurpose, NameConstraints,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// Why the TLS side cannot be set up; each text pinned by a test.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen refused to make a certificate.
    #[error("cannot make the lease's certificate authority: {0}")]
    Ca(String),
    /// An extra roots file that cannot be used.
    #[error("extra roots {path}: {why}")]
    ExtraRoots {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
    /// No root at all to verify real hosts with.
    #[error("no trusted root certificates: the system has none and no extra roots were given")]
    NoRoots,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// One lease's certificate authority and the leaves it minted (one per credentialed host,
/// so their number is bounded by the credentials).
pub struct LeaseCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl std::fmt::Debug for LeaseCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseCa").finish_non_exhaustive()
    }
}

impl LeaseCa {
    /// A new CA (a fresh P-256 key) that may sign only for `hosts`.
    pub fn new(hosts: &[String]) -> Result<LeaseCa, TlsError> {
        let ca = |e: rcgen::Error| TlsError::Ca(e.to_string());
        let key = KeyPair::generate().map_err(ca)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(ca)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params
            .distinguished_name
            .push(DnType::CommonName, "envrt lease credential CA");
        params.name_constraints = Some(NameConstraints {
            permitted_subtrees: hosts.iter().map(|h| GeneralSubtree::DnsName(h.clone())).collect(),
            excluded_subtrees: Vec::new(),
        });
        let issuer = CertifiedIssuer::self_signed(params, key).map_err(ca)?;
        Ok(LeaseCa {
            issuer,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate, PEM (what the lease trusts).
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// The server side for `host`: a leaf for that one name, HTTP/1.1 only (minted once).
    pub fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, TlsError> {
        let mut leaves = self.leaves.lock().expect("leaf cache");
        if let Some(config) = leaves.get(host) {
            return Ok(config.clone());
        }
        let ca = |e: rcgen::Error| TlsError::Ca(e.to_string());
        let key = KeyPair::generate().map_err(ca)?;
        let mut params = CertificateParams::new(vec![host.to_owned()]).map_err(ca)?;
        params.distinguished_name.push(DnType::CommonName, host);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        let leaf = params.signed_by(&key, &self.issuer).map_err(ca)?;
        let chain = vec![leaf.der().clone(), self.cert_der()];
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Ca(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .map_err(|e| TlsError::Ca(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        leaves.insert(host.to_owned(), config.clone());
        Ok(config)
    }
}

/// The client side towards real hosts: full verification against the system's roots
/// (`rustls-native-certs`) and the PEM certificates in `extra_roots`, HTTP/1.1 only.
pub fn upstream_config(extra_roots: Option<&std::path::Path>) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        // A system root rustls cannot parse is skipped, as every rustls client does.
        let _ = roots.add(cert);
    }
    if let Some(path) = extra_roots {
        let shown = path.display().to_string();
        let bad = |why: String| TlsError::ExtraRoots {
            path: shown.clone(),
            why,
        };
        let text = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        let mut found = 0;
        for cert in rustls_pemfile_certs(&text).map_err(bad)? {
            roots.add(cert).map_err(|e| bad(e.to_string()))?;
            found += 1;
        }
        if found == 0 {
            return Err(bad("no PEM certificate in it".to_owned()));
        }
    }
    if roots.is_empty() {
        return Err(TlsError::NoRoots);
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Ca(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The certificates of a PEM text.
fn rustls_pemfile_certs(text: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not PEM certificates: {e}"))
}

/// The name rustls verifies the real host's certificate against.
pub(crate) fn server_name(host: &str) -> Option<ServerName<'static>> {
    ServerName::try_from(host.to_owned()).ok()
}
