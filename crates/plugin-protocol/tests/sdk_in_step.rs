//! The constants against the SDK's own `dist/protocol.d.ts` (the npm fixture of the
//! sandbox crate's tests): every host → worker verb of `HostToWorkerMethods`, the duplex,
//! login and execute notifications, and every error code.

use std::collections::BTreeSet;

use envrt_plugin_protocol::{codes, methods, notifications};

/// The SDK's `protocol.d.ts`, or `None` (with a note) when the fixture is not installed.
fn sdk_protocol() -> Option<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../driver-plugin-sandbox/tests/fixtures/sdk-worker/node_modules/@paperclipai/plugin-sdk/dist/protocol.d.ts"
    );
    match std::fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(_) => {
            envrt_test_support::Component::Sandbox.skip_or_fail(
                format_args!("ENVRT_REQUIRE_SANDBOX=1 but the SDK fixture is not installed ({path})"),
                "SKIPPED: the SDK fixture is not installed (scripts/setup.sh installs it)",
            );
            None
        }
    }
}

/// The body of `export interface NAME {` … the `}` that closes it at column 0.
fn interface<'a>(text: &'a str, name: &str) -> &'a str {
    let start = text
        .find(&format!("export interface {name} {{"))
        .unwrap_or_else(|| panic!("{name} not in protocol.d.ts"));
    let body = &text[start..];
    &body[..body.find("\n}").unwrap()]
}

#[test]
fn every_sdk_verb_has_a_constant_and_no_constant_is_invented() {
    let Some(text) = sdk_protocol() else { return };
    let sdk: BTreeSet<&str> = interface(&text, "HostToWorkerMethods")
        .lines()
        .filter_map(|line| line.strip_prefix("    ")?.split_once(": [").map(|(name, _)| name))
        .filter(|name| name.chars().all(|c| c.is_ascii_alphanumeric()))
        .collect();
    let ours: BTreeSet<&str> = methods::sdk().collect();
    assert_eq!(ours, sdk);
    for extension in methods::EXTENSIONS {
        assert!(!sdk.contains(extension), "{extension} is the SDK's, not an extension");
    }
}

#[test]
fn the_sdk_notifications_have_constants() {
    let Some(text) = sdk_protocol() else { return };
    let mut named: Vec<String> = text
        .lines()
        .filter_map(|line| {
            line.strip_prefix("export declare const ")?
                .split_once("_NOTIFICATION = \"")
        })
        .map(|(_, value)| value.trim_end_matches(['"', ';']).to_owned())
        .collect();
    named.push("execute.log".into());
    assert!(interface(&text, "WorkerToHostNotifications").contains("\"execute.log\""));
    assert_eq!(named.len(), 5, "{named:?}");
    for name in &named {
        assert!(notifications::ALL.contains(&name.as_str()), "{name} has no constant");
    }
}

#[test]
fn every_sdk_error_code_has_a_constant_and_back() {
    let Some(text) = sdk_protocol() else { return };
    let mut sdk = BTreeSet::new();
    for table in ["JSONRPC_ERROR_CODES", "PLUGIN_RPC_ERROR_CODES"] {
        let start = text.find(&format!("export declare const {table}: {{")).unwrap();
        let body = &text[start..];
        for line in body[..body.find("\n};").unwrap()].lines() {
            if let Some((_, value)) = line.trim().strip_prefix("readonly ").and_then(|l| l.split_once(": ")) {
                sdk.insert(value.trim_end_matches(';').parse::<i64>().unwrap());
            }
        }
    }
    let ours: BTreeSet<i64> = codes::ALL.iter().map(|(code, _)| *code).collect();
    assert_eq!(ours, sdk);
}
