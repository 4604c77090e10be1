//! The checked-in OpenAPI document and the router agree: every route with its methods is
//! in the document and every path and method of the document is a route, every
//! operation documents the error body for its refusals, and the running service answers
//! each documented method (and refuses an undocumented one with 405 and the error body).

mod common;

use std::collections::BTreeSet;

use common::Harness;
use serde_json::{Value, json};

const METHODS: &[&str] = &["get", "put", "post", "delete", "patch", "head", "options", "trace"];

fn document() -> Value {
    serde_json::from_str(envrt_serve::OPENAPI).expect("openapi.json is JSON")
}

fn documented() -> BTreeSet<(String, String)> {
    let doc = document();
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in METHODS {
            if item.get(*method).is_some() {
                out.insert((path.clone(), method.to_uppercase()));
            }
        }
    }
    out
}

fn routed() -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, methods) in envrt_serve::routes().table {
        for method in methods {
            out.insert((path.to_owned(), method.to_owned()));
        }
    }
    out
}

#[test]
fn every_route_is_documented_and_every_documented_operation_is_a_route() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    let (documented, routed) = (documented(), routed());
    let missing: Vec<_> = routed.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&routed).collect();
    assert!(missing.is_empty(), "routes not in openapi.json: {missing:?}");
    assert!(extra.is_empty(), "openapi.json operations without a route: {extra:?}");
}

#[test]
fn every_operation_documents_its_errors_with_the_error_body() {
    let doc = document();
    let error = json!({ "$ref": "#/components/schemas/Error" });
    assert_eq!(
        doc["components"]["schemas"]["Error"]["required"],
        json!(["kind", "message"])
    );
    let mut ids = BTreeSet::new();
    for (path, method) in documented() {
        let op = &doc["paths"][&path][method.to_lowercase()];
        assert!(
            ids.insert(op["operationId"].as_str().unwrap().to_owned()),
            "{path} {method}: operationId"
        );
        let responses = op["responses"].as_object().unwrap();
        for code in ["401", "403", "500"] {
            assert!(responses.contains_key(code), "{method} {path} lacks {code}");
        }
        for (code, response) in responses {
            if code.starts_with('4') || code.starts_with('5') {
                assert_eq!(
                    response["content"]["application/json"]["schema"], error,
                    "{method} {path} {code} is not the error body"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_answers_every_documented_method_and_refuses_others() {
    let h = Harness::start().await;
    let (_, token) = h.token("acme", &[]).await;
    for (path, methods) in envrt_serve::routes().table {
        let concrete = path
            .replace("{id}", "none")
            .replace("{template}", "none")
            .replace("{n}", "1");
        for method in ["GET", "PUT", "POST", "DELETE", "PATCH"] {
            let answer = h.call(method, &concrete, &token, Value::Null).await;
            if methods.contains(&method) {
                assert_ne!(answer.status, 405, "{method} {path}");
            } else {
                assert_eq!(answer.status, 405, "{method} {path}");
                assert_eq!(
                    answer.json(),
                    common::error(
                        "method_not_allowed",
                        &format!("Method {method} is not allowed on {concrete}.")
                    )
                );
            }
            assert!(
                answer.status == 405 || answer.json().get("kind").is_some() || answer.status < 400,
                "{method} {path}: an error without the error body"
            );
        }
    }
    h.stop().await;
}
