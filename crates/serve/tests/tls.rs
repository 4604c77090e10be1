//! TCP listeners: plain HTTP is refused beyond loopback with its exact text, and a TLS
//! listener serves the API (the same 401 body) to a client that trusts its certificate.

use std::sync::Arc;

use envrt::EnvironmentRuntime;
use envrt::sqlite::SqliteStore;
use envrt_serve::{Bound, Endpoint, Limits, Service};
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;

#[test]
fn a_plain_listener_beyond_loopback_is_refused_and_loopback_is_not() {
    let beyond = Endpoint::Tcp {
        addr: "10.1.2.3:8080".parse().unwrap(),
        tls: None,
    };
    assert_eq!(
        beyond.check().unwrap_err(),
        "envrt serve: --listen 10.1.2.3:8080 is beyond loopback; give --tls-cert and --tls-key to serve it over TLS"
    );
    for addr in ["127.0.0.1:8080", "[::1]:8080"] {
        let loopback = Endpoint::Tcp {
            addr: addr.parse().unwrap(),
            tls: None,
        };
        assert!(loopback.check().is_ok(), "{addr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_listener_serves_the_api_to_a_client_that_trusts_it() {
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, key.cert.pem()).unwrap();
    std::fs::write(&key_path, key.signing_key.serialize_pem()).unwrap();
    let store = SqliteStore::open(dir.path().join("envrt.db")).await.unwrap();
    let service = Service::new(
        Arc::new(EnvironmentRuntime::with_store(Arc::new(store.clone()))),
        store,
        Limits::default(),
    );
    let endpoint = Endpoint::Tcp {
        addr: "127.0.0.1:0".parse().unwrap(),
        tls: Some((cert_path, key_path)),
    };
    let bound = Bound::bind(&endpoint).await.unwrap();
    let url = bound.describe();
    let addr = url.strip_prefix("https://").expect("an https listener").to_owned();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(bound.serve(
        envrt_serve::app(service),
        async move {
            let _ = stopped.await;
        },
        std::time::Duration::from_secs(10),
    ));

    let mut roots = rustls::RootCertStore::empty();
    roots.add(key.cert.der().clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::get("/v1/leases")
        .header("host", "localhost")
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
        serde_json::json!({ "kind": "unauthenticated", "message": "A valid bearer token is required." })
    );
    drop(sender);
    let _ = stop.send(());
    assert!(served.await.unwrap());
}
