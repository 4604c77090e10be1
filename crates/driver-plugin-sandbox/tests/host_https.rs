//! `http.fetch` to `https://` for a real SDK worker (tests/fixtures/sdk-host-calls): a
//! local TLS server whose certificate a test CA signed is reached when that CA is one of
//! the plugin's `http_roots`, and refused with its exact text when it is not, or when the
//! certificate names another host (full verification: chain and name).

mod host_calls_common;
mod host_common;

use std::sync::Arc;

use envrt_driver_plugin_sandbox::{SandboxOptions, WorkerCallOptions};
use envrt_runtime_core::LeaseStatus;
use host_calls_common::*;
use host_common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// A test CA (its PEM) and a TLS server on 127.0.0.1 with a leaf for `names`, signed by it.
/// The server answers every request `200` with `X-Echo: GET PATH` and the body `secure`.
async fn tls_server(names: &[&str]) -> (String, u16) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "envrt test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let leaf = rcgen::CertificateParams::new(names)
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&request);
                let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nX-Echo: GET {path}\r\nConnection: close\r\n\r\nsecure"
                );
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (ca.pem(), port)
}

fn options(port: u16, roots: Vec<std::path::PathBuf>) -> SandboxOptions {
    SandboxOptions {
        worker_calls: WorkerCallOptions {
            http_allow: vec![format!("localhost:{port}")],
            http_roots: roots,
            ..WorkerCallOptions::default()
        },
        ..SandboxOptions::default()
    }
}

#[tokio::test]
async fn an_https_fetch_is_verified_against_the_plugins_extra_roots() {
    let (ca, port) = tls_server(&["localhost"]).await;
    let dir = tempfile::tempdir().unwrap();
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, ca).unwrap();
    let url = format!("https://localhost:{port}/secure?x=1");
    let calls = json!([{"op": "http.fetch", "url": url}]);

    let (driver, runtime, lease) = lease_on(manifest(None), options(port, vec![ca_path.clone()])).await;
    let out = bounded("trusted", run(&runtime, &lease, &calls)).await;
    assert_eq!(
        out[0]["ok"],
        json!({"status": 200, "statusText": "OK", "echo": "GET /secure?x=1", "body": "secure"}),
        "{}",
        out[0]
    );
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;

    // Without the test CA, the same server is not trusted.
    let (driver, runtime, lease) = lease_on(manifest(None), options(port, Vec::new())).await;
    let out = bounded("untrusted", run(&runtime, &lease, &calls)).await;
    assert_eq!(
        out[0]["error"],
        Value::String(format!(
            "\"http.fetch\" to localhost:{port} failed: TLS: invalid peer certificate: UnknownIssuer"
        ))
    );
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

#[tokio::test]
async fn an_https_fetch_to_a_certificate_of_another_name_is_refused() {
    let (ca, port) = tls_server(&["other.test"]).await;
    let dir = tempfile::tempdir().unwrap();
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, ca).unwrap();
    let (driver, runtime, lease) = lease_on(manifest(None), options(port, vec![ca_path])).await;
    let calls = json!([{"op": "http.fetch", "url": format!("https://localhost:{port}/")}]);
    let out = bounded("wrong name", run(&runtime, &lease, &calls)).await;
    let error = out[0]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error: {}", out[0]));
    assert!(
        error.starts_with(&format!(
            "\"http.fetch\" to localhost:{port} failed: TLS: invalid peer certificate: certificate not valid for name \"localhost\""
        )),
        "{error}"
    );
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

#[tokio::test]
async fn an_extra_root_that_is_no_certificate_refuses_https_with_its_text() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let (driver, runtime, lease) = lease_on(manifest(None), options(443, vec![junk.clone()])).await;
    let calls = json!([{"op": "http.fetch", "url": "https://localhost:443/"}]);
    let out = bounded("junk root", run(&runtime, &lease, &calls)).await;
    assert_eq!(
        out[0]["error"],
        Value::String(format!(
            "\"http.fetch\": https:// is not available: {} holds no PEM certificate",
            junk.display()
        ))
    );
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}
