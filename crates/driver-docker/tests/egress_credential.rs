//! Brokered credentials on Docker (`[[environment.network.credential]]`), end to end: the
//! driver reads the secret on the host, hands it to the lease's `envrt-egress` over stdin,
//! and gives the container the proxy's CA bundle (in `SSL_CERT_FILE` and the other CA
//! variables) and a placeholder; a TLS client speaking through the lease's proxy socket and
//! trusting only the container's bundle reaches the credentialed test host (an HTTPS server
//! with a test CA in a network namespace, `TestHost::serve_https`), which receives the real
//! header; another host receives only the placeholder; the secret is in none of the
//! container's variables, files or processes, nor in the proxy's command line, policy file
//! or log, nor in the environment or lease records. Needs Docker, root for `ip netns`,
//! `openssl` and `python3`; fails instead of skipping with `ENVRT_REQUIRE_DOCKER=1` /
//! `ENVRT_REQUIRE_NETWORK=1`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Harness;
use envrt_runtime_core::network::{Egress, EnvironmentNetwork, NetworkConfig, Policy, RawCredential};
use envrt_runtime_core::{AcquireRequest, Environment, ExecuteRequest, Lease, LeaseStatus};
use envrt_test_support::network::{HOST, TestHost};
use serde_json::{Value, json};

const SECRET: &str = "s3cr3t-a91d44e0";

/// A TLS request through a unix-socket proxy: CONNECT, TLS trusting only `cafile`, one GET
/// with `Authorization: AUTH`. Prints `{"connect": STATUS}`, `{"tls": REASON}` or
/// `{"status": N, "body": TEXT}`.
const CLIENT: &str = r#"
import json, socket, ssl, sys
proxy, host, cafile, path, auth = sys.argv[1:6]
s = socket.socket(socket.AF_UNIX)
s.connect(proxy)
s.sendall(("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (host, host)).encode())
head = b""
while not head.endswith(b"\r\n\r\n"):
    b = s.recv(1)
    if not b:
        break
    head += b
status = head.split(b" ")[1].decode()
if status != "200":
    print(json.dumps({"connect": status}))
    sys.exit(0)
context = ssl.create_default_context(cafile=cafile)
try:
    t = context.wrap_socket(s, server_hostname=host)
except ssl.SSLError as e:
    print(json.dumps({"tls": str(e.reason)}))
    sys.exit(0)
t.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\nConnection: close\r\n\r\n" % (path, host, auth)).encode())
data = b""
while True:
    b = t.recv(65536)
    if not b:
        break
    data += b
head, _, body = data.partition(b"\r\n\r\n")
print(json.dumps({"status": int(head.split(b" ")[1]), "body": body.decode()}))
"#;

fn through(proxy: &Path, host: &str, cafile: &Path, path: &str, auth: &str) -> Value {
    let out = Command::new("python3")
        .args(["-c", CLIENT])
        .arg(proxy)
        .args([host])
        .arg(cafile)
        .args([path, auth])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

async fn sh(h: &Harness, lease: &Lease, script: &str) -> (i32, String) {
    let r = h
        .runtime
        .execute(&lease.id, ExecuteRequest::new("sh", ["-c", script]))
        .await
        .unwrap();
    (
        r.exit_code.unwrap_or(-1),
        String::from_utf8_lossy(&r.stdout).into_owned(),
    )
}

/// The host directory of the lease's supervisor and egress (its sockets, policy, log).
fn lease_dir(lease: &Lease) -> PathBuf {
    std::env::temp_dir()
        .join(envrt_driver_docker::DEFAULT_AGENT_DIR)
        .join(lease.metadata["containerName"].as_str().unwrap())
}

fn has_secret(bytes: &[u8]) -> bool {
    String::from_utf8_lossy(bytes).contains(SECRET)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_brokered_credential_reaches_the_test_host_and_never_the_container() {
    let Some(mut host) = TestHost::new(&[("api.test", HOST), ("other.test", HOST)], "plain") else {
        return;
    };
    let test_ca = host.serve_https(&["api.test", "other.test"]).unwrap();
    let roots = test_ca.clone();
    let dns = host.dns();
    let Some(h) = common::harness_with(move |config| {
        config.agent = Some(envrt_test_support::docker::static_agent());
        config.egress = Some(envrt_test_support::network::egress_binary());
        config.egress_dns = Some(dns);
        config.egress_roots = Some(roots);
    })
    .await
    else {
        return;
    };
    let secrets = tempfile::tempdir().unwrap();
    let secret_file = secrets.path().join("token");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let network = NetworkConfig::new(
        Policy::new(Egress::Allow, &["api.test:443", "other.test:443"]).unwrap(),
        &[],
    )
    .unwrap()
    .with_credentials(&[RawCredential {
        host: "api.test".into(),
        header: "Authorization".into(),
        value: "Bearer {secret}".into(),
        secret: format!("file:{}", secret_file.display()),
        placeholder_env: Some("API_TOKEN".into()),
    }])
    .unwrap();
    let config = json!({ "image": envrt_test_support::docker::image(), "network": "none" })
        .as_object()
        .cloned()
        .unwrap();
    let mut env = Environment::new(format!("env-{}", uuid::Uuid::new_v4()), "cred", "docker").with_config(config);
    env.network = Some(EnvironmentNetwork::Policy(network));
    h.runtime.put_environment(env.clone()).await.unwrap();
    let lease = h
        .runtime
        .acquire_lease(AcquireRequest::new(&env.id, "acme"))
        .await
        .unwrap();

    // The container: the bundle in every CA variable, the placeholder, no secret.
    let (code, out) = sh(
        &h,
        &lease,
        "echo $SSL_CERT_FILE $REQUESTS_CA_BUNDLE $CURL_CA_BUNDLE $NODE_EXTRA_CA_CERTS $API_TOKEN",
    )
    .await;
    let bundle_in_lease = "/.envrt/egress/ca-bundle.pem";
    assert_eq!(
        (code, out.trim()),
        (
            0,
            format!(
                "{bundle_in_lease} {bundle_in_lease} {bundle_in_lease} {bundle_in_lease} envrt-credential-placeholder"
            )
            .as_str()
        )
    );
    let (code, bundle) = sh(&h, &lease, &format!("cat {bundle_in_lease}")).await;
    assert_eq!(code, 0);
    assert!(bundle.starts_with("-----BEGIN CERTIFICATE-----"), "{bundle}");
    assert!(!bundle.contains("PRIVATE KEY"), "the CA's key reached the lease");
    let cafile = secrets.path().join("bundle-from-the-lease.pem");
    std::fs::write(&cafile, &bundle).unwrap();

    // Through the lease's own proxy socket, trusting only what the lease trusts.
    let proxy = lease_dir(&lease).join("egress/proxy.sock");
    let placeholder = "Bearer envrt-credential-placeholder";
    let a = through(&proxy, "api.test", &cafile, "/", placeholder);
    assert_eq!(a, json!({"status": 200, "body": "hello https from api.test"}));
    let a = through(&proxy, "api.test", &cafile, "/redirect", placeholder);
    assert_eq!(a["status"], 302, "{a}");
    // Another host is a plain tunnel: the lease's CA cannot vouch for it, and with the
    // host's real CA only the placeholder arrives.
    let a = through(&proxy, "other.test", &cafile, "/", placeholder);
    assert_eq!(a, json!({"tls": "CERTIFICATE_VERIFY_FAILED"}));
    let a = through(&proxy, "other.test", &test_ca, "/", placeholder);
    assert_eq!(a, json!({"status": 200, "body": "hello https from other.test"}));
    let seen: Vec<Value> = host
        .https_requests()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let expected = json!([
        {"host": "api.test", "path": "/", "authorization": format!("Bearer {SECRET}")},
        {"host": "api.test", "path": "/redirect", "authorization": format!("Bearer {SECRET}")},
        {"host": "other.test", "path": "/", "authorization": placeholder},
    ]);
    assert_eq!(
        Value::Array(seen),
        expected,
        "the redirect was followed or the secret went astray"
    );

    // Nowhere on the lease's side: its variables, its processes, its files.
    let (_, procs) = sh(&h, &lease, "cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null").await;
    assert!(!has_secret(procs.as_bytes()));
    assert!(procs.contains("API_TOKEN=envrt-credential-placeholder"));
    let every_file = lease_files(&h, &lease).await;
    assert!(every_file.len() > 100_000, "{} bytes of files", every_file.len());
    assert!(!has_secret(&every_file));
    // Nor on the host side: the proxy's command line, its policy and log, the records.
    let proxy_pid = std::fs::read_to_string(lease_dir(&lease).join("egress.pid")).unwrap();
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", proxy_pid.trim())).unwrap();
    assert!(!has_secret(&cmdline));
    let environ = std::fs::read(format!("/proc/{}/environ", proxy_pid.trim())).unwrap();
    assert!(!has_secret(&environ));
    for file in ["egress.json", "egress.log", "egress/ca-bundle.pem"] {
        assert!(
            !has_secret(&std::fs::read(lease_dir(&lease).join(file)).unwrap()),
            "{file}"
        );
    }
    let records = format!(
        "{} {}",
        serde_json::to_string(&h.runtime.environment(&env.id).await.unwrap()).unwrap(),
        serde_json::to_string(&h.runtime.lease(&lease.id).await.unwrap()).unwrap()
    );
    assert!(records.contains("file:"), "the reference is recorded: {records}");
    assert!(!has_secret(records.as_bytes()));

    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert!(!lease_dir(&lease).exists(), "the lease directory outlived the lease");
    h.finish().await;
}

/// Every regular file of the container outside /proc, /sys and /dev, concatenated.
async fn lease_files(h: &Harness, lease: &Lease) -> Vec<u8> {
    let r = h
        .runtime
        .execute(
            &lease.id,
            ExecuteRequest::new(
                "sh",
                [
                    "-c",
                    "find / \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o -type f -print 2>/dev/null | while read f; do cat \"$f\"; done 2>/dev/null",
                ],
            ),
        )
        .await
        .unwrap();
    r.stdout
}
