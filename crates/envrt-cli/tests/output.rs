//! `envrt exec --max-output` with `--keep`: which part of a capped stream is printed.

mod common;

use common::*;

#[test]
fn keep_tail_prints_the_last_bytes_of_a_capped_stream() {
    let s = Site::new();
    let script = "i=0; while [ $i -lt 500 ]; do echo line$i; i=$((i+1)); done; printf end";
    let tail = s.run(&["exec", "--max-output", "12", "--keep", "tail", "--", "sh", "-c", script]);
    assert_eq!(tail.code, Some(0));
    assert_eq!(tail.stdout_text(), "\nline499\nend");
    assert_eq!(
        tail.stderr,
        "envrt: stdout was cut to its last 12 bytes (--max-output --keep tail)\n"
    );
    let json = s.run(&[
        "exec",
        "--json",
        "--max-output",
        "4",
        "--keep",
        "tail",
        "--",
        "echo",
        "0123456789",
    ]);
    let doc: serde_json::Value = serde_json::from_str(&json.stdout_text()).unwrap();
    assert_eq!(doc["stdout"], "789\n");
    assert_eq!(doc["stdoutTruncated"], true);
    let whole = s.run(&["exec", "--keep", "tail", "--", "echo", "short"]);
    assert_eq!((whole.stdout_text().as_str(), whole.stderr.as_str()), ("short\n", ""));
    let bad = s.run(&["exec", "--keep", "middle", "--", "true"]);
    assert_eq!(bad.code, Some(2));
    assert!(
        bad.stderr.contains("invalid value 'middle' for '--keep <PART>'"),
        "{}",
        bad.stderr
    );
}
