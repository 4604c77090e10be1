//! Credential brokering by the `envrt-egress` process, as a driver runs it: the secret goes
//! in on stdin, the lease trusts only the CA bundle the process writes, the real header
//! reaches the credentialed test host (an HTTPS server with a test CA in a namespace of its
//! own, which records every request), and the secret reaches nothing else: not another
//! host, not a redirect's target, not the command line, the bundle, the policy file or the
//! log. Needs root for `ip netns`; fails instead of skipping with `ENVRT_REQUIRE_NETWORK=1`.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use support::servers::{self, Answer};
use support::{Net, SRV};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

const BIN: &str = env!("CARGO_BIN_EXE_envrt-egress");
const SECRET: &str = "s3cr3t-7f0c2b9e";

/// One request as the test host saw it.
#[derive(Clone, Debug)]
struct Seen {
    host: String,
    path: String,
    authorization: Option<String>,
}

/// A test CA and an HTTPS server on `l` with a leaf of it for `names`, recording requests.
/// `/redirect` answers 302 to `https://other.test/`; anything else `hello from HOST`.
fn recording_https(l: std::net::TcpListener, names: &[&str]) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "envrt test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let l = tokio::net::TcpListener::from_std(l).unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let (acceptor, log) = (acceptor.clone(), log.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else { return };
                let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let log = log.clone();
                    async move {
                        let header = |n: &str| req.headers().get(n).map(|v| v.to_str().unwrap().to_owned());
                        let host = header("host").unwrap_or_default();
                        log.lock().unwrap().push(Seen {
                            host: host.clone(),
                            path: req.uri().path().to_owned(),
                            authorization: header("authorization"),
                        });
                        let mut resp = Response::new(Full::new(Bytes::from(format!("hello from {host}"))));
                        if req.uri().path() == "/redirect" {
                            *resp.status_mut() = hyper::StatusCode::FOUND;
                            resp.headers_mut()
                                .insert("location", "https://other.test/".parse().unwrap());
                        }
                        Ok::<_, std::convert::Infallible>(resp.map(|b| b.boxed()))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (ca.pem(), seen)
}

/// A child process killed when dropped, so that a failed assertion leaves no proxy behind.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The proxy process with brokering: its sockets, bundle and log in `dir`; the credentials
/// written to its stdin.
fn start_proxy(dir: &Path, extra_roots: Option<&Path>, credentials: &str) -> (Guard, PathBuf) {
    let proxy = dir.join("proxy.sock");
    std::fs::write(
        dir.join("policy.json"),
        r#"{"egress":"allow","allow":["api.test:443","other.test:443"]}"#,
    )
    .unwrap();
    let mut command = Command::new(BIN);
    command
        .arg("--proxy-socket")
        .arg(&proxy)
        .arg("--dns-socket")
        .arg(dir.join("dns.sock"))
        .arg("--policy")
        .arg(dir.join("policy.json"))
        .args(["--upstream", &format!("{SRV}:53"), "--credentials-stdin", "--ca-bundle"])
        .arg(dir.join("ca-bundle.pem"))
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("egress.log")).unwrap());
    if let Some(roots) = extra_roots {
        command.arg("--extra-roots").arg(roots);
    }
    let mut child = Guard(command.spawn().unwrap());
    let mut stdin = child.0.stdin.take().unwrap();
    stdin.write_all(credentials.as_bytes()).unwrap();
    drop(stdin);
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(
        line.trim_end(),
        format!("envrt-egress listening on {}", proxy.display())
    );
    (child, proxy)
}

/// CONNECT `target` over the proxy's unix socket.
async fn connect(proxy: &Path, target: &str) -> (UnixStream, Answer) {
    let mut s = UnixStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let a = servers::read_answer(&mut s).await;
    (s, a)
}

/// A TLS client trusting exactly the certificates in the PEM text `roots`.
fn client(roots: &str) -> tokio_rustls::TlsConnector {
    let mut store = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(roots.as_bytes()) {
        store.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

fn name(host: &str) -> ServerName<'static> {
    ServerName::try_from(host.to_owned()).unwrap()
}

/// A GET with the lease's placeholder in `Authorization`.
async fn get<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(s: &mut S, host: &str, path: &str) -> Answer {
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\n\r\n",
        envrt_egress::PLACEHOLDER
    );
    s.write_all(req.as_bytes()).await.unwrap();
    servers::read_answer(s).await
}

fn credentials_json() -> String {
    let raw = envrt_egress::RawCredential {
        host: "api.test".into(),
        header: "Authorization".into(),
        value: "Bearer {secret}".into(),
        secret: "env:TEST_TOKEN".into(),
        placeholder_env: Some("TEST_TOKEN".into()),
    };
    let brokered = envrt_egress::Credential::parse(0, &raw)
        .unwrap()
        .resolve(0, |n| (n == "TEST_TOKEN").then(|| SECRET.to_owned()))
        .unwrap();
    serde_json::to_string(&[brokered]).unwrap()
}

fn contains(path: &Path, needle: &str) -> bool {
    String::from_utf8_lossy(&std::fs::read(path).unwrap()).contains(needle)
}

#[test]
fn a_brokered_credential_reaches_its_host_only_and_never_the_lease_side() {
    let Some(net) = Net::new() else { return };
    net.run(|srv| async move {
        let (test_ca, seen) = recording_https(srv.tcp(&format!("{SRV}:443")), &["api.test", "other.test", "evil.test"]);
        let _dns = servers::dns_server(
            srv.udp(&format!("{SRV}:53")),
            &[("api.test", SRV), ("other.test", SRV), ("evil.test", SRV)],
        );
        let dir = tempfile::tempdir().unwrap();
        let roots = dir.path().join("test-ca.pem");
        std::fs::write(&roots, &test_ca).unwrap();
        let (child, proxy) = start_proxy(dir.path(), Some(&roots), &credentials_json());
        let bundle = std::fs::read_to_string(dir.path().join("ca-bundle.pem")).unwrap();
        let lease = client(&bundle);

        // The credentialed host: the lease's placeholder is replaced by the real value.
        let (s, a) = connect(&proxy, "api.test:443").await;
        assert_eq!(a.status, 200);
        let mut tls = lease.connect(name("api.test"), s).await.unwrap();
        let a = get(&mut tls, "api.test", "/").await;
        assert_eq!((a.status, a.body.as_str()), (200, "hello from api.test"));
        let last = seen.lock().unwrap().last().cloned().unwrap();
        assert_eq!(last.authorization.as_deref(), Some(format!("Bearer {SECRET}").as_str()));
        // The same TLS connection may not be used for another host.
        let a = get(&mut tls, "other.test", "/").await;
        assert_eq!(
            (a.status, a.body.as_str()),
            (
                403,
                "envrt egress: refused: the Host header \"other.test\" does not match the CONNECT host \"api.test\"\n"
            )
        );
        // A redirect comes back to the lease; the proxy does not follow it.
        let before = seen.lock().unwrap().len();
        let a = get(&mut tls, "api.test", "/redirect").await;
        assert_eq!(a.status, 302);
        let after: Vec<Seen> = seen.lock().unwrap()[before..].to_vec();
        assert_eq!(after.len(), 1, "{after:?}");
        assert_eq!(after[0].path, "/redirect");
        drop(tls);

        // Another allowed host is a plain tunnel: the lease's CA cannot vouch for it (the
        // proxy does not intercept), and what the lease sends is what arrives.
        let (s, a) = connect(&proxy, "other.test:443").await;
        assert_eq!(a.status, 200);
        let refused = lease.connect(name("other.test"), s).await.unwrap_err();
        assert!(refused.to_string().contains("UnknownIssuer"), "{refused}");
        let (s, _) = connect(&proxy, "other.test:443").await;
        let mut tls = client(&test_ca).connect(name("other.test"), s).await.unwrap();
        let a = get(&mut tls, "other.test", "/").await;
        assert_eq!((a.status, a.body.as_str()), (200, "hello from other.test"));
        drop(tls);

        // A denied host is refused before anything is sent; plain http to the credentialed
        // host is refused; a ClientHello naming another host than CONNECT gets nothing.
        let (_, a) = connect(&proxy, "evil.test:443").await;
        assert_eq!(
            (a.status, a.body.as_str()),
            (403, "envrt egress: refused: host \"evil.test\" is not in the allow list\n")
        );
        let mut s = UnixStream::connect(&proxy).await.unwrap();
        let a = get(&mut s, "api.test", "http://api.test/").await;
        assert_eq!(
            (a.status, a.body.as_str()),
            (
                403,
                "envrt egress: refused: host \"api.test\" carries a brokered credential, so it is reached only over https (CONNECT); plain http is refused\n"
            )
        );
        let before = seen.lock().unwrap().len();
        let (s, _) = connect(&proxy, "api.test:443").await;
        assert!(client(&test_ca).connect(name("other.test"), s).await.is_err());
        assert_eq!(seen.lock().unwrap().len(), before);

        // The secret reached api.test only, and nothing on the lease's side holds it.
        for request in seen.lock().unwrap().iter() {
            let has = request.authorization.as_deref().is_some_and(|a| a.contains(SECRET));
            assert_eq!(has, request.host == "api.test", "{request:?}");
        }
        assert!(!bundle.contains(SECRET));
        assert!(!bundle.contains("PRIVATE KEY"), "the CA's key left the proxy");
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", child.0.id())).unwrap();
        assert!(!String::from_utf8_lossy(&cmdline).contains(SECRET));
        assert!(!contains(Path::new(&format!("/proc/{}/environ", child.0.id())), SECRET));
        for file in ["egress.log", "policy.json", "ca-bundle.pem"] {
            assert!(!contains(&dir.path().join(file), SECRET), "{file}");
        }
        drop(child);

        // Without the test CA among its roots the proxy refuses to re-originate: the real
        // host is verified, not trusted blindly.
        let dir = tempfile::tempdir().unwrap();
        let (child, proxy) = start_proxy(dir.path(), None, &credentials_json());
        let bundle = std::fs::read_to_string(dir.path().join("ca-bundle.pem")).unwrap();
        let before = seen.lock().unwrap().len();
        let (s, _) = connect(&proxy, "api.test:443").await;
        let mut tls = client(&bundle).connect(name("api.test"), s).await.unwrap();
        let a = get(&mut tls, "api.test", "/").await;
        assert_eq!(
            (a.status, a.body.as_str()),
            (
                502,
                format!(
                    "envrt egress: cannot reach \"api.test\" ({SRV}:443) over verified TLS: invalid peer certificate: UnknownIssuer\n"
                )
                .as_str()
            )
        );
        assert_eq!(seen.lock().unwrap().len(), before);
        drop(child);
    });
}

#[test]
fn bad_credentials_on_stdin_stop_the_process_with_a_text_that_does_not_show_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.json"), r#"{"egress":"none"}"#).unwrap();
    let mut child = Command::new(BIN)
        .arg("--proxy-socket")
        .arg(dir.path().join("p.sock"))
        .arg("--dns-socket")
        .arg(dir.path().join("d.sock"))
        .arg("--policy")
        .arg(dir.path().join("policy.json"))
        .args(["--upstream", "192.0.2.53:53", "--credentials-stdin", "--ca-bundle"])
        .arg(dir.path().join("b.pem"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let bad = format!(r#"[{{"host":"api.test","port":"{SECRET}","header":"a","value":"b"}}]"#);
    child.stdin.take().unwrap().write_all(bad.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "envrt-egress: the credentials on stdin are not a JSON list of credentials (line 1, column 44)\n"
    );
    assert!(!dir.path().join("b.pem").exists());
    assert!(!dir.path().join("p.sock").exists());
}
