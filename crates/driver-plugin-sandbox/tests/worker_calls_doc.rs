//! docs/plugin-protocol.md's table of worker-to-host methods, the SDK's
//! `WorkerToHostMethods` (`dist/protocol.d.ts` of the installed SDK) and the host's
//! `SUPPORTED_WORKER_METHODS` say the same thing.

mod host_common;

use std::collections::BTreeMap;

use envrt_driver_plugin_sandbox::SUPPORTED_WORKER_METHODS;

fn sdk_methods() -> Vec<String> {
    host_common::ensure_sdk_fixture();
    let path = host_common::fixtures().join("sdk-worker/node_modules/@paperclipai/plugin-sdk/dist/protocol.d.ts");
    let text = std::fs::read_to_string(path).unwrap();
    let start = text
        .find("export interface WorkerToHostMethods {")
        .expect("WorkerToHostMethods");
    let body = &text[start..];
    let body = &body[..body.find("\n}").unwrap()];
    body.lines()
        .filter_map(|line| line.strip_prefix("    \""))
        .filter_map(|rest| rest.split_once("\": [").map(|(name, _)| name.to_owned()))
        .collect()
}

/// method -> (status, capability) from the doc's table.
fn doc_rows() -> BTreeMap<String, (String, Option<String>)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/plugin-protocol.md");
    let text = std::fs::read_to_string(path).unwrap();
    let start = text.find("| Method | Status | Capability |").expect("the table");
    let mut rows = BTreeMap::new();
    for line in text[start..].lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 3, "{line}");
        let method = cells[0].trim_matches('`').to_owned();
        let capability = (cells[2] != "—").then(|| cells[2].trim_matches('`').to_owned());
        assert!(matches!(cells[1], "supported" | "refused" | "out of scope"), "{line}");
        assert!(
            rows.insert(method, (cells[1].to_owned(), capability)).is_none(),
            "twice: {line}"
        );
    }
    rows
}

#[test]
fn the_doc_lists_every_sdk_method_once() {
    let sdk = sdk_methods();
    assert!(sdk.len() > 80, "parsed {} methods", sdk.len());
    let doc: Vec<String> = doc_rows().into_keys().collect();
    let mut sdk_sorted = sdk.clone();
    sdk_sorted.sort();
    assert_eq!(doc, sdk_sorted);
}

#[test]
fn the_doc_says_what_the_code_supports_with_its_capability() {
    let rows = doc_rows();
    let supported: BTreeMap<String, Option<String>> = rows
        .iter()
        .filter(|(_, (status, _))| status == "supported")
        .map(|(m, (_, cap))| (m.clone(), cap.clone()))
        .collect();
    let code: BTreeMap<String, Option<String>> = SUPPORTED_WORKER_METHODS
        .iter()
        .map(|(m, cap)| ((*m).to_owned(), cap.map(str::to_owned)))
        .collect();
    assert_eq!(supported, code);
    let sdk = sdk_methods();
    for method in code.keys() {
        assert!(sdk.contains(method), "{method} is not an SDK method");
    }
    for (method, (status, cap)) in &rows {
        if status != "supported" {
            assert_eq!(cap, &None, "{method}: only supported methods name a capability");
        }
    }
}
