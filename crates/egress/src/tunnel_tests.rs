//! The ClientHello reader and the SNI binding, on real ClientHellos from a rustls client.

use std::sync::Arc;

use super::*;

/// The first flight of a rustls client connecting to `name` (SNI present for names).
fn client_hello(name: &str) -> Vec<u8> {
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), server).unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}

fn read(bytes: &[u8], max: usize) -> Result<(Vec<u8>, Option<String>), HelloRefusal> {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut r = bytes;
    rt.block_on(read_hello(&mut r, max))
}

#[test]
fn the_server_name_is_read_and_every_byte_kept_for_upstream() {
    let hello = client_hello("TLS.test");
    let (seen, sni) = read(&hello, 32 * 1024).unwrap();
    assert_eq!(sni.as_deref(), Some("tls.test"));
    assert_eq!(seen, hello);
    let (_, sni) = read(&client_hello("198.51.100.2"), 32 * 1024).unwrap();
    assert_eq!(sni, None, "rustls sends no SNI for an address");
}

#[test]
fn bad_short_and_long_hellos_are_refused_with_their_texts() {
    let hello = client_hello("tls.test");
    assert_eq!(
        read(&hello, 100).unwrap_err().to_string(),
        "the ClientHello is longer than 100 bytes"
    );
    assert_eq!(
        read(&hello[..20], 32 * 1024).unwrap_err().to_string(),
        "no whole ClientHello arrived"
    );
    let e = read(b"GET / HTTP/1.1\r\nHost: tls.test\r\n\r\n", 32 * 1024).unwrap_err();
    assert!(matches!(e, HelloRefusal::NotTls(_)), "{e}");
    assert!(
        e.to_string()
            .starts_with("the tunnel does not start with a TLS ClientHello ("),
        "{e}"
    );
}

#[test]
fn the_server_name_must_be_the_connect_host() {
    let name = Target::Name("tls.test".to_string());
    let ip = Target::Ip("198.51.100.2".parse().unwrap());
    assert_eq!(sni_fits(&name, Some("tls.test")), Ok(()));
    assert_eq!(sni_fits(&name, Some("TLS.test.")), Ok(()));
    assert_eq!(sni_fits(&ip, None), Ok(()));
    assert_eq!(
        sni_fits(&name, Some("other.test")).unwrap_err().to_string(),
        "the TLS server name \"other.test\" does not match the CONNECT host \"tls.test\""
    );
    assert_eq!(
        sni_fits(&name, None).unwrap_err().to_string(),
        "the ClientHello names no server, but CONNECT named \"tls.test\""
    );
    assert_eq!(
        sni_fits(&ip, Some("tls.test")).unwrap_err().to_string(),
        "the TLS server name \"tls.test\" does not match the CONNECT host \"198.51.100.2\""
    );
}
