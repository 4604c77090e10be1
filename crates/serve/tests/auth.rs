//! Every request is authenticated and authorised before a driver is touched: no token, a
//! malformed one, a revoked one, a token without the operation, and another tenant's
//! token each get their exact status and body, and the drivers see no call (counted on
//! the probe driver and as local workspaces).

mod common;

use common::{Harness, error};
use serde_json::json;

const UNAUTH: &str = "A valid bearer token is required.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_a_malformed_or_revoked_one_are_refused_before_any_driver() {
    let h = Harness::start().await;
    let (id, token) = h.token("acme", &[]).await;
    let acquire = json!({ "environmentId": "probe" }).to_string();
    let wrong_secret = format!(
        "{}{}",
        &token[..token.len() - 1],
        if token.ends_with('0') { '1' } else { '0' }
    );
    let cases: Vec<(Option<String>, &str)> = vec![
        (None, "no header"),
        (Some("Basic dXNlcjpwYXNz".into()), "another scheme"),
        (Some("Bearer".into()), "no token"),
        (Some("Bearer not-a-token".into()), "malformed"),
        (Some(format!("Bearer {}", token.to_uppercase())), "upper case"),
        (Some(format!("Bearer {wrong_secret}")), "wrong secret"),
        (
            Some("Bearer envrt_0000000000000000_".to_owned() + &"0".repeat(64)),
            "unknown id",
        ),
    ];
    for (header, what) in &cases {
        for (method, path) in [("POST", "/v1/leases"), ("GET", "/v1/leases"), ("GET", "/v1/nope")] {
            let answer = h.send(method, path, header.as_deref(), acquire.clone()).await;
            assert_eq!(answer.status, 401, "{what} {method} {path}");
            assert_eq!(answer.json(), error("unauthenticated", UNAUTH), "{what}");
        }
    }
    assert!(h.store.revoke_token(&id, 2).await.unwrap());
    let answer = h
        .call("POST", "/v1/leases", &token, json!({ "environmentId": "probe" }))
        .await;
    assert_eq!(answer.status, 401);
    assert_eq!(answer.json(), error("unauthenticated", UNAUTH));
    assert_eq!(h.probe.operation_calls(), 0, "a refused request reached the driver");
    assert_eq!(h.local_workspaces(), 0);
    assert!(
        h.audit.lock().unwrap().is_empty(),
        "a refused request was audited as a call"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_the_operation_is_refused_with_its_text_before_any_driver() {
    let h = Harness::start().await;
    let (owner_id, owner) = h.token("acme", &[]).await;
    let lease = h.acquire(&owner, "probe").await;
    let before = h.probe.operation_calls();
    let (id, reader) = h.token("acme", &["leases:read"]).await;
    let refused = |op: &str| {
        error(
            "forbidden",
            &format!("Token \"{id}\" does not allow the operation \"{op}\"."),
        )
    };
    let cases = [
        (
            "POST",
            "/v1/leases".to_owned(),
            json!({ "environmentId": "probe" }),
            "leases:write",
        ),
        ("POST", format!("/v1/leases/{lease}/release"), json!({}), "leases:write"),
        ("DELETE", format!("/v1/leases/{lease}"), json!(null), "leases:write"),
        (
            "POST",
            format!("/v1/leases/{lease}/execute"),
            json!({ "command": "true" }),
            "execute",
        ),
        (
            "POST",
            format!("/v1/leases/{lease}/execute/stream"),
            json!({ "command": "true" }),
            "execute",
        ),
        ("PUT", format!("/v1/leases/{lease}/files?path=x"), json!(null), "sync"),
        ("GET", format!("/v1/leases/{lease}/files?path=x"), json!(null), "sync"),
        (
            "GET",
            format!("/v1/leases/{lease}/duplex?command=sh"),
            json!(null),
            "duplex",
        ),
        (
            "POST",
            format!("/v1/leases/{lease}/templates"),
            json!({}),
            "templates:write",
        ),
        (
            "GET",
            "/v1/environments/probe/templates".to_owned(),
            json!(null),
            "templates:read",
        ),
        ("GET", "/v1/environments".to_owned(), json!(null), "environments:read"),
        (
            "POST",
            format!("/v1/leases/{lease}/processes"),
            json!({ "argv": ["true"] }),
            "processes:write",
        ),
        (
            "GET",
            format!("/v1/leases/{lease}/processes"),
            json!(null),
            "processes:read",
        ),
        (
            "GET",
            format!("/v1/leases/{lease}/processes/1"),
            json!(null),
            "processes:read",
        ),
        (
            "GET",
            format!("/v1/leases/{lease}/processes/1/output?stdout=0"),
            json!(null),
            "processes:read",
        ),
        (
            "POST",
            format!("/v1/leases/{lease}/processes/1/stdin"),
            json!("x"),
            "processes:write",
        ),
        (
            "POST",
            format!("/v1/leases/{lease}/processes/1/stdin/close"),
            json!(null),
            "processes:write",
        ),
        (
            "POST",
            format!("/v1/leases/{lease}/processes/1/signal"),
            json!({ "signal": "KILL" }),
            "processes:write",
        ),
        (
            "POST",
            format!("/v1/leases/{lease}/processes/1/resize"),
            json!({ "rows": 1, "cols": 1 }),
            "processes:write",
        ),
        (
            "GET",
            format!("/v1/leases/{lease}/processes/1/wait"),
            json!(null),
            "processes:read",
        ),
        (
            "PUT",
            format!("/v1/leases/{lease}/network"),
            json!({ "egress": "none" }),
            "network",
        ),
    ];
    for (method, path, body, op) in cases {
        let answer = h.call(method, &path, &reader, body).await;
        assert_eq!(answer.status, 403, "{method} {path}");
        assert_eq!(answer.json(), refused(op), "{method} {path}");
    }
    // The life-cycle v2 routes, each behind its own operation (a token of `leases:read`
    // and `leases:write` only has none of them).
    let (writer_id, writer) = h.token("acme", &["leases:read", "leases:write"]).await;
    for (method, path, body, op) in [
        ("POST", format!("/v1/leases/{lease}/pause"), json!(null), "leases:pause"),
        (
            "POST",
            format!("/v1/leases/{lease}/unpause"),
            json!(null),
            "leases:pause",
        ),
        (
            "POST",
            format!("/v1/leases/{lease}/fork"),
            json!({ "count": 2 }),
            "leases:fork",
        ),
        (
            "POST",
            format!("/v1/leases/{lease}/keep-alive"),
            json!(null),
            "leases:idle",
        ),
        (
            "PUT",
            format!("/v1/leases/{lease}/idle-timeout"),
            json!({ "idleTimeoutMs": 1000 }),
            "leases:idle",
        ),
        (
            "POST",
            "/v1/leases".to_owned(),
            json!({ "environmentId": "probe", "idleTimeoutMs": 1000 }),
            "leases:idle",
        ),
    ] {
        let answer = h.call(method, &path, &writer, body).await;
        let want = error(
            "forbidden",
            &format!("Token \"{writer_id}\" does not allow the operation \"{op}\"."),
        );
        assert_eq!((answer.status, answer.json()), (403, want), "{method} {path}");
    }
    let answer = h
        .call("POST", "/v1/leases/release-matching", &reader, json!({ "scope": "s" }))
        .await;
    assert_eq!((answer.status, answer.json()), (403, refused("leases:write")));
    // Asking for a network policy at acquire needs `network` beside `leases:write`.
    let answer = h
        .call(
            "POST",
            "/v1/leases",
            &writer,
            json!({ "environmentId": "probe", "network": { "egress": "none" } }),
        )
        .await;
    assert_eq!(
        (answer.status, answer.json()),
        (
            403,
            error(
                "forbidden",
                &format!("Token \"{writer_id}\" does not allow the operation \"network\".")
            )
        )
    );
    assert_eq!(
        h.probe.operation_calls(),
        before,
        "a forbidden request reached the driver"
    );
    // What it may do, it does.
    let answer = h
        .call("GET", &format!("/v1/leases/{lease}"), &reader, json!(null))
        .await;
    assert_eq!(answer.status, 200);
    let audit = h.audit.lock().unwrap().clone();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["who"], owner_id.as_str());
    assert_eq!(audit[0]["audit"], "lease.acquire");
    assert!(
        !audit[0].to_string().contains(&owner[6..]),
        "the audit line holds the token"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_lease_and_template_answer_as_unknown_ones() {
    let h = Harness::start().await;
    let (_, acme) = h.token("acme", &[]).await;
    let (_, globex) = h.token("globex", &[]).await;
    let lease = h.acquire(&acme, "local").await;
    assert_eq!(h.local_workspaces(), 1);
    let captured = h
        .call("POST", &format!("/v1/leases/{lease}/templates"), &acme, json!({}))
        .await;
    assert_eq!(captured.status, 201, "{}", String::from_utf8_lossy(&captured.body));
    let template = captured.json()["id"].as_str().unwrap().to_owned();
    let unknown = "00000000-0000-0000-0000-000000000000";
    for id in [lease.as_str(), unknown] {
        let not_found = error("lease_not_found", &format!("Lease \"{id}\" was not found."));
        for (method, path, body) in [
            ("GET", format!("/v1/leases/{id}"), json!(null)),
            ("GET", format!("/v1/leases/{id}/capabilities"), json!(null)),
            ("POST", format!("/v1/leases/{id}/release"), json!({})),
            ("POST", format!("/v1/leases/{id}/resume"), json!(null)),
            ("DELETE", format!("/v1/leases/{id}"), json!(null)),
            ("POST", format!("/v1/leases/{id}/execute"), json!({ "command": "true" })),
            (
                "POST",
                format!("/v1/leases/{id}/execute/stream"),
                json!({ "command": "true" }),
            ),
            ("GET", format!("/v1/leases/{id}/files?path=x"), json!(null)),
            ("PUT", format!("/v1/leases/{id}/files?path=x"), json!(null)),
            ("POST", format!("/v1/leases/{id}/templates"), json!({})),
        ] {
            let answer = h.call(method, &path, &globex, body).await;
            assert_eq!(
                (answer.status, answer.json()),
                (404, not_found.clone()),
                "{method} {path}"
            );
        }
    }
    let listed = h.call("GET", "/v1/leases", &globex, json!(null)).await;
    assert_eq!(listed.json(), json!([]));
    let templates = h
        .call("GET", "/v1/environments/local/templates", &globex, json!(null))
        .await;
    assert_eq!(templates.json(), json!([]));
    let path = format!("/v1/environments/local/templates/{template}");
    let deleted = h.call("DELETE", &path, &globex, json!(null)).await;
    assert_eq!(deleted.json(), json!({ "deleted": false }));
    // Still the owner's, and still alive.
    let templates = h
        .call("GET", "/v1/environments/local/templates", &acme, json!(null))
        .await;
    assert_eq!(templates.json().as_array().unwrap().len(), 1);
    let shown = h.call("GET", &format!("/v1/leases/{lease}"), &acme, json!(null)).await;
    assert_eq!(shown.json()["status"], "active");
    assert_eq!(h.local_workspaces(), 1);
    let deleted = h.call("DELETE", &path, &acme, json!(null)).await;
    assert_eq!(deleted.json(), json!({ "deleted": true }));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_process_answers_as_an_unknown_one_and_is_left_alone() {
    let h = Harness::start().await;
    let (_, acme) = h.token("acme", &[]).await;
    let (_, globex) = h.token("globex", &[]).await;
    let lease = h.acquire(&acme, "local").await;
    let spawned = h
        .call(
            "POST",
            &format!("/v1/leases/{lease}/processes"),
            &acme,
            json!({ "argv": ["sh", "-c", "echo mine; sleep 300"], "stdin": "piped" }),
        )
        .await;
    assert_eq!(spawned.status, 201, "{}", String::from_utf8_lossy(&spawned.body));
    let id = spawned.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(id, format!("{lease}/1"));
    let unknown_lease = "00000000-0000-0000-0000-000000000000";
    // The same answers for globex on acme's process, an unknown number, an unknown lease.
    for (l, n) in [(lease.as_str(), "1"), (lease.as_str(), "2"), (unknown_lease, "1")] {
        let not_found = error("process_not_found", &format!("Process \"{l}/{n}\" was not found."));
        let base = format!("/v1/leases/{l}/processes/{n}");
        for (method, path, body) in [
            ("GET", base.clone(), json!(null)),
            ("GET", format!("{base}/output"), json!(null)),
            ("GET", format!("{base}/output?stdout=0"), json!(null)),
            ("POST", format!("{base}/stdin"), json!("x")),
            ("POST", format!("{base}/stdin/close"), json!(null)),
            ("POST", format!("{base}/signal"), json!({ "signal": "KILL" })),
            ("POST", format!("{base}/resize"), json!({ "rows": 5, "cols": 5 })),
            ("GET", format!("{base}/wait?timeoutMs=10"), json!(null)),
        ] {
            let answer = h.call(method, &path, &globex, body).await;
            assert_eq!(
                (answer.status, answer.json()),
                (404, not_found.clone()),
                "{method} {path}"
            );
        }
    }
    for l in [lease.as_str(), unknown_lease] {
        let not_found = error("lease_not_found", &format!("Lease \"{l}\" was not found."));
        for (method, body) in [("GET", json!(null)), ("POST", json!({ "argv": ["true"] }))] {
            let answer = h
                .call(method, &format!("/v1/leases/{l}/processes"), &globex, body)
                .await;
            assert_eq!((answer.status, answer.json()), (404, not_found.clone()), "{method} {l}");
        }
        let answer = h
            .call("PUT", &format!("/v1/leases/{l}/network"), &globex, json!({}))
            .await;
        assert_eq!(
            (answer.status, answer.json()),
            (404, not_found.clone()),
            "PUT network {l}"
        );
    }
    // Still acme's, still running, with its output and its stdin untouched.
    let base = format!("/v1/leases/{lease}/processes/1");
    let shown = h.call("GET", &base, &acme, json!(null)).await;
    assert_eq!(shown.json()["status"], json!({ "state": "running" }));
    let killed = h
        .call("POST", &format!("{base}/signal"), &acme, json!({ "signal": "KILL" }))
        .await;
    assert_eq!(killed.status, 200);
    let output = h.call("GET", &format!("{base}/output"), &acme, json!(null)).await;
    let lines = common::ndjson(&output.body);
    assert_eq!(common::stream_bytes(&lines, "stdout", 0), b"mine\n");
    assert_eq!(
        lines.last().unwrap()["exit"]["status"],
        json!({ "state": "signalled", "signal": 9 })
    );
    let released = h
        .call("POST", &format!("/v1/leases/{lease}/release"), &acme, json!({}))
        .await;
    assert_eq!(released.status, 200);
    h.stop().await;
}
