//! Interop oracle: the same requests an SDK-built worker (`@paperclipai/plugin-sdk@2026.916.1`,
//! transcript in the project notes) was sent get answers of the same shape from ours.
//! Oracle lines below are copied from that transcript; `metadata` objects are
//! provider-specific and compared only as "an object".

mod common;

use common::*;
use serde_json::{Value, json};

/// The JSON shape of a value: types, object keys, first array element.
fn shape(v: &Value) -> Value {
    match v {
        Value::Null => json!("null"),
        Value::Bool(_) => json!("bool"),
        Value::Number(_) => json!("number"),
        Value::String(_) => json!("string"),
        Value::Array(items) => json!([items.first().map(shape)]),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let s = if k == "metadata" && v.is_object() {
                        json!("object")
                    } else {
                        shape(v)
                    };
                    (k.clone(), s)
                })
                .collect(),
        ),
    }
}

fn same_shape(ours: &Value, oracle: &str) {
    let oracle: Value = serde_json::from_str(oracle).unwrap();
    let mut ours = ours.clone();
    let mut theirs = oracle.clone();
    // Ids differ between sessions; only the presence and type matter.
    for v in [&mut ours, &mut theirs] {
        if let Some(obj) = v.as_object_mut() {
            obj.remove("id");
        }
    }
    assert_eq!(shape(&ours), shape(&theirs), "\nours:   {ours}\noracle: {oracle}");
}

#[test]
fn answers_have_the_sdk_workers_shapes() {
    let mut w = Worker::ready();
    let acquire = w.call(
        "environmentAcquireLease",
        json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1", "config": {}, "runId": "run-1"}),
    );
    same_shape(
        &acquire,
        r#"{"jsonrpc":"2.0","id":5,"result":{"providerLeaseId":"fxl-235166e6","metadata":{"fixtureRoot":"/tmp/x","remoteCwd":"/tmp/x/workspace","runId":"run-1"}}}"#,
    );
    let lease = acquire["result"]["providerLeaseId"].as_str().unwrap().to_owned();
    same_shape(
        &w.call(
            "environmentRealizeWorkspace",
            on_lease(&lease, json!({"workspace": {"mode": "isolated"}})),
        ),
        r#"{"jsonrpc":"2.0","id":6,"result":{"cwd":"/tmp/x/workspace","metadata":{"remoteCwd":"/tmp/x/workspace"}}}"#,
    );
    let id = w.send(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "/bin/sh", "args": ["-c", "echo out1; echo err1 1>&2; sleep 0.2; printf 'out2 \\303\\251'; cat"],
                "stdin": "from-stdin\n", "timeoutMs": 5000}),
        ),
    );
    let r = w.wait_response(id);
    same_shape(
        &r,
        r#"{"jsonrpc":"2.0","id":7,"result":{"exitCode":0,"signal":null,"timedOut":false,"stdout":"out1\nout2 éfrom-stdin\n","stderr":"err1\n","metadata":{"stdoutTruncated":false,"stderrTruncated":false}}}"#,
    );
    let mut values = r["result"].clone();
    values.as_object_mut().unwrap().remove("metadata");
    assert_eq!(
        values,
        json!({"exitCode": 0, "signal": null, "timedOut": false, "stdout": "out1\nout2 éfrom-stdin\n", "stderr": "err1\n"})
    );
    let log = w.wait_note(|n| n["method"] == "execute.log" && n["params"]["chunk"] == "out1\n");
    assert_eq!(
        log,
        json!({"jsonrpc": "2.0", "method": "execute.log", "params": {"stream": "stdout", "chunk": "out1\n"}, "paperclipInvocationId": format!("inv-{id}")})
    );
    let r = w.call(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "/bin/sh", "args": ["-c", "echo start; sleep 30"], "timeoutMs": 500}),
        ),
    );
    same_shape(
        &r,
        r#"{"jsonrpc":"2.0","id":10,"result":{"exitCode":null,"signal":"SIGTERM","timedOut":true,"stdout":"start\n","stderr":"","metadata":{"stdoutTruncated":false,"stderrTruncated":false}}}"#,
    );
    // Sync in and out.
    let src = tempfile::tempdir().unwrap();
    std::fs::create_dir(src.path().join("sub")).unwrap();
    std::fs::write(src.path().join("a.txt"), "hello").unwrap();
    std::fs::write(src.path().join("sub/b.txt"), "world!!").unwrap();
    std::fs::write(src.path().join("x.log"), "skip").unwrap();
    let r = w.call(
        "environmentSyncIn",
        on_lease(&lease, json!({"operations": [{"operationId": "op-in-1",
            "files": [{"sourcePath": src.path(), "targetPath": "/workspace/proj", "kind": "directory", "exclude": ["*.log"], "access": "rw"}],
            "postUploadCommands": [{"command": "ls -R > listing.txt", "cwd": "/workspace/proj"}]}]})),
    );
    same_shape(
        &r,
        r#"{"jsonrpc":"2.0","id":12,"result":{"operations":[{"operationId":"op-in-1","filesTransferred":2,"bytesTransferred":12}]}}"#,
    );
    assert_eq!(
        r["result"]["operations"][0],
        json!({"operationId": "op-in-1", "filesTransferred": 2, "bytesTransferred": 12})
    );
    let dst = tempfile::tempdir().unwrap();
    let r = w.call(
        "environmentSyncOut",
        on_lease(&lease, json!({"operations": [{"operationId": "op-out-1", "files": [
            {"sourcePath": "/workspace/proj", "targetPath": dst.path().join("back"), "kind": "directory"},
            {"sourcePath": "/workspace/proj/a.txt", "targetPath": dst.path().join("secret.txt"), "kind": "file", "mode": 384}]}]})),
    );
    same_shape(
        &r,
        r#"{"jsonrpc":"2.0","id":13,"result":{"operations":[{"operationId":"op-out-1","filesTransferred":4,"bytesTransferred":57}]}}"#,
    );
    assert_eq!(r["result"]["operations"][0]["filesTransferred"], 4);
    // Duplex.
    let r = w.call(
        "duplexChannelOpen",
        json!({"hostRouteId": "duplex-route-1", "driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1",
            "providerLeaseId": lease, "command": ["cat"]}),
    );
    same_shape(
        &r,
        r#"{"jsonrpc":"2.0","id":14,"result":{"hostRouteId":"duplex-route-1","workerSessionId":"dws-d312474c"}}"#,
    );
    let session = r["result"]["workerSessionId"].as_str().unwrap().to_owned();
    let pair = json!({"hostRouteId": "duplex-route-1", "workerSessionId": session});
    let mut write = pair.clone();
    write["data"] = json!("aGVsbG8A/wo=");
    same_shape(
        &w.call("duplexChannelWrite", write),
        r#"{"jsonrpc":"2.0","id":15,"result":null}"#,
    );
    let data = w.wait_note(|n| n["method"] == "duplexChannel.data");
    same_shape(
        &data,
        r#"{"jsonrpc":"2.0","method":"duplexChannel.data","params":{"hostRouteId":"duplex-route-1","workerSessionId":"dws-d3","chunk":"aGVsbG8A/wo="},"paperclipInvocationId":"inv-14"}"#,
    );
    assert_eq!(data["params"]["chunk"], "aGVsbG8A/wo=");
    let r = w.call(
        "duplexChannelWrite",
        json!({"hostRouteId": "duplex-route-1", "workerSessionId": "wrong", "data": "aGk="}),
    );
    assert_eq!(
        r["error"],
        json!({"code": -32002, "message": "No live duplex channel for pair (duplex-route-1, wrong)"})
    );
    let mut bad = pair.clone();
    bad["data"] = json!("not base64!!");
    let r = w.call("duplexChannelWrite", bad);
    assert_eq!(
        r["error"],
        json!({"code": -32602, "message": "data must be a non-empty, well-formed base64 string"})
    );
    same_shape(
        &w.call("duplexChannelStop", pair.clone()),
        r#"{"jsonrpc":"2.0","id":18,"result":null}"#,
    );
    let exit = w.wait_note(|n| n["method"] == "duplexChannel.exit");
    same_shape(
        &exit,
        r#"{"jsonrpc":"2.0","method":"duplexChannel.exit","params":{"hostRouteId":"duplex-route-1","workerSessionId":"dws-d3","exitCode":null,"transportClosed":false},"paperclipInvocationId":"inv-14"}"#,
    );
    assert_eq!(exit["params"]["exitCode"], Value::Null);
    same_shape(
        &w.call("duplexChannelClose", pair.clone()),
        r#"{"jsonrpc":"2.0","id":19,"result":{"hostRouteId":"duplex-route-1","workerSessionId":"dws-d3"}}"#,
    );
    same_shape(
        &w.call("duplexChannelClose", json!({"hostRouteId": "duplex-route-1"})),
        r#"{"jsonrpc":"2.0","id":20,"result":{"hostRouteId":"duplex-route-1"}}"#,
    );
    // Lease lifecycle.
    let base = |id: Value| json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1", "config": {}, "providerLeaseId": id});
    same_shape(
        &w.call("environmentResumeLease", base(json!(lease))),
        r#"{"jsonrpc":"2.0","id":23,"result":{"providerLeaseId":"fxl-2","metadata":{"fixtureRoot":"/tmp/x"}}}"#,
    );
    same_shape(
        &w.call("environmentReleaseLease", base(json!(lease))),
        r#"{"jsonrpc":"2.0","id":24,"result":{"providerLeaseId":"fxl-2","state":"stopped"}}"#,
    );
    same_shape(
        &w.call("environmentDestroyLease", base(json!(lease))),
        r#"{"jsonrpc":"2.0","id":26,"result":{"providerLeaseId":"fxl-2","state":"destroyed"}}"#,
    );
    same_shape(
        &w.call("environmentResumeLease", base(json!(lease))),
        r#"{"jsonrpc":"2.0","id":25,"result":{"providerLeaseId":null,"metadata":{"gone":true}}}"#,
    );
    same_shape(
        &w.call("environmentReleaseLease", base(Value::Null)),
        r#"{"jsonrpc":"2.0","id":27,"result":null}"#,
    );
    same_shape(
        &w.call("shutdown", json!({})),
        r#"{"jsonrpc":"2.0","id":31,"result":null}"#,
    );
    assert_eq!(w.wait_exit(), Some(0));
}
