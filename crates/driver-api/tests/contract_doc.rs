//! Tidy: every error text the driver API can produce is written down, word for word, in
//! the project's contract (`docs/contract.md`), so the document users read cannot drift
//! from the code.

use std::path::Path;

use envrt_driver_api::UnsupportedOperation;

/// The `#[error("...")]` literals of `src/error.rs`, unescaped, leaving out those that only
/// forward another error's text (`transparent`, `{message}`, `{context}: {source}`); the
/// one `{operation}` template is expanded to every row of its table.
fn error_texts() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(root.join("src/error.rs")).expect("read src/error.rs");
    source
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("#[error(\"")?;
            let literal = rest.strip_suffix("\")]")?;
            Some(literal.replace("\\\"", "\""))
        })
        .filter(|text| text != "{message}" && text != "{context}: {source}")
        .flat_map(
            |text| match text.contains("{operation}") && text.starts_with("Environment driver") {
                true => UnsupportedOperation::ALL
                    .iter()
                    .map(|operation| text.replace("{operation}", operation.words()))
                    .collect(),
                false => vec![text],
            },
        )
        .collect()
}

#[test]
fn every_runtime_error_text_is_in_the_contract_doc() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("../../docs/contract.md")).expect("read docs/contract.md");
    let texts = error_texts();
    // The facade's ten refusals, the lease and store errors and the shared driver errors.
    assert!(texts.len() >= 25, "found only {} error texts: {texts:?}", texts.len());
    let missing: Vec<&String> = texts
        .iter()
        .filter(|text| !doc.contains(&format!("`{text}`")))
        .collect();
    assert!(missing.is_empty(), "not in docs/contract.md: {missing:#?}");
}

#[test]
fn the_extractor_sees_escaped_quotes() {
    let texts = error_texts();
    assert!(texts.contains(&"Environment driver \"{key}\" does not support duplex channels.".to_string()));
}
