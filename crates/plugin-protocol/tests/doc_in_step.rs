//! `docs/plugin-protocol.md` and the constants stay in step: every method, notification
//! and error code has its constant and appears in the page, both ways.

use std::collections::BTreeSet;

use envrt_plugin_protocol::{codes, dataplane, methods, notifications};

fn page() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/plugin-protocol.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every `code span` of the page (text between single backticks).
fn code_spans(page: &str) -> BTreeSet<String> {
    page.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// The identifier a span starts with (`duplexChannelOpen {hostRouteId}` → `duplexChannelOpen`).
fn head(span: &str) -> &str {
    span.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
        .next()
        .unwrap_or_default()
}

/// Fields the page names that look like verbs but are not.
const NOT_VERBS: &[&str] = &[
    "environmentDrivers",
    "environmentId",
    "envrtLeaseId",
    "envrtSocketDir",
    "envrtUser",
    dataplane::OFFER_PARAM,
    dataplane::STDIN_ROUTE_PARAM,
];

/// Spans that name a verb: the families of the SDK's verbs and envrt's extensions.
fn is_verb_like(name: &str) -> bool {
    let families = ["environment", "duplexChannel", "loginPty", "envrt"];
    !name.contains('.')
        && !NOT_VERBS.contains(&name)
        && families.iter().any(|f| {
            name.strip_prefix(f)
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_uppercase()))
        })
}

#[test]
fn every_method_is_documented_and_every_documented_verb_has_a_constant() {
    let page = page();
    let spans = code_spans(&page);
    let heads: BTreeSet<&str> = spans.iter().map(|s| head(s)).collect();
    let known: BTreeSet<&str> = methods::all().collect();
    for method in &known {
        assert!(heads.contains(method), "`{method}` is not in docs/plugin-protocol.md");
    }
    for name in heads.iter().filter(|n| is_verb_like(n)) {
        // `loginPty*` names the family, not a verb
        if name.ends_with('*') || *name == "loginPty" {
            continue;
        }
        assert!(
            known.contains(name),
            "docs/plugin-protocol.md names `{name}`, which has no constant in methods"
        );
    }
    assert_eq!(known.len(), methods::all().count(), "a method is listed twice");
}

#[test]
fn every_notification_is_documented_and_every_documented_one_has_a_constant() {
    let page = page();
    let heads: BTreeSet<String> = code_spans(&page).iter().map(|s| head(s).to_owned()).collect();
    for name in notifications::ALL {
        assert!(heads.contains(*name), "`{name}` is not in docs/plugin-protocol.md");
    }
    // the data plane's name is advertised in `supportedMethods`, not sent
    assert!(
        heads.contains(dataplane::EXTENSION),
        "`{}` is not in docs/plugin-protocol.md",
        dataplane::EXTENSION
    );
    let families = ["execute.", "duplexChannel.", "loginPty.", "envrt."];
    for name in heads
        .iter()
        .filter(|n| families.iter().any(|f| n.starts_with(f)) && *n != dataplane::EXTENSION)
    {
        assert!(
            notifications::ALL.contains(&name.as_str()),
            "docs/plugin-protocol.md names notification `{name}`, which has no constant"
        );
    }
}

#[test]
fn every_error_code_is_documented_and_every_documented_code_has_a_constant() {
    let page = page();
    let documented: BTreeSet<i64> = page
        .match_indices("-32")
        .filter_map(|(at, _)| page[at + 1..].get(..5))
        .filter(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
        .map(|digits| -digits.parse::<i64>().unwrap())
        .collect();
    let known: BTreeSet<i64> = codes::ALL.iter().map(|(code, _)| *code).collect();
    assert_eq!(known.len(), codes::ALL.len(), "a code is listed twice");
    for code in &known {
        assert!(
            documented.contains(code),
            "error code {code} is not in docs/plugin-protocol.md"
        );
    }
    for code in &documented {
        assert!(
            known.contains(code),
            "docs/plugin-protocol.md names code {code}, which has no constant"
        );
    }
}
