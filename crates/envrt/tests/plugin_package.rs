//! `[[plugin]]` in `envrt.toml` naming a package directory (`paperclipPlugin` in its
//! `package.json`), as a Paperclip provider package is installed: the plugin's driver
//! runs real leases and its worker's own calls (`config.get`) are answered.
#![cfg(all(feature = "config", feature = "plugin-sandbox"))]

use std::path::Path;

use envrt::config::{Assembly, Paths};
use envrt::{AcquireRequest, ExecuteRequest, LeaseStatus};

#[tokio::test]
async fn a_plugin_package_dir_in_envrt_toml_runs_its_driver() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../driver-plugin-sandbox/tests/fixtures");
    assert!(
        fixtures
            .join("sdk-worker/node_modules/@paperclipai/plugin-sdk")
            .exists(),
        "the SDK fixture is not installed; run crates/driver-plugin-sandbox/scripts/install-sdk-fixture.sh"
    );
    let package = std::fs::canonicalize(fixtures.join("sdk-host-calls")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("envrt.toml");
    std::fs::write(
        &file,
        format!(
            "[[plugin]]\nmanifest = \"{}\"\n[plugin.config]\nregion = \"eu-1\"\n\n\
             [[environment]]\nid = \"cloud\"\ndriver = \"hostcalls\"\n",
            package.display()
        ),
    )
    .unwrap();
    let paths = Paths {
        config: Some(file),
        state_dir: dir.path().join("state"),
    };
    let assembly = Assembly::open(&paths, None).await.unwrap();
    assert!(assembly.skipped.is_empty(), "{:?}", assembly.skipped);
    let runtime = &assembly.runtime;
    let lease = runtime
        .acquire_lease(AcquireRequest::new("cloud", "local"))
        .await
        .unwrap();
    let result = runtime
        .execute(&lease.id, ExecuteRequest::new("calls", [r#"[{"op":"config.get"}]"#]))
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&result.stdout), r#"[{"ok":{"region":"eu-1"}}]"#);
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

/// A one-request HTTP server on 127.0.0.1 answering `hi`; its port.
fn serve_once() -> u16 {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
            head.push(byte[0]);
        }
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi");
    });
    port
}

#[tokio::test]
async fn a_plugins_secrets_allowlist_and_durable_state_come_from_envrt_toml() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../driver-plugin-sandbox/tests/fixtures");
    assert!(
        fixtures
            .join("sdk-worker/node_modules/@paperclipai/plugin-sdk")
            .exists(),
        "the SDK fixture is not installed; run crates/driver-plugin-sandbox/scripts/install-sdk-fixture.sh"
    );
    let package = std::fs::canonicalize(fixtures.join("sdk-host-calls")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("token");
    std::fs::write(&secret, "s3cr3t-value\n").unwrap();
    let port = serve_once();
    let file = dir.path().join("envrt.toml");
    std::fs::write(
        &file,
        format!(
            "[[plugin]]\nmanifest = \"{}\"\nsecrets = [\"file:{}\"]\nhttp_allow = [\"127.0.0.1:{port}\"]\n\n\
             [[environment]]\nid = \"cloud\"\ndriver = \"hostcalls\"\n",
            package.display(),
            secret.display()
        ),
    )
    .unwrap();
    let paths = Paths {
        config: Some(file),
        state_dir: dir.path().join("state"),
    };
    let state = r#"{"scopeKind":"environment","scopeId":"env-1","stateKey":"leases"}"#;
    // Two host programs in turn on the same state directory: the second reads what the
    // first worker wrote, from the runtime's sqlite store.
    for round in 0..2 {
        let assembly = Assembly::open(&paths, None).await.unwrap();
        assert!(assembly.skipped.is_empty(), "{:?}", assembly.skipped);
        let runtime = &assembly.runtime;
        let lease = runtime
            .acquire_lease(AcquireRequest::new("cloud", "local"))
            .await
            .unwrap();
        let calls = if round == 0 {
            format!(
                r#"[{{"op":"state.set","input":{state},"value":{{"hcl-1":"running"}}}},
                   {{"op":"secrets.resolve","ref":"file:{}"}},
                   {{"op":"secrets.resolve","ref":"env:HOME"}},
                   {{"op":"http.fetch","url":"http://127.0.0.1:{port}/x"}},
                   {{"op":"http.fetch","url":"http://localhost:1/"}}]"#,
                secret.display()
            )
        } else {
            format!(r#"[{{"op":"state.get","input":{state}}}]"#)
        };
        let result = runtime
            .execute(&lease.id, ExecuteRequest::new("calls", [calls]))
            .await
            .unwrap();
        let out: serde_json::Value = serde_json::from_slice(&result.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&result.stderr)));
        if round == 0 {
            assert_eq!(
                out,
                serde_json::json!([
                    {"ok": null},
                    {"ok": "s3cr3t-value"},
                    {"error": "secret reference \"env:HOME\" is not configured for plugin 'envrt.hostcalls'"},
                    {"ok": {"status": 200, "statusText": "OK", "echo": null, "body": "hi"}},
                    {"error": "\"http.fetch\" to localhost:1 refused: the host is not on the allowlist of plugin 'envrt.hostcalls'"},
                ])
            );
        } else {
            assert_eq!(out, serde_json::json!([{"ok": {"hcl-1": "running"}}]));
        }
        runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    }
}
