//! A lease's network policy through the service: an acquire that asks for one and the
//! update route reach the driver with the policy asked for (a probe behind a pretend
//! egress proxy) and answer the level; a policy the environment does not grant, or that
//! the driver cannot enforce, is refused with the runtime's exact text before the driver
//! is asked; a malformed one with its parse text.

mod common;

use common::{Harness, error};
use serde_json::{Value, json};

const SHARES_HOST: &str = "Network policy refused: driver \"local\" cannot enforce a network policy: its commands \
                           share the host's network; drop the policy, or set network = \"host\" to run on the host \
                           network unrestricted";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_reaches_the_driver_at_acquire_and_on_update_within_the_grant() {
    let h = Harness::start().await;
    let (_, token) = h.token("acme", &[]).await;
    let asked = json!({ "egress": "allow", "allow": ["example.org:443"] });
    let acquired = h
        .call(
            "POST",
            "/v1/leases",
            &token,
            json!({ "environmentId": "proxied", "network": asked }),
        )
        .await;
    assert_eq!(acquired.status, 201, "{}", String::from_utf8_lossy(&acquired.body));
    let lease = acquired.json()["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/leases/{lease}/network");
    let closed = h.call("PUT", &path, &token, Value::Null).await;
    assert_eq!(
        (closed.status, closed.json()),
        (200, json!({ "network": "no network" }))
    );
    let opened = h.call("PUT", &path, &token, asked.clone()).await;
    assert_eq!(
        (opened.status, opened.json()),
        (200, json!({ "network": "egress proxy (allow)" }))
    );
    let beyond = h
        .call(
            "PUT",
            &path,
            &token,
            json!({ "egress": "allow", "allow": ["evil.example:443"] }),
        )
        .await;
    assert_eq!(
        (beyond.status, beyond.json()),
        (
            409,
            error(
                "network_refused",
                "Network policy refused: the lease asks for \"evil.example:443\", which the environment's policy \
                 neither allows nor lists as grantable"
            )
        )
    );
    let none = json!({ "egress": "none" });
    assert_eq!(
        *h.proxied.policies.lock().unwrap(),
        [
            (lease.clone(), asked.clone()),
            (lease.clone(), none),
            (lease.clone(), asked.clone())
        ]
    );
    // Without a policy of its own, a lease gets the environment's.
    let plain = h.acquire(&token, "proxied").await;
    assert_eq!(
        h.proxied.policies.lock().unwrap().last().unwrap(),
        &(plain, json!({ "egress": "none" }))
    );
    let audit: Vec<(String, String)> = h
        .audit
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l["audit"] == "lease.network")
        .map(|l| {
            (
                l["lease"].as_str().unwrap().to_owned(),
                l["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let outcomes: Vec<&str> = audit.iter().map(|(_, o)| o.as_str()).collect();
    assert_eq!(outcomes, ["ok", "ok", "network_refused"]);
    assert!(audit.iter().all(|(l, _)| *l == lease));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_the_driver_cannot_enforce_or_that_does_not_parse_is_refused_with_its_text() {
    let h = Harness::start().await;
    let (_, token) = h.token("acme", &[]).await;
    let refused = h
        .call(
            "POST",
            "/v1/leases",
            &token,
            json!({ "environmentId": "local", "network": { "egress": "none" } }),
        )
        .await;
    assert_eq!(
        (refused.status, refused.json()),
        (409, error("network_refused", SHARES_HOST))
    );
    assert_eq!(h.local_workspaces(), 0, "a refused acquire made a workspace");
    let local = h.acquire(&token, "local").await;
    let update = h
        .call("PUT", &format!("/v1/leases/{local}/network"), &token, json!({}))
        .await;
    assert_eq!(
        (update.status, update.json()),
        (409, error("network_refused", SHARES_HOST))
    );
    let probe = h.acquire(&token, "probe").await;
    let before = h.probe.operation_calls();
    let update = h
        .call(
            "PUT",
            &format!("/v1/leases/{probe}/network"),
            &token,
            json!({ "egress": "none" }),
        )
        .await;
    assert_eq!(
        (update.status, update.json()),
        (
            409,
            error(
                "network_refused",
                "Network policy refused: driver \"probe\" does not declare what it does with its leases' network, \
                 so no network setting can be enforced there"
            )
        )
    );
    assert_eq!(h.probe.operation_calls(), before);
    let malformed: Vec<(Value, String)> = vec![
        (
            json!({ "egress": "allow", "allow": ["py*.org"] }),
            "Invalid network policy: allow: \"py*.org\": bad wildcard: only a whole leading label \"*.\" may be a \
             wildcard"
                .into(),
        ),
        (
            json!({ "egress": "none", "allow": ["example.org"] }),
            "Invalid network policy: allow: entries need egress = \"allow\" or \"open\" (egress is \"none\")".into(),
        ),
        (
            json!({ "egress": "some" }),
            "Invalid network policy: egress = \"some\": unknown value (expected \"none\", \"allow\" or \"open\")"
                .into(),
        ),
    ];
    for (policy, text) in malformed {
        for (method, path, body) in [
            ("PUT", format!("/v1/leases/{local}/network"), policy.clone()),
            (
                "POST",
                "/v1/leases".to_owned(),
                json!({ "environmentId": "proxied", "network": policy.clone() }),
            ),
        ] {
            let answer = h.call(method, &path, &token, body).await;
            assert_eq!(
                (answer.status, answer.json()),
                (400, error("invalid_request", &text)),
                "{method} {path}"
            );
        }
    }
    let misspelt = h
        .call(
            "PUT",
            &format!("/v1/leases/{local}/network"),
            &token,
            json!({ "egres": "none" }),
        )
        .await;
    assert_eq!(
        (misspelt.status, misspelt.json()),
        (
            400,
            error(
                "invalid_request",
                "Invalid JSON body: unknown field `egres`, expected `egress` or `allow` at line 1 column 8"
            )
        )
    );
    assert!(h.proxied.policies.lock().unwrap().is_empty());
    let released = h
        .call("POST", &format!("/v1/leases/{local}/release"), &token, json!({}))
        .await;
    assert_eq!(released.status, 200);
    let ended = h
        .call("PUT", &format!("/v1/leases/{local}/network"), &token, json!({}))
        .await;
    assert_eq!(
        (ended.status, ended.json()),
        (
            409,
            error(
                "lease_not_active",
                &format!("Lease \"{local}\" is not active (status: released).")
            )
        )
    );
    h.stop().await;
}
