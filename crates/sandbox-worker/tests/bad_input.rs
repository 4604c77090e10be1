//! A catalogue of bad input against the reference worker (raw JSON-RPC lines) and the
//! host: traversal, absolute paths, NUL bytes, huge argv/env/stdin, garbage and oversized
//! frames, forged ids, hostile link trees, `LD_*` variables. Each case gets its exact
//! error (or the correct behaviour); none panics, hangs, or writes outside the workspace.

mod common;

use std::os::unix::fs::symlink;
use std::path::Path;

use common::*;
use serde_json::{Value, json};

/// One refusal: a request and the exact `(code, message)` it must get.
struct Case {
    name: &'static str,
    method: &'static str,
    params: Value,
    code: i64,
    message: String,
}

fn exec(lease: &str, extra: Value) -> Value {
    let mut p = on_lease(lease, json!({"command": "true", "timeoutMs": 20000}));
    for (k, v) in extra.as_object().unwrap() {
        p[k] = v.clone();
    }
    p
}

fn sync_op(lease: &str, files: Value, extra: Value) -> Value {
    let mut op = json!({"operationId": "op", "files": files});
    for (k, v) in extra.as_object().unwrap() {
        op[k] = v.clone();
    }
    on_lease(lease, json!({"operations": [op]}))
}

fn outside(path: &str) -> String {
    format!("Path \"{path}\" is outside the lease workspace.")
}

fn invalid(message: &str) -> String {
    format!("Invalid input: {message}")
}

#[test]
fn every_bad_request_gets_its_exact_error_and_writes_nothing_outside() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let lease_dir = w.root.path().join(&lease);
    std::fs::write(lease_dir.join("a-file"), "x").unwrap();
    // where sync-out cases would write on the host: must stay empty
    let canary = tempfile::tempdir().unwrap();
    let out = |name: &str| canary.path().join(name).display().to_string();
    let host_file = tempfile::NamedTempFile::new().unwrap();
    let host_file = host_file.path().display().to_string();
    let big = "x".repeat(200_000);
    let many: Vec<String> = vec!["y".repeat(100_000); 21];
    let cases = vec![
        Case {
            name: "exec cwd traversal",
            method: "environmentExecute",
            params: exec(&lease, json!({"cwd": "../.."})),
            code: -32602,
            message: outside("../.."),
        },
        // `/etc` is a directory of the sandbox, a cwd like any other now; one the sandbox
        // lacks is refused after bwrap tried it.
        Case {
            name: "exec cwd absolute, missing in the sandbox",
            method: "environmentExecute",
            params: exec(&lease, json!({"cwd": "/envrt-nowhere"})),
            code: -32602,
            message: invalid("cwd \"/envrt-nowhere\" is not a directory in the environment."),
        },
        Case {
            name: "exec cwd climbing out of /workspace",
            method: "environmentExecute",
            params: exec(&lease, json!({"cwd": "/workspace/../etc"})),
            code: -32602,
            message: outside("/workspace/../etc"),
        },
        Case {
            name: "exec cwd with NUL",
            method: "environmentExecute",
            params: exec(&lease, json!({"cwd": "a\u{0}b"})),
            code: -32602,
            message: outside("a\u{0}b"),
        },
        Case {
            name: "exec cwd is a file",
            method: "environmentExecute",
            params: exec(&lease, json!({"cwd": "a-file"})),
            code: -32602,
            message: invalid("cwd \"a-file\" is not a directory in the environment."),
        },
        Case {
            name: "exec empty command",
            method: "environmentExecute",
            params: exec(&lease, json!({"command": ""})),
            code: -32602,
            message: invalid("command must not be empty"),
        },
        Case {
            name: "exec NUL in command",
            method: "environmentExecute",
            params: exec(&lease, json!({"command": "tr\u{0}ue"})),
            code: -32602,
            message: invalid("the command and its arguments must not contain NUL bytes"),
        },
        Case {
            name: "exec NUL in argument",
            method: "environmentExecute",
            params: exec(&lease, json!({"command": "echo", "args": ["a\u{0}b"]})),
            code: -32602,
            message: invalid("the command and its arguments must not contain NUL bytes"),
        },
        Case {
            name: "exec empty env name",
            method: "environmentExecute",
            params: exec(&lease, json!({"env": {"": "x"}})),
            code: -32602,
            message: invalid("environment variable name \"\" is not valid"),
        },
        Case {
            name: "exec env name with =",
            method: "environmentExecute",
            params: exec(&lease, json!({"env": {"A=B": "x"}})),
            code: -32602,
            message: invalid("environment variable name \"A=B\" is not valid"),
        },
        Case {
            name: "exec env name with NUL",
            method: "environmentExecute",
            params: exec(&lease, json!({"env": {"A\u{0}B": "x"}})),
            code: -32602,
            message: invalid("environment variable name \"A\\0B\" is not valid"),
        },
        Case {
            name: "exec env value with NUL",
            method: "environmentExecute",
            params: exec(&lease, json!({"env": {"X": "a\u{0}b"}})),
            code: -32602,
            message: invalid("environment variable X contains a NUL byte"),
        },
        Case {
            name: "exec one huge argument",
            method: "environmentExecute",
            params: exec(&lease, json!({"args": [big]})),
            code: -32602,
            message: invalid("argument 1 is 200000 bytes, over the limit of 131071 bytes for one argument or variable"),
        },
        Case {
            name: "exec huge argv",
            method: "environmentExecute",
            params: exec(&lease, json!({"args": many})),
            code: -32602,
            message: invalid("arguments and environment take 2100202 bytes, over the limit of 2031616 bytes"),
        },
        Case {
            name: "exec huge env value",
            method: "environmentExecute",
            params: exec(&lease, json!({"env": {"BIG": big}})),
            code: -32602,
            message: invalid(
                "environment variable BIG is 200004 bytes, over the limit of 131071 bytes for one argument or variable",
            ),
        },
        Case {
            name: "exec stdin not base64",
            method: "environmentExecuteBinary",
            params: exec(&lease, json!({"stdin": "not base64!"})),
            code: -32602,
            message: "stdin must be a well-formed base64 string".into(),
        },
        Case {
            name: "exec without a lease id",
            method: "environmentExecute",
            params: json!({"lease": {}, "command": "true"}),
            code: -32602,
            message: "lease.providerLeaseId is required".into(),
        },
        Case {
            name: "exec forged lease id",
            method: "environmentExecute",
            params: exec("../x", json!({})),
            code: -32002,
            message: "Lease resource \"../x\" does not exist.".into(),
        },
        Case {
            name: "exec unknown lease",
            method: "environmentExecute",
            params: exec("sbx-00000000-0000-4000-8000-000000000000", json!({})),
            code: -32002,
            message: "Lease resource \"sbx-00000000-0000-4000-8000-000000000000\" does not exist.".into(),
        },
        Case {
            name: "exec params of the wrong shape",
            method: "environmentExecute",
            params: json!([1, 2]),
            code: -32602,
            message: "Invalid params for environmentExecute: invalid type: integer `1`, expected struct LeaseRef"
                .into(),
        },
        Case {
            name: "sync in target traversal",
            method: "environmentSyncIn",
            params: sync_op(
                &lease,
                json!([{"sourcePath": host_file, "targetPath": "../../x", "kind": "file"}]),
                json!({}),
            ),
            code: -32602,
            message: outside("../../x"),
        },
        Case {
            // any path of the sandbox is taken (envrtFilesAnywhere); its root is read-only
            name: "sync in target on the sandbox's read-only root",
            method: "environmentSyncIn",
            params: sync_op(
                &lease,
                json!([{"sourcePath": host_file, "targetPath": "/etc/x", "kind": "file"}]),
                json!({}),
            ),
            code: -32002,
            message: "Writing \"/etc/x\" in the sandbox: Read-only file system (os error 30)".into(),
        },
        Case {
            name: "sync in target with NUL",
            method: "environmentSyncIn",
            params: sync_op(
                &lease,
                json!([{"sourcePath": host_file, "targetPath": "/workspace/a\u{0}b", "kind": "file"}]),
                json!({}),
            ),
            code: -32602,
            message: outside("/workspace/a\u{0}b"),
        },
        Case {
            name: "sync in relative host source",
            method: "environmentSyncIn",
            params: sync_op(
                &lease,
                json!([{"sourcePath": "rel/x", "targetPath": "/workspace/a", "kind": "file"}]),
                json!({}),
            ),
            code: -32602,
            message: invalid("host path \"rel/x\" must be absolute and free of \"..\""),
        },
        Case {
            name: "sync in host source with ..",
            method: "environmentSyncIn",
            params: sync_op(
                &lease,
                json!([{"sourcePath": "/tmp/../etc/hostname", "targetPath": "/workspace/a", "kind": "file"}]),
                json!({}),
            ),
            code: -32602,
            message: invalid("host path \"/tmp/../etc/hostname\" must be absolute and free of \"..\""),
        },
        Case {
            name: "sync in host source with NUL",
            method: "environmentSyncIn",
            params: sync_op(
                &lease,
                json!([{"sourcePath": "/etc/host\u{0}name", "targetPath": "/workspace/a", "kind": "file"}]),
                json!({}),
            ),
            code: -32602,
            message: invalid("host path \"/etc/host\\0name\" contains a NUL byte"),
        },
        Case {
            name: "sync in missing source",
            method: "environmentSyncIn",
            params: sync_op(
                &lease,
                json!([{"sourcePath": "/nonexistent/envrt", "targetPath": "/workspace/a", "kind": "file"}]),
                json!({}),
            ),
            code: -32002,
            message: "Sync source \"/nonexistent/envrt\" does not exist.".into(),
        },
        Case {
            name: "sync in kind mismatch",
            method: "environmentSyncIn",
            params: sync_op(
                &lease,
                json!([{"sourcePath": host_file, "targetPath": "/workspace/a", "kind": "directory"}]),
                json!({}),
            ),
            code: -32002,
            message: format!("Sync source \"{host_file}\" is not a directory."),
        },
        Case {
            name: "sync in bad exclude glob",
            method: "environmentSyncIn",
            params: sync_op(
                &lease,
                json!([{"sourcePath": "/etc", "targetPath": "/workspace/e", "kind": "directory", "exclude": ["["]}]),
                json!({}),
            ),
            code: -32602,
            message: "Exclude pattern \"[\" is not a valid glob.".into(),
        },
        Case {
            name: "sync in post-upload cwd outside",
            method: "environmentSyncIn",
            params: sync_op(
                &lease,
                json!([{"sourcePath": host_file, "targetPath": "/workspace/t/a", "kind": "file"}]),
                json!({"postUploadCommands": [{"command": "true", "cwd": "/tmp"}]}),
            ),
            code: -32602,
            message: "Post-upload command cwd \"/tmp\" must be an absolute path under one of the operation's targets."
                .into(),
        },
        Case {
            name: "sync in post-upload command with NUL",
            method: "environmentSyncIn",
            params: sync_op(
                &lease,
                json!([{"sourcePath": host_file, "targetPath": "/workspace/t/a", "kind": "file"}]),
                json!({"postUploadCommands": [{"command": "tr\u{0}ue"}]}),
            ),
            code: -32602,
            message: invalid("the command and its arguments must not contain NUL bytes"),
        },
        Case {
            // read in the sandbox, whose minimal /etc has no shadow file
            name: "sync out source the sandbox lacks",
            method: "environmentSyncOut",
            params: sync_op(
                &lease,
                json!([{"sourcePath": "/etc/shadow", "targetPath": out("shadow"), "kind": "file"}]),
                json!({}),
            ),
            code: -32002,
            message: "Sync source \"/etc/shadow\" does not exist.".into(),
        },
        Case {
            name: "sync out source traversal",
            method: "environmentSyncOut",
            params: sync_op(
                &lease,
                json!([{"sourcePath": "../../etc", "targetPath": out("etc"), "kind": "directory"}]),
                json!({}),
            ),
            code: -32602,
            message: outside("../../etc"),
        },
        Case {
            name: "sync out relative host target",
            method: "environmentSyncOut",
            params: sync_op(
                &lease,
                json!([{"sourcePath": "/workspace", "targetPath": "back", "kind": "directory"}]),
                json!({}),
            ),
            code: -32602,
            message: invalid("host path \"back\" must be absolute and free of \"..\""),
        },
        Case {
            name: "sync out host target with NUL",
            method: "environmentSyncOut",
            params: sync_op(
                &lease,
                json!([{"sourcePath": "/workspace", "targetPath": format!("{}/a\u{0}b", canary.path().display()), "kind": "directory"}]),
                json!({}),
            ),
            code: -32602,
            message: invalid(&format!(
                "host path \"{}/a\\0b\" contains a NUL byte",
                canary.path().display()
            )),
        },
        Case {
            name: "sync out with post-upload commands",
            method: "environmentSyncOut",
            params: sync_op(
                &lease,
                json!([{"sourcePath": "/workspace", "targetPath": out("ws"), "kind": "directory"}]),
                json!({"postUploadCommands": [{"command": "true"}]}),
            ),
            code: -32602,
            message: invalid("postUploadCommands are only run by environmentSyncIn"),
        },
        Case {
            name: "realize outside",
            method: "environmentRealizeWorkspace",
            params: on_lease(&lease, json!({"workspace": {"remotePath": "/etc"}})),
            code: -32602,
            message: outside("/etc"),
        },
        Case {
            name: "duplex write on a forged pair",
            method: "duplexChannelWrite",
            params: json!({"hostRouteId": "duplex-route-1", "workerSessionId": "forged", "data": "aGk="}),
            code: -32002,
            message: "No live duplex channel for pair (duplex-route-1, forged)".into(),
        },
        Case {
            name: "duplex stop on a forged pair",
            method: "duplexChannelStop",
            params: json!({"hostRouteId": "duplex-route-2", "workerSessionId": "forged"}),
            code: -32002,
            message: "No live duplex channel for pair (duplex-route-2, forged)".into(),
        },
        Case {
            name: "duplex open with NUL in argv",
            method: "duplexChannelOpen",
            params: json!({"hostRouteId": "r-1", "providerLeaseId": lease, "command": ["c\u{0}at"]}),
            code: -32602,
            message: invalid("the command and its arguments must not contain NUL bytes"),
        },
        Case {
            name: "duplex open on a forged lease",
            method: "duplexChannelOpen",
            params: json!({"hostRouteId": "r-2", "providerLeaseId": "sbx-forged", "command": ["cat"]}),
            code: -32002,
            message: "Lease resource \"sbx-forged\" does not exist.".into(),
        },
        Case {
            name: "unknown method",
            method: "environmentFrobnicate",
            params: json!({}),
            code: -32601,
            message: "Unknown method: environmentFrobnicate".into(),
        },
    ];
    assert!(cases.len() >= 40, "{} cases", cases.len());
    for case in cases {
        let (code, message) = w.err(case.method, case.params);
        assert_eq!((code, message), (case.code, case.message), "case: {}", case.name);
    }
    // nothing reached the host side, nothing was placed in the workspace
    assert_eq!(std::fs::read_dir(canary.path()).unwrap().count(), 0);
    let mut left: Vec<String> = std::fs::read_dir(&lease_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["a-file"]);
    assert_eq!(w.ok("health", json!({}))["status"], "ok");
}

#[test]
fn garbage_and_oversized_frames_are_answered_and_the_worker_serves_on() {
    let mut w = Worker::start_with(&["--max-line-bytes", "100000"], &[]);
    let r = w.call("initialize", init_params());
    assert_eq!(r["result"]["ok"], true);
    let frames: Vec<(Vec<u8>, i64, String)> = vec![
        (
            b"not json".to_vec(),
            -32700,
            "Parse error: Invalid JSON: not json".into(),
        ),
        (
            b"\xff\xfe{}".to_vec(),
            -32700,
            "Parse error: Invalid JSON: line is not UTF-8".into(),
        ),
        (
            b"[1, 2]".to_vec(),
            -32700,
            "Parse error: Invalid JSON-RPC message: expected an object".into(),
        ),
        (
            br#"{"jsonrpc":"1.0","id":5,"method":"health"}"#.to_vec(),
            -32700,
            "Parse error: Invalid or missing jsonrpc version (expected \"2.0\", got \"1.0\")".into(),
        ),
        (
            [&b"{\"big\":\""[..], &vec![b'x'; 200_000], b"\"}"].concat(),
            -32600,
            "Invalid request: line longer than 100000 bytes".into(),
        ),
    ];
    for (frame, code, message) in frames {
        w.send_raw_bytes(&frame);
        let answer = w.next_line();
        assert_eq!(answer["id"], Value::Null, "{answer}");
        assert_eq!(
            (
                answer["error"]["code"].as_i64().unwrap(),
                answer["error"]["message"].as_str().unwrap()
            ),
            (code, message.as_str())
        );
    }
    // an oversized request written the way the host writes requests is answered to its id
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"environmentExecute\",\"params\":{{\"stdin\":\"{}\"}}}}",
        "z".repeat(200_000)
    );
    w.send_raw(&big);
    let answer = w.next_line();
    assert_eq!(
        (answer["id"].clone(), answer["error"].clone()),
        (
            json!(99),
            json!({"code": -32600, "message": "Invalid request: line longer than 100000 bytes"})
        )
    );
    // an envrt.cancel for nothing, a notification and a response are ignored quietly
    w.send_raw(r#"{"jsonrpc":"2.0","method":"envrt.cancel","params":{"id":424242}}"#);
    w.send_raw(r#"{"jsonrpc":"2.0","method":"onEvent","params":{}}"#);
    w.send_raw(r#"{"jsonrpc":"2.0","id":77,"result":null}"#);
    assert_eq!(w.ok("health", json!({}))["status"], "ok");
}

#[test]
fn hostile_trees_and_variables_get_the_right_behaviour() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let lease_dir = w.root.path().join(&lease);
    // a host tree whose link climbs out of the target: refused, nothing placed
    let host = tempfile::tempdir().unwrap();
    let src = host.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("ok.txt"), "fine").unwrap();
    symlink("../../../../../../etc", src.join("sub/evil")).unwrap();
    let (code, message) = w.err(
        "environmentSyncIn",
        sync_op(
            &lease,
            json!([{"sourcePath": src, "targetPath": "/workspace/t", "kind": "directory"}]),
            json!({}),
        ),
    );
    assert_eq!(
        (code, message.as_str()),
        (
            -32602,
            "Entry \"sub/evil\" would be written outside the target \"/workspace/t\"."
        )
    );
    assert!(!lease_dir.join("t").exists());
    // a link the command made towards /etc leads to the sandbox's /etc (read in the
    // sandbox, whole-environment), never the host's: the sandbox has no shadow file
    symlink("/etc", lease_dir.join("etc-link")).unwrap();
    let target = host.path().join("out");
    let (code, message) = w.err(
        "environmentSyncOut",
        sync_op(
            &lease,
            json!([{"sourcePath": "/workspace/etc-link/shadow", "targetPath": target, "kind": "file", "followSymlinks": true}]),
            json!({}),
        ),
    );
    let missing = "Sync source \"/workspace/etc-link/shadow\" does not exist.";
    assert_eq!((code, message.as_str()), (-32002, missing));
    assert!(!target.exists());
    // LD_* variables act on the command only (it runs; the bogus preload is its warning)
    let r = w.ok(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sh", "args": ["-c", "echo ran"], "env": {"LD_PRELOAD": "/nonexistent/evil.so", "LD_LIBRARY_PATH": "/nonexistent"}}),
        ),
    );
    assert_eq!(
        (r["exitCode"].clone(), r["stdout"].clone()),
        (json!(0), json!("ran\n")),
        "{r}"
    );
    // a zero timeout times out at once
    let r = w.ok(
        "environmentExecute",
        on_lease(&lease, json!({"command": "sleep", "args": ["30"], "timeoutMs": 0})),
    );
    assert_eq!(r["timedOut"], true, "{r}");
    // a wide tree goes both ways whole
    let wide = host.path().join("wide");
    std::fs::create_dir(&wide).unwrap();
    for i in 0..3000 {
        std::fs::write(wide.join(format!("f{i:04}")), i.to_string()).unwrap();
    }
    let r = w.ok(
        "environmentSyncIn",
        sync_op(
            &lease,
            json!([{"sourcePath": wide, "targetPath": "/workspace/wide", "kind": "directory"}]),
            json!({}),
        ),
    );
    assert_eq!(r["operations"][0]["filesTransferred"], 3000);
    let back = host.path().join("wide-back");
    let r = w.ok(
        "environmentSyncOut",
        sync_op(
            &lease,
            json!([{"sourcePath": "/workspace/wide", "targetPath": back, "kind": "directory"}]),
            json!({}),
        ),
    );
    assert_eq!(r["operations"][0]["filesTransferred"], 3000);
    assert_eq!(std::fs::read_to_string(Path::new(&back).join("f2999")).unwrap(), "2999");
}
