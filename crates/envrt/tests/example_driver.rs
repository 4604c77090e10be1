//! The example driver `refuse` (crates/driver-refuse, feature `refuse`) through the same
//! path as every driver: the registry knows its key, the builder registers it from its
//! descriptor, `caps` rows come from its descriptor, and a lease is refused with its text.
#![cfg(feature = "refuse")]

use envrt::{AcquireRequest, Environment, RuntimeBuilder};

#[tokio::test]
async fn the_refuse_driver_is_registered_described_and_refuses_leases() {
    assert!(envrt::known_drivers().contains(&"refuse"));
    assert!(RuntimeBuilder::enabled_drivers().contains(&"refuse"));
    let dir = tempfile::tempdir().unwrap();
    let builder = RuntimeBuilder::new().without_driver("docker");
    #[cfg(feature = "local")]
    let builder = builder.configure(envrt::local::LocalConfig {
        root: Some(dir.path().join("ws")),
        ..Default::default()
    });
    let runtime = builder.build().await.unwrap();
    assert!(runtime.driver("refuse").is_some());
    let environment = Environment::new("no", "No", "refuse");
    assert_eq!(
        envrt::registry::isolation(&environment),
        [("isolation".to_owned(), "nothing runs".to_owned())]
    );
    runtime.put_environment(environment).await.unwrap();
    let error = runtime
        .acquire_lease(AcquireRequest::new("no", "acme"))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("The refuse driver leases nothing."),
        "{error}"
    );
}
