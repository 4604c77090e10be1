//! The life-cycle v2 routes on a real service over the local driver: pause and unpause
//! (a paused lease refuses execute with the contract's text), fork into copies that see
//! the fork-point state, idle timeout and keep-alive, scope reuse and labels at acquire,
//! release by scope or label; each refusal with its exact status and body, another
//! tenant's lease answered as an unknown one, and a fork held to the tenant's lease limit.

mod common;

use common::{Harness, error};
use envrt_serve::Limits;
use serde_json::{Value, json};

async fn run(h: &Harness, token: &str, lease: &str, script: &str) -> common::Answer {
    h.call(
        "POST",
        &format!("/v1/leases/{lease}/execute"),
        token,
        json!({ "command": "sh", "args": ["-c", script] }),
    )
    .await
}

fn ok(answer: &common::Answer) -> Value {
    assert!(
        answer.status == 200 || answer.status == 201,
        "{}: {}",
        answer.status,
        String::from_utf8_lossy(&answer.body)
    );
    answer.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_refuses_execute_until_unpause_and_a_fork_copies_the_fork_point() {
    let h = Harness::start().await;
    let (_, token) = h.token("acme", &[]).await;
    let lease = h.acquire(&token, "local").await;
    ok(&run(&h, &token, &lease, "echo before > state").await);

    let paused = ok(&h
        .call("POST", &format!("/v1/leases/{lease}/pause"), &token, json!(null))
        .await);
    assert!(paused["metadata"]["envrtPausedAt"].is_u64(), "{paused}");
    let refused = run(&h, &token, &lease, "true").await;
    assert_eq!(
        (refused.status, refused.json()),
        (409, error("lease_paused", &format!("Lease \"{lease}\" is paused.")))
    );
    // Pausing again changes nothing; a paused lease is still listed and shown.
    ok(&h
        .call("POST", &format!("/v1/leases/{lease}/pause"), &token, json!(null))
        .await);
    let shown = ok(&h.call("GET", &format!("/v1/leases/{lease}"), &token, json!(null)).await);
    assert_eq!(shown["status"], "active");
    assert!(shown["metadata"]["envrtPausedAt"].is_u64());
    let unpaused = ok(&h
        .call("POST", &format!("/v1/leases/{lease}/unpause"), &token, json!(null))
        .await);
    assert!(unpaused["metadata"].get("envrtPausedAt").is_none(), "{unpaused}");

    let forked = h
        .call(
            "POST",
            &format!("/v1/leases/{lease}/fork"),
            &token,
            json!({ "count": 2 }),
        )
        .await;
    assert_eq!(forked.status, 201, "{}", String::from_utf8_lossy(&forked.body));
    let copies: Vec<String> = forked
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(c["metadata"]["forkedFrom"], lease.as_str(), "{c}");
            assert_eq!(c["status"], "active");
            c["id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(copies.len(), 2);
    assert_eq!(h.local_workspaces(), 3);
    ok(&run(&h, &token, &lease, "echo after > state").await);
    ok(&run(&h, &token, &copies[0], "echo copy0 > state").await);
    for (id, want) in [(&lease, "after\n"), (&copies[0], "copy0\n"), (&copies[1], "before\n")] {
        let read = ok(&run(&h, &token, id, "cat state").await);
        assert_eq!(read["stdout"], want, "{id}");
    }

    for (count, message) in [
        (0, "Invalid input: a fork needs a count of at least 1"),
        (17, "Invalid input: a fork makes at most 16 copies, not 17"),
    ] {
        let answer = h
            .call(
                "POST",
                &format!("/v1/leases/{lease}/fork"),
                &token,
                json!({ "count": count }),
            )
            .await;
        assert_eq!((answer.status, answer.json()), (400, error("invalid_input", message)));
    }
    let answer = h
        .call("POST", &format!("/v1/leases/{lease}/fork"), &token, json!({ "n": 1 }))
        .await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.json()["kind"], "invalid_request");
    assert_eq!(h.local_workspaces(), 3);
    let audit = h.audit.lock().unwrap().clone();
    let whats: Vec<&str> = audit.iter().filter_map(|l| l["audit"].as_str()).collect();
    for what in ["lease.pause", "lease.unpause", "lease.fork", "lease.forked"] {
        assert!(whats.contains(&what), "{what} not audited: {whats:?}");
    }
    for id in copies.iter().chain([&lease]) {
        ok(&h
            .call("POST", &format!("/v1/leases/{id}/release"), &token, json!({}))
            .await);
    }
    assert_eq!(h.local_workspaces(), 0);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_timeout_and_keep_alive_answer_the_lease_and_refuse_with_their_texts() {
    let h = Harness::start().await;
    let (_, token) = h.token("acme", &[]).await;
    let lease = h.acquire(&token, "local").await;
    let keep = format!("/v1/leases/{lease}/keep-alive");
    let answer = h.call("POST", &keep, &token, json!(null)).await;
    assert_eq!(
        (answer.status, answer.json()),
        (
            400,
            error(
                "invalid_input",
                &format!("Invalid input: lease \"{lease}\" has no idle timeout")
            )
        )
    );
    let idle = format!("/v1/leases/{lease}/idle-timeout");
    let answer = h.call("PUT", &idle, &token, json!({ "idleTimeoutMs": 0 })).await;
    assert_eq!(
        (answer.status, answer.json()),
        (400, error("invalid_request", envrt_serve::ZERO_IDLE_MESSAGE))
    );
    let armed = ok(&h
        .call("PUT", &idle, &token, json!({ "idleTimeoutMs": 3_600_000 }))
        .await);
    assert_eq!(armed["metadata"]["envrtIdleTimeoutMs"], 3_600_000);
    let kept = ok(&h.call("POST", &keep, &token, json!(null)).await);
    assert_eq!(kept["id"], lease.as_str());
    assert_eq!(kept["status"], "active");

    // At acquire: the idle timeout is armed on the new lease; 0 is refused before any lease.
    let acquired = h
        .call(
            "POST",
            "/v1/leases",
            &token,
            json!({ "environmentId": "local", "idleTimeoutMs": 3_600_000 }),
        )
        .await;
    assert_eq!(acquired.status, 201);
    assert_eq!(acquired.json()["metadata"]["envrtIdleTimeoutMs"], 3_600_000);
    let refused = h
        .call(
            "POST",
            "/v1/leases",
            &token,
            json!({ "environmentId": "local", "idleTimeoutMs": 0 }),
        )
        .await;
    assert_eq!(
        (refused.status, refused.json()),
        (400, error("invalid_request", envrt_serve::ZERO_IDLE_MESSAGE))
    );
    // A driver without idle timeouts refuses, and the lease made for it is released again.
    let refused = h
        .call(
            "POST",
            "/v1/leases",
            &token,
            json!({ "environmentId": "probe", "idleTimeoutMs": 1000 }),
        )
        .await;
    assert_eq!(
        (refused.status, refused.json()),
        (
            409,
            error(
                "idle_timeout_unsupported",
                "Environment driver \"probe\" does not support idle timeouts."
            )
        )
    );
    let live = ok(&h.call("GET", "/v1/leases", &token, json!(null)).await);
    assert_eq!(live.as_array().unwrap().len(), 2, "{live}");
    assert_eq!(h.local_workspaces(), 2);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scope_reuse_resumes_and_release_by_scope_or_label_ends_only_the_tenants_leases() {
    let h = Harness::start().await;
    let (_, acme) = h.token("acme", &[]).await;
    let (_, globex) = h.token("globex", &[]).await;
    let scoped = json!({ "environmentId": "local", "scope": "agent-7", "reuse": "scope", "labels": { "run": "r1" } });
    let first = h.call("POST", "/v1/leases", &acme, scoped.clone()).await;
    assert_eq!(first.status, 201);
    let first = first.json();
    assert_eq!(first["metadata"]["envrtScopeOutcome"], json!({ "outcome": "created" }));
    assert_eq!(first["metadata"]["envrtScope"], "agent-7");
    assert_eq!(first["metadata"]["labels"], json!({ "run": "r1" }));
    let again = h.call("POST", "/v1/leases", &acme, scoped.clone()).await;
    assert_eq!(again.status, 200, "a resumed lease is no new resource");
    assert_eq!(again.json()["id"], first["id"]);
    assert_eq!(
        again.json()["metadata"]["envrtScopeOutcome"],
        json!({ "outcome": "resumed" })
    );
    // Globex's lease of the same scope and label is its own, and is left alone.
    let theirs = ok(&h.call("POST", "/v1/leases", &globex, scoped.clone()).await);
    assert_ne!(theirs["id"], first["id"]);
    let labelled = h
        .call(
            "POST",
            "/v1/leases",
            &acme,
            json!({ "environmentId": "local", "labels": { "run": "r1" } }),
        )
        .await;
    assert_eq!(labelled.status, 201);
    assert_eq!(h.local_workspaces(), 3);

    let matching = "/v1/leases/release-matching";
    for body in [
        json!({}),
        json!({ "scope": "agent-7", "label": { "key": "run", "value": "r1" } }),
    ] {
        let answer = h.call("POST", matching, &acme, body).await;
        assert_eq!(
            (answer.status, answer.json()),
            (400, error("invalid_request", envrt_serve::SELECTOR_MESSAGE))
        );
    }
    let report = ok(&h
        .call(
            "POST",
            matching,
            &acme,
            json!({ "label": { "key": "run", "value": "r1" } }),
        )
        .await);
    assert_eq!(report["failures"], json!([]));
    let released: Vec<&str> = report["released"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["status"].as_str().unwrap())
        .collect();
    assert_eq!(released, ["released", "released"]);
    let again = ok(&h.call("POST", matching, &acme, json!({ "scope": "agent-7" })).await);
    assert_eq!(again, json!({ "released": [], "failures": [] }), "idempotent");
    assert_eq!(h.local_workspaces(), 1, "globex's lease was touched");
    let shown = ok(&h
        .call(
            "GET",
            &format!("/v1/leases/{}", theirs["id"].as_str().unwrap()),
            &globex,
            json!(null),
        )
        .await);
    assert_eq!(shown["status"], "active");

    let answer = h
        .call(
            "POST",
            "/v1/leases",
            &acme,
            json!({ "environmentId": "local", "labels": { "": "x" } }),
        )
        .await;
    assert_eq!(
        (answer.status, answer.json()),
        (400, error("invalid_request", envrt_serve::LABELS_MESSAGE))
    );
    let answer = h
        .call(
            "POST",
            "/v1/leases",
            &acme,
            json!({ "environmentId": "local", "reuse": "scope" }),
        )
        .await;
    assert_eq!(
        (answer.status, answer.json()),
        (
            400,
            error("invalid_input", "Invalid input: reuse = \"scope\" needs a scope")
        )
    );
    assert_eq!(h.local_workspaces(), 1);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_lease_answers_the_new_routes_as_an_unknown_one() {
    let h = Harness::start().await;
    let (_, acme) = h.token("acme", &[]).await;
    let (_, globex) = h.token("globex", &[]).await;
    let lease = h.acquire(&acme, "local").await;
    let unknown = "00000000-0000-0000-0000-000000000000";
    for id in [lease.as_str(), unknown] {
        let not_found = error("lease_not_found", &format!("Lease \"{id}\" was not found."));
        for (method, path, body) in [
            ("POST", format!("/v1/leases/{id}/pause"), json!(null)),
            ("POST", format!("/v1/leases/{id}/unpause"), json!(null)),
            ("POST", format!("/v1/leases/{id}/fork"), json!({ "count": 1 })),
            ("POST", format!("/v1/leases/{id}/keep-alive"), json!(null)),
            (
                "PUT",
                format!("/v1/leases/{id}/idle-timeout"),
                json!({ "idleTimeoutMs": 1000 }),
            ),
        ] {
            let answer = h.call(method, &path, &globex, body).await;
            assert_eq!(
                (answer.status, answer.json()),
                (404, not_found.clone()),
                "{method} {path}"
            );
        }
    }
    let shown = ok(&h.call("GET", &format!("/v1/leases/{lease}"), &acme, json!(null)).await);
    assert!(shown["metadata"].get("envrtPausedAt").is_none());
    assert!(shown["metadata"].get("envrtIdleTimeoutMs").is_none());
    assert_eq!(h.local_workspaces(), 1, "a fork was made for another tenant");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_is_held_to_the_tenants_lease_limit_before_any_copy() {
    let h = Harness::start_with(Limits {
        max_live_leases: 3,
        ..Limits::default()
    })
    .await;
    let (_, token) = h.token("acme", &[]).await;
    let lease = h.acquire(&token, "local").await;
    let answer = h
        .call(
            "POST",
            &format!("/v1/leases/{lease}/fork"),
            &token,
            json!({ "count": 3 }),
        )
        .await;
    assert_eq!(
        (answer.status, answer.json()),
        (
            429,
            error(
                "lease_limit",
                "Tenant \"acme\" holds 1 active leases; 3 more would pass the most it may, 3."
            )
        )
    );
    assert_eq!(h.local_workspaces(), 1);
    let answer = h
        .call(
            "POST",
            &format!("/v1/leases/{lease}/fork"),
            &token,
            json!({ "count": 2 }),
        )
        .await;
    assert_eq!(answer.status, 201);
    assert_eq!(h.local_workspaces(), 3);
    let answer = h
        .call("POST", &format!("/v1/leases/{lease}/fork"), &token, json!({}))
        .await;
    assert_eq!(
        (answer.status, answer.json()),
        (
            429,
            error(
                "lease_limit",
                "Tenant \"acme\" already holds 3 active leases, the most it may."
            )
        )
    );
    assert_eq!(h.local_workspaces(), 3);
    h.stop().await;
}
