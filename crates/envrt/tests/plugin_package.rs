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
