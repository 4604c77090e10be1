//! Network under a policy on the sandbox driver (contract section 10), through the host and
//! the reference worker on real `bwrap`, against a test host on this machine (a network
//! namespace with an HTTP and a DNS server, `envrt_test_support::network`): a lease under
//! a policy reaches exactly what it allows through its own egress proxy, names resolve only
//! under the policy (an unlisted name never reaches the test host's DNS server), programs
//! that ignore the proxy reach nothing, live updates take effect, and the proxy and the
//! forwarder end with the lease. Needs root for `ip netns`; fails instead of skipping with
//! `ENVRT_REQUIRE_NETWORK=1`.

mod host_common;

use std::sync::Arc;

use envrt_driver_plugin_sandbox::{SandboxDriver, SandboxOptions};
use envrt_runtime_core::network::{Egress, EnvironmentNetwork, NetworkConfig, Policy};
use envrt_runtime_core::{AcquireRequest, Environment, EnvironmentRuntime, ExecuteRequest, Lease, LeaseStatus};
use envrt_test_support::network::{HOST, TestHost};
use host_common::*;

const BODY: &str = "hello from the test host";

fn policy(egress: Egress, allow: &[&str]) -> Policy {
    Policy::new(egress, allow).unwrap()
}

/// The supervisor built beside the reference worker: the worker runs it as the forwarder.
fn require_agent() {
    let agent = std::path::Path::new(reference_worker().unwrap()).with_file_name("envrt-agent");
    assert!(
        agent.is_file(),
        "{} is not built; run `cargo build -p envrt-agent`",
        agent.display()
    );
}

async fn driver(root: &TempDir, options: SandboxOptions) -> Option<Arc<SandboxDriver>> {
    let manifest = reference_manifest(&root.join("leases"))?;
    Some(start(manifest, options).await)
}

/// A runtime with the environment `egress` under `network`.
async fn runtime(driver: Arc<SandboxDriver>, network: NetworkConfig) -> EnvironmentRuntime {
    use envrt_runtime_core::EnvironmentDriver as _;
    let runtime = EnvironmentRuntime::new();
    let key = driver.key().to_owned();
    runtime.register_driver(driver);
    let mut env = Environment::new("egress", "Sandbox", key);
    env.network = Some(EnvironmentNetwork::Policy(network));
    runtime.put_environment(env).await.unwrap();
    runtime
}

/// `sh -c script` in the lease: exit code, stdout, stderr.
async fn sh(runtime: &EnvironmentRuntime, lease: &Lease, script: &str) -> (i32, String, String) {
    let r = bounded(
        "execute",
        runtime.execute(&lease.id, ExecuteRequest::new("sh", ["-c", script])),
    )
    .await
    .unwrap();
    (
        r.exit_code.unwrap_or(-1),
        String::from_utf8_lossy(&r.stdout).into_owned(),
        String::from_utf8_lossy(&r.stderr).into_owned(),
    )
}

/// Host processes whose command line contains every one of `words`.
fn processes_with(words: &[&str]) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline);
        if words.iter().all(|w| text.contains(w)) && alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// The lease's proxy (on the host, found by its sockets directory) and forwarder (the
/// init of its sandbox's pid namespace, found by the worker's record while it has one).
fn egress_processes(root: &TempDir, lease: &Lease) -> (Vec<u32>, Vec<u32>) {
    let dir = format!("/{}/sockets/", lease.id);
    let provider = lease.provider_lease_id.clone().unwrap();
    let record = root.join("leases").join(format!(".egress-{provider}/forwarder"));
    let forwarder = std::fs::read_to_string(record)
        .ok()
        .and_then(|text| text.split_whitespace().nth(1)?.parse::<u32>().ok())
        .filter(|pid| alive(*pid));
    (processes_with(&["envrt-egress", &dir]), forwarder.into_iter().collect())
}

/// Releases `lease` (which has a forwarder) and asserts that its proxy and forwarder end
/// with it.
async fn release_and_see_egress_end(runtime: &EnvironmentRuntime, root: &TempDir, lease: &Lease) {
    let (_, forwarders) = egress_processes(root, lease);
    assert_eq!(forwarders.len(), 1, "the lease has no forwarder");
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(
        egress_processes(root, lease),
        (vec![], vec![]),
        "the lease's egress outlived it"
    );
    assert!(
        wait_gone(forwarders[0], std::time::Duration::from_secs(10)).await,
        "the forwarder outlived the lease"
    );
}

/// What the forwarder `pid` (its sandbox's init) runs: its children's command lines, and
/// whether it is in a mount namespace of its own.
fn forwarder_sandbox(pid: u32) -> (Vec<String>, bool) {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    let lines = children
        .split_whitespace()
        .map(|child| {
            let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).replace('\0', " ").trim().to_owned()
        })
        .collect();
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
    (lines, ns(&pid.to_string()) != ns("self"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_under_a_policy_reaches_only_what_it_allows_through_its_egress_proxy() {
    let Some(host) = TestHost::new(
        &[("web.test", HOST), ("other.test", HOST), ("rebind.test", "10.200.77.2")],
        BODY,
    ) else {
        return;
    };
    require_agent();
    let root = TempDir::new("egress");
    let options = SandboxOptions {
        egress: Some(envrt_test_support::network::egress_binary()),
        egress_dns: Some(host.dns()),
        ..SandboxOptions::default()
    };
    let Some(driver) = driver(&root, options).await else {
        return;
    };
    let network = NetworkConfig::new(
        policy(Egress::Allow, &["web.test:80", "rebind.test"]),
        &["other.test:80"],
    )
    .unwrap();
    let runtime = runtime(driver, network).await;
    let env = runtime.environment("egress").await.unwrap().unwrap();
    assert_eq!(runtime.network_level(&env).unwrap().to_string(), "egress proxy (allow)");
    let lease = runtime
        .acquire_lease(AcquireRequest::new("egress", "acme"))
        .await
        .unwrap();
    let (proxies, forwarders) = egress_processes(&root, &lease);
    assert_eq!(
        (proxies.len(), forwarders.len()),
        (1, 1),
        "one proxy and one forwarder per lease"
    );
    // The forwarder runs in a sandbox of its own: bwrap's mount namespace, its binary and
    // the sockets at their places there, not the host's.
    let (inside, own_mounts) = forwarder_sandbox(forwarders[0]);
    assert!(own_mounts, "the forwarder shares the host's mount namespace");
    let root_of = |path: &str| std::path::PathBuf::from(format!("/proc/{}/root{path}", forwarders[0]));
    assert!(root_of("/usr/bin").is_dir(), "the forwarder's view has no /usr");
    for hidden in ["/etc/passwd", "/root", "/home", "/tmp"] {
        assert!(!root_of(hidden).exists(), "the forwarder sees the host's {hidden}");
    }
    assert_eq!(
        inside,
        vec![
            "/.envrt/agent --socket fwd.sock --forward tcp:127.0.0.1:3128=/.envrt/sockets/proxy.sock \
             --forward dns:127.0.0.1:53=/.envrt/sockets/dns.sock"
                .to_owned()
        ]
    );

    // The proxy variables and the resolver every command gets.
    let (_, out, _) = sh(
        &runtime,
        &lease,
        "echo $http_proxy $HTTPS_PROXY $no_proxy; cat /etc/resolv.conf",
    )
    .await;
    assert!(
        out.starts_with("http://127.0.0.1:3128 http://127.0.0.1:3128 localhost,127.0.0.1,::1\nnameserver 127.0.0.1\n"),
        "{out}"
    );
    // The allowed name, through the proxy the variables name.
    let (code, out, err) = sh(&runtime, &lease, "curl -sS -f http://web.test/").await;
    assert_eq!((code, out.as_str()), (0, BODY), "{err}");
    // An unlisted name, a raw address, a name that resolves into a private range, and a
    // port the entry does not list: each refused by the proxy.
    for url in [
        "http://other.test/".to_owned(),
        format!("http://{}/", host.address),
        "http://rebind.test/".to_owned(),
        "http://web.test:8080/".to_owned(),
    ] {
        let (code, _, err) = sh(&runtime, &lease, &format!("curl -sS -f {url}")).await;
        assert_eq!(code, 22, "{url} was reached: {err}");
        assert!(err.contains("403"), "{url}: {err}");
    }
    // Programs that ignore the proxy reach nothing: the namespace has no route.
    let (code, _, err) = sh(
        &runtime,
        &lease,
        &format!("curl -sS --noproxy '*' http://{}/", host.address),
    )
    .await;
    assert_eq!(code, 7, "a direct connection left the sandbox: {err}");
    // DNS under the same policy: the allowed name resolves to the address the proxy
    // resolved; an unlisted one is refused and never reaches the test host's server.
    let (code, out, _) = sh(&runtime, &lease, "getent hosts web.test").await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&host.address), "{out}");
    let (code, _, _) = sh(&runtime, &lease, "getent hosts exfil-secret.other.test").await;
    assert_ne!(code, 0);
    assert!(
        !host
            .asked()
            .iter()
            .any(|name| name.contains("exfil") || name == "other.test"),
        "{:?}",
        host.asked()
    );

    // A live update within grantable: other.test opens for new connections.
    let wider = policy(Egress::Allow, &["web.test:80", "other.test:80"]);
    let level = runtime.update_network_policy(&lease.id, &wider).await.unwrap();
    assert_eq!(level.to_string(), "egress proxy (allow)");
    let (code, out, err) = sh(&runtime, &lease, "curl -sS -f http://other.test/").await;
    assert_eq!((code, out.as_str()), (0, BODY), "{err}");
    // Down to none: nothing is reachable.
    runtime.update_network_policy(&lease.id, &Policy::none()).await.unwrap();
    let (code, _, err) = sh(&runtime, &lease, "curl -sS -f http://web.test/").await;
    assert_eq!(code, 22, "{err}");
    assert!(err.contains("403"), "{err}");

    // The forwarder killed (from the host: no command can see it): the lease runs nothing
    // until its policy is updated again, which starts it anew.
    for pid in &forwarders {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(*pid as i32).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
        assert!(wait_gone(*pid, std::time::Duration::from_secs(10)).await);
    }
    let err = runtime
        .execute(&lease.id, ExecuteRequest::new("true", Vec::<String>::new()))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "The network of lease {} is not running (its egress forwarder ended); update the lease's network policy to start it again",
            lease.provider_lease_id.clone().unwrap()
        )),
        "{err}"
    );
    runtime.update_network_policy(&lease.id, &wider).await.unwrap();
    let (code, out, err) = sh(&runtime, &lease, "curl -sS -f http://web.test/").await;
    assert_eq!((code, out.as_str()), (0, BODY), "{err}");

    // The proxy and the forwarder end with the lease.
    release_and_see_egress_end(&runtime, &root, &lease).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_proxy_binary_a_policy_that_opens_egress_is_refused() {
    let root = TempDir::new("no-egress");
    let options = SandboxOptions {
        egress: Some("/nonexistent/envrt-egress".into()),
        ..SandboxOptions::default()
    };
    let Some(driver) = driver(&root, options).await else {
        return;
    };
    use envrt_runtime_core::EnvironmentDriver as _;
    let runtime = EnvironmentRuntime::new();
    let key = driver.key().to_owned();
    runtime.register_driver(driver);
    let mut env = Environment::new("egress", "Sandbox", key);
    env.network = Some(EnvironmentNetwork::Policy(
        NetworkConfig::new(policy(Egress::Allow, &["web.test"]), &[]).unwrap(),
    ));
    let err = runtime.put_environment(env).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Network policy refused: driver \"sandbox\" cannot enforce egress = \"allow\" yet: its leases have no \
         network at all, so only egress = \"none\" is accepted"
    );
}

/// Brokered credentials on the sandbox, end to end: the host reads the secret and hands it
/// to the lease's `envrt-egress` over stdin; every sandbox of the lease gets the proxy's CA
/// bundle (read-only, in `SSL_CERT_FILE` and the other CA variables) and a placeholder, so
/// an ordinary TLS client (`curl`, verifying) reaches the credentialed test host, which
/// receives the real header; a host without a credential stays a plain tunnel that the
/// lease's CA cannot vouch for; the secret is in none of the sandbox's variables, processes
/// or files, nor in the worker's record of the lease's network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_brokered_credential_reaches_its_host_and_the_sandbox_trusts_the_lease_ca() {
    const SECRET: &str = "s3cr3t-5b1e07c2";
    let Some(mut host) = TestHost::new(&[("api.test", HOST), ("other.test", HOST)], BODY) else {
        return;
    };
    let test_ca = host.serve_https(&["api.test", "other.test"]).unwrap();
    require_agent();
    let root = TempDir::new("credential");
    let options = SandboxOptions {
        egress: Some(envrt_test_support::network::egress_binary()),
        egress_dns: Some(host.dns()),
        egress_roots: Some(test_ca),
        ..SandboxOptions::default()
    };
    let Some(driver) = driver(&root, options).await else {
        return;
    };
    let secrets = tempfile::tempdir().unwrap();
    let secret_file = secrets.path().join("token");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let network = NetworkConfig::new(policy(Egress::Allow, &["api.test:443", "other.test:443"]), &[])
        .unwrap()
        .with_credentials(&[envrt_runtime_core::network::RawCredential {
            host: "api.test".into(),
            header: "Authorization".into(),
            value: "Bearer {secret}".into(),
            secret: format!("file:{}", secret_file.display()),
            placeholder_env: Some("API_TOKEN".into()),
        }])
        .unwrap();
    let runtime = runtime(driver, network).await;
    let lease = runtime
        .acquire_lease(AcquireRequest::new("egress", "acme"))
        .await
        .unwrap();

    // Every command: the bundle in every CA variable, and the placeholder.
    let (_, out, _) = sh(
        &runtime,
        &lease,
        "echo $SSL_CERT_FILE $REQUESTS_CA_BUNDLE $CURL_CA_BUNDLE $NODE_EXTRA_CA_CERTS $API_TOKEN",
    )
    .await;
    let bundle = "/.envrt/egress/ca-bundle.pem";
    assert_eq!(
        out.trim(),
        format!("{bundle} {bundle} {bundle} {bundle} envrt-credential-placeholder")
    );
    // A process session's process too (the lease's supervisor is a sandbox of the lease).
    let info = bounded(
        "spawn",
        runtime.spawn(
            &lease.id,
            envrt_runtime_core::SpawnRequest::new(["sh", "-c", "echo $SSL_CERT_FILE $API_TOKEN"]),
        ),
    )
    .await
    .unwrap();
    let mut output = runtime.output(&info.id.to_string(), &Default::default()).await.unwrap();
    let mut printed = Vec::new();
    while let Some(event) = bounded("output", output.next()).await.unwrap() {
        if let envrt_runtime_core::OutputEvent::Chunk(chunk) = event {
            printed.extend(chunk.bytes);
        }
    }
    assert_eq!(
        String::from_utf8_lossy(&printed),
        format!("{bundle} envrt-credential-placeholder\n")
    );
    // The bundle: certificates only (the CA's key stays in the proxy), read-only.
    let (code, out, err) = sh(
        &runtime,
        &lease,
        &format!("head -n 1 {bundle}; grep -c 'PRIVATE KEY' {bundle}; echo x >> {bundle}"),
    )
    .await;
    assert_eq!(out, "-----BEGIN CERTIFICATE-----\n0\n");
    assert_ne!(code, 0, "the lease could write its CA bundle: {err}");

    // An ordinary verifying client: the credentialed host through the lease's CA, with
    // the placeholder as its header; the proxy puts the secret in.
    let (code, out, err) = sh(
        &runtime,
        &lease,
        "curl -sS -f -H \"Authorization: Bearer $API_TOKEN\" https://api.test/",
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "hello https from api.test"), "{err}");
    // Another allowed host is a plain tunnel: the lease's CA cannot vouch for it (curl's
    // "SSL certificate problem").
    let (code, _, err) = sh(&runtime, &lease, "curl -sS https://other.test/").await;
    assert_eq!(code, 60, "{err}");
    let seen: Vec<serde_json::Value> = host
        .https_requests()
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        serde_json::Value::Array(seen),
        serde_json::json!([
            {"host": "api.test", "path": "/", "authorization": format!("Bearer {SECRET}")},
        ])
    );

    // The secret: nowhere in the sandbox, nor in the worker's record.
    let (_, out, _) = sh(
        &runtime,
        &lease,
        "env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null; \
         grep -rl s3cr3t /.envrt \"$HOME\" /tmp /etc 2>/dev/null; echo scanned",
    )
    .await;
    assert!(out.ends_with("scanned\n"), "{out}");
    assert!(!out.contains(SECRET), "the secret reached the sandbox: {out}");
    let provider = lease.provider_lease_id.clone().unwrap();
    let record = root.join("leases").join(format!(".egress-{provider}"));
    let mut files = 0;
    for entry in std::fs::read_dir(&record).unwrap().flatten() {
        if entry.path().is_file() {
            files += 1;
            let text = std::fs::read(entry.path()).unwrap();
            assert!(
                !String::from_utf8_lossy(&text).contains(SECRET),
                "{}",
                entry.path().display()
            );
        }
    }
    assert!(files >= 4, "the record {} lost its files", record.display());

    release_and_see_egress_end(&runtime, &root, &lease).await;
    assert!(!record.exists(), "the record outlived the lease");
}

/// A forwarder that never says it listens: the acquire is refused with the exact text once
/// the worker's 10 s bound passes, and nothing of the forwarder's sandbox is left running
/// (killing the `bwrap` that holds it does not end what runs inside; the worker ends the
/// sandbox's init too). The supervisor binary is replaced, for this worker only, by a
/// script that sleeps instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarder_that_never_listens_is_refused_and_leaves_nothing_running() {
    let Some(host) = TestHost::new(&[("web.test", HOST)], BODY) else {
        return;
    };
    require_agent();
    let root = TempDir::new("mute-forwarder");
    let Some(mut manifest) = reference_manifest(&root.join("leases")) else {
        return;
    };
    let mute = root.join("mute-agent");
    std::fs::write(&mute, "#!/bin/sh\nexec /bin/sleep 6137\n").unwrap();
    std::fs::set_permissions(&mute, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    manifest
        .worker
        .env
        .insert("ENVRT_AGENT".to_owned(), mute.display().to_string());
    let options = SandboxOptions {
        egress: Some(envrt_test_support::network::egress_binary()),
        egress_dns: Some(host.dns()),
        ..SandboxOptions::default()
    };
    let driver = start(manifest, options).await;
    let network = NetworkConfig::new(policy(Egress::Allow, &["web.test:80"]), &[]).unwrap();
    let runtime = runtime(driver, network).await;
    let err = runtime
        .acquire_lease(AcquireRequest::new("egress", "acme"))
        .await
        .unwrap_err();
    let text = err.to_string();
    let provider = text
        .strip_prefix("The egress forwarder of lease ")
        .and_then(|rest| rest.strip_suffix(" did not start: it did not listen within 10 s"))
        .unwrap_or_else(|| panic!("not the refusal of a forwarder that never listens: {text}"));
    assert!(provider.starts_with("sbx-") && provider.len() == 40, "{text}");
    assert_eq!(
        pids_with_argv(&["/bin/sleep", "6137"]),
        Vec::<u32>::new(),
        "the forwarder's sandbox outlived the refusal"
    );
}
