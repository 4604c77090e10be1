//! Network under a policy on Docker (contract section 10), against a test host on this
//! machine (a network namespace with an HTTP and a DNS server, `envrt_test_support::network`):
//! a `network = "none"` container reaches exactly what its policy allows through its egress
//! proxy, names are resolved only under the policy (an unlisted name never reaches the test
//! host's DNS server), programs that ignore the proxy reach nothing, live updates take
//! effect, and the proxy ends with the lease. Needs Docker and root for `ip netns`; fails
//! instead of skipping with `ENVRT_REQUIRE_DOCKER=1` / `ENVRT_REQUIRE_NETWORK=1`.

mod common;

use common::Harness;
use envrt_runtime_core::network::{Egress, EnvironmentNetwork, NetworkConfig, Policy};
use envrt_runtime_core::{AcquireRequest, Environment, ExecuteRequest, Lease, LeaseStatus};
use envrt_test_support::network::{HOST, TestHost};
use serde_json::json;

const BODY: &str = "hello from the test host";

async fn harness(host: &TestHost) -> Option<Harness> {
    let dns = host.dns();
    common::harness_with(move |config| {
        config.agent = Some(envrt_test_support::docker::static_agent());
        config.egress = Some(envrt_test_support::network::egress_binary());
        config.egress_dns = Some(dns);
    })
    .await
}

fn policy(egress: Egress, allow: &[&str]) -> Policy {
    Policy::new(egress, allow).unwrap()
}

/// An environment of the test image with `[environment.network]`.
async fn environment(h: &Harness, network: NetworkConfig) -> Environment {
    let mut config = json!({ "image": envrt_test_support::docker::image() })
        .as_object()
        .cloned()
        .unwrap();
    config.insert("network".into(), "none".into());
    let id = format!("env-{}", uuid::Uuid::new_v4());
    let mut env = Environment::new(&id, "egress", "docker").with_config(config);
    env.network = Some(EnvironmentNetwork::Policy(network));
    h.runtime.put_environment(env.clone()).await.unwrap();
    env
}

/// `sh -c script` in the lease: exit code, stdout, stderr.
async fn sh(h: &Harness, lease: &Lease, script: &str) -> (i32, String, String) {
    let r = h
        .runtime
        .execute(&lease.id, ExecuteRequest::new("sh", ["-c", script]))
        .await
        .unwrap();
    (
        r.exit_code.unwrap_or(-1),
        String::from_utf8_lossy(&r.stdout).into_owned(),
        String::from_utf8_lossy(&r.stderr).into_owned(),
    )
}

/// Host processes of `envrt-egress` serving the lease's sockets.
fn proxies_of(lease: &Lease) -> Vec<u32> {
    let name = lease.metadata["containerName"].as_str().unwrap().to_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline);
        if text.contains("envrt-egress") && text.contains(&name) {
            found.push(pid);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_under_a_policy_reaches_only_what_it_allows_through_its_egress_proxy() {
    let Some(host) = TestHost::new(
        &[("web.test", HOST), ("other.test", HOST), ("rebind.test", "10.200.77.2")],
        BODY,
    ) else {
        return;
    };
    let Some(h) = harness(&host).await else { return };
    let network = NetworkConfig::new(
        policy(Egress::Allow, &["web.test:80", "rebind.test"]),
        &["other.test:80"],
    )
    .unwrap();
    let env = environment(&h, network).await;
    assert_eq!(
        h.runtime.network_level(&env).unwrap().to_string(),
        "egress proxy (allow)"
    );
    let lease = h
        .runtime
        .acquire_lease(AcquireRequest::new(&env.id, "acme"))
        .await
        .unwrap();
    assert_eq!(proxies_of(&lease).len(), 1, "one proxy per lease");

    // The allowed name, through the proxy the variables name.
    let (code, out, err) = sh(&h, &lease, "wget -q -O - http://web.test/").await;
    assert_eq!((code, out.as_str()), (0, BODY), "{err}");
    // An unlisted name, a raw address and a name that resolves into a private range.
    for url in [
        "http://other.test/",
        &format!("http://{}/", host.address),
        "http://rebind.test/",
    ] {
        let (code, _, err) = sh(&h, &lease, &format!("wget -q -O - {url}")).await;
        assert_eq!(code, 1, "{url} was reached");
        assert!(err.contains("403"), "{url}: {err}");
    }
    // A port the entry does not list.
    let (code, _, err) = sh(&h, &lease, "wget -q -O - http://web.test:8080/").await;
    assert_eq!(code, 1);
    assert!(err.contains("403"), "{err}");
    // Programs that ignore the proxy reach nothing: the container has no route.
    let (code, _, _) = sh(
        &h,
        &lease,
        &format!("wget -q -Y off -T 3 -O - http://{}/", host.address),
    )
    .await;
    assert_ne!(code, 0, "a direct connection left the container");
    // DNS under the same policy: the allowed name resolves to the address the proxy
    // resolved; an unlisted one is refused and never reaches the test host's server.
    let (code, out, _) = sh(&h, &lease, "nslookup web.test").await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&host.address), "{out}");
    let (code, _, _) = sh(&h, &lease, "nslookup exfil-secret.other.test").await;
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
    let level = h.runtime.update_network_policy(&lease.id, &wider).await.unwrap();
    assert_eq!(level.to_string(), "egress proxy (allow)");
    let (code, out, err) = sh(&h, &lease, "wget -q -O - http://other.test/").await;
    assert_eq!((code, out.as_str()), (0, BODY), "{err}");
    // Beyond grantable: refused, nothing changes.
    let err = h
        .runtime
        .update_network_policy(&lease.id, &policy(Egress::Allow, &["evil.test"]))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Network policy refused: the lease asks for \"evil.test\", which the environment's policy neither allows \
         nor lists as grantable"
    );
    // Down to none: nothing is reachable.
    h.runtime
        .update_network_policy(&lease.id, &Policy::none())
        .await
        .unwrap();
    let (code, _, err) = sh(&h, &lease, "wget -q -O - http://web.test/").await;
    assert_eq!(code, 1);
    assert!(err.contains("403"), "{err}");

    // The proxy ends with the lease.
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(proxies_of(&lease), Vec::<u32>::new(), "the lease's proxy outlived it");
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_made_without_a_policy_confirms_none_and_cannot_be_opened_later() {
    let Some(host) = TestHost::new(&[("web.test", HOST)], BODY) else {
        return;
    };
    let Some(h) = harness(&host).await else { return };
    let mut config = json!({ "image": envrt_test_support::docker::image() })
        .as_object()
        .cloned()
        .unwrap();
    config.insert("network".into(), "none".into());
    let plain = Environment::new("later", "egress", "docker").with_config(config);
    h.runtime.put_environment(plain.clone()).await.unwrap();
    let lease = h
        .runtime
        .acquire_lease(AcquireRequest::new("later", "acme"))
        .await
        .unwrap();
    assert_eq!(
        proxies_of(&lease),
        Vec::<u32>::new(),
        "a lease without a policy got a proxy"
    );
    // "none" is what it has.
    let level = h
        .runtime
        .update_network_policy(&lease.id, &Policy::none())
        .await
        .unwrap();
    assert_eq!(level.to_string(), "no network");
    // The environment gains a policy afterwards: this lease was made without the proxy.
    let mut with_policy = plain.clone();
    with_policy.network = Some(EnvironmentNetwork::Policy(
        NetworkConfig::new(policy(Egress::Allow, &["web.test:80"]), &[]).unwrap(),
    ));
    h.runtime.put_environment(with_policy).await.unwrap();
    let err = h
        .runtime
        .update_network_policy(&lease.id, &policy(Egress::Allow, &["web.test:80"]))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "lease {} was made without an egress proxy (its environment names no network policy), so its network \
             cannot be opened; acquire a new lease",
            lease.id
        )
    );
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_proxy_binary_a_policy_that_opens_egress_is_refused() {
    let Some(h) = common::harness_with(|config| {
        config.agent = Some(envrt_test_support::docker::static_agent());
        config.egress = Some("/nonexistent/envrt-egress".into());
    })
    .await
    else {
        return;
    };
    let mut config = json!({ "image": envrt_test_support::docker::image() })
        .as_object()
        .cloned()
        .unwrap();
    config.insert("network".into(), "none".into());
    let mut env = Environment::new("no-proxy", "egress", "docker").with_config(config);
    env.network = Some(EnvironmentNetwork::Policy(
        NetworkConfig::new(policy(Egress::Allow, &["web.test"]), &[]).unwrap(),
    ));
    let err = h.runtime.put_environment(env).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Network policy refused: driver \"docker\" cannot enforce egress = \"allow\" yet: its leases have no \
         network at all, so only egress = \"none\" is accepted"
    );
    h.finish().await;
}
