//! `RuntimeBuilder` over the registry: every enabled driver registered at its settings,
//! the program's own drivers after them, left-out keys, and drivers that cannot be set up
//! skipped under their key (leniently) or failing the build (strictly).

use std::sync::Arc;

use envrt::core::testkit::{ProbeDriver, ProbeShape};
use envrt::{BuildError, DriverError, EnvironmentDriver, RuntimeBuilder};

/// A builder whose built-in drivers keep their files in `dir`.
fn builder(dir: &tempfile::TempDir) -> RuntimeBuilder {
    let _ = dir;
    let builder = RuntimeBuilder::new();
    #[cfg(feature = "local")]
    let builder = builder.configure(envrt::local::LocalConfig {
        root: Some(dir.path().join("workspaces")),
        ..Default::default()
    });
    builder
}

#[tokio::test]
async fn extra_drivers_are_registered_and_replace_built_ins() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Arc::new(ProbeDriver::new("local", ProbeShape::default(), None));
    let runtime = builder(&dir)
        .driver(Arc::new(ProbeDriver::new("probe", ProbeShape::full(), None)))
        .driver(probe.clone())
        .build()
        .await
        .unwrap();
    let mut expected: Vec<String> = RuntimeBuilder::enabled_drivers()
        .iter()
        .map(|s| s.to_string())
        .chain(["local".into(), "probe".into()])
        .collect();
    expected.sort();
    expected.dedup();
    assert_eq!(runtime.driver_keys(), expected);
    let registered = runtime.driver("local").unwrap();
    assert!(std::ptr::addr_eq(
        Arc::as_ptr(&registered),
        Arc::as_ptr(&(probe as Arc<dyn EnvironmentDriver>))
    ));
}

#[tokio::test]
async fn without_driver_leaves_a_built_in_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut builder = builder(&dir);
    for key in RuntimeBuilder::enabled_drivers() {
        builder = builder.without_driver(*key);
    }
    let runtime = builder.build().await.unwrap();
    assert!(runtime.driver_keys().is_empty());
}

#[cfg(feature = "local")]
#[tokio::test]
async fn the_local_feature_registers_a_working_local_driver() {
    use envrt::core::{AcquireRequest, Environment, ExecuteRequest, LeaseStatus};
    let dir = tempfile::tempdir().unwrap();
    let runtime = builder(&dir).build().await.unwrap();
    runtime
        .put_environment(Environment::new("here", "Here", "local"))
        .await
        .unwrap();
    let lease = runtime
        .acquire_lease(AcquireRequest::new("here", "acme"))
        .await
        .unwrap();
    let result = runtime
        .execute(&lease.id, ExecuteRequest::new("sh", ["-c", "printf hi; exit 3"]))
        .await
        .unwrap();
    assert_eq!((result.exit_code, result.stdout.as_slice()), (Some(3), &b"hi"[..]));
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(std::fs::read_dir(dir.path().join("workspaces")).unwrap().count(), 0);
}

#[cfg(feature = "docker")]
#[tokio::test]
async fn an_unreachable_docker_engine_is_skipped_leniently_and_fails_a_strict_build() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("no-engine.sock");
    let config = || envrt::docker::DockerConfig {
        host: Some(format!("unix://{}", socket.display())),
        connect_timeout: std::time::Duration::from_secs(5),
        ..Default::default()
    };
    let (runtime, skipped) = builder(&dir).configure(config()).build_lenient().await;
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].key, "docker");
    assert!(runtime.driver("docker").is_none());
    assert_eq!(runtime.driver("local").is_some(), cfg!(feature = "local"));
    let e = builder(&dir).configure(config()).build().await.unwrap_err();
    assert_eq!(e.key, "docker");
    assert_eq!(
        e.to_string(),
        format!(
            "Environment driver \"docker\" could not be set up: {}",
            skipped[0].error
        )
    );
}

#[cfg(feature = "plugin-sandbox")]
#[tokio::test]
async fn a_plugin_whose_worker_cannot_start_is_skipped_under_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = envrt::plugin_sandbox::PluginManifest::from_json(
        r#"{"id":"ghost","worker":{"command":["/nonexistent/envrt-worker"]},
            "environmentDrivers":[{"driverKey":"ghostbox","kind":"sandbox_provider","displayName":"G"}]}"#,
    )
    .unwrap();
    let (runtime, skipped) = builder(&dir)
        .configure_with(|s: &mut envrt::plugin_sandbox::SandboxSettings| s.plugins.push((manifest, Default::default())))
        .build_lenient()
        .await;
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].key, "ghostbox");
    assert!(runtime.driver("ghostbox").is_none());
}

#[test]
fn enabled_drivers_follow_the_features() {
    let keys = RuntimeBuilder::enabled_drivers();
    assert_eq!(keys.contains(&"local"), cfg!(feature = "local"));
    assert_eq!(keys.contains(&"docker"), cfg!(feature = "docker"));
    assert!(!keys.contains(&"sandbox"));
}

#[test]
fn a_build_error_names_the_driver_and_its_cause() {
    let e = BuildError {
        key: "docker".into(),
        source: DriverError::other("Cannot reach the Docker engine at unix:///nope."),
    };
    assert_eq!(
        e.to_string(),
        "Environment driver \"docker\" could not be set up: Cannot reach the Docker engine at unix:///nope."
    );
}
