//! [`RuntimeBuilder`]: an [`EnvironmentRuntime`] with every driver this build enables.

use std::collections::BTreeSet;
use std::sync::Arc;

use envrt_runtime_core::{DriverError, EnvironmentDriver, EnvironmentRuntime, LeaseStore, MemoryStore};

/// A driver that [`RuntimeBuilder::build_lenient`] could not set up (an unreachable Docker
/// engine, say); the rest of the runtime works without it.
#[derive(Debug)]
pub struct SkippedDriver {
    /// The driver key.
    pub key: String,
    /// Why it could not be set up.
    pub error: DriverError,
}

/// [`RuntimeBuilder::build`] failed to set up an enabled driver.
#[derive(Debug, thiserror::Error)]
#[error("Environment driver \"{key}\" could not be set up: {source}")]
pub struct BuildError {
    /// The driver key.
    pub key: String,
    /// The driver's error.
    #[source]
    pub source: DriverError,
}

/// Builds an [`EnvironmentRuntime`] that registers every driver enabled by cargo features
/// (`local`, `docker`, `plugin-sandbox`), then the drivers added with
/// [`driver`](Self::driver), which replace a built-in one with the same key.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use envrt::RuntimeBuilder;
/// let dir = tempfile::tempdir().unwrap();
/// let builder = RuntimeBuilder::new();
/// #[cfg(feature = "local")]
/// let builder = builder.local_config(envrt::local::LocalConfig {
///     root: Some(dir.path().join("workspaces")),
///     ..Default::default()
/// });
/// let runtime = builder.build().await.unwrap();
/// for key in RuntimeBuilder::enabled_drivers() {
///     assert!(runtime.driver(key).is_some());
/// }
/// # });
/// ```
pub struct RuntimeBuilder {
    store: Option<Arc<dyn LeaseStore>>,
    extra: Vec<Arc<dyn EnvironmentDriver>>,
    without: BTreeSet<String>,
    #[cfg(feature = "local")]
    local: envrt_driver_local::LocalConfig,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("store", &self.store.is_some())
            .field(
                "extra",
                &self.extra.iter().map(|d| d.key().to_owned()).collect::<Vec<_>>(),
            )
            .field("without", &self.without)
            .finish_non_exhaustive()
    }
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RuntimeBuilder {
    /// A builder with every enabled driver at its default configuration and an in-memory
    /// store.
    pub fn new() -> Self {
        RuntimeBuilder {
            store: None,
            extra: Vec::new(),
            without: BTreeSet::new(),
            #[cfg(feature = "local")]
            local: envrt_driver_local::LocalConfig::default(),
        }
    }

    /// The keys of the drivers this build enables, in registration order.
    pub fn enabled_drivers() -> &'static [&'static str] {
        &[
            #[cfg(feature = "local")]
            "local",
            #[cfg(feature = "docker")]
            "docker",
            #[cfg(feature = "plugin-sandbox")]
            "sandbox",
        ]
    }

    /// Uses `store` for environments and leases (e.g. a
    /// [`SqliteStore`](crate::SqliteStore) so leases outlive the process).
    pub fn store(mut self, store: Arc<dyn LeaseStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Registers `driver` after the built-in ones (replacing one with the same key).
    pub fn driver(mut self, driver: Arc<dyn EnvironmentDriver>) -> Self {
        self.extra.push(driver);
        self
    }

    /// Leaves the built-in driver `key` out.
    pub fn without_driver(mut self, key: impl Into<String>) -> Self {
        self.without.insert(key.into());
        self
    }

    /// Configures the local driver.
    #[cfg(feature = "local")]
    #[cfg_attr(docsrs, doc(cfg(feature = "local")))]
    pub fn local_config(mut self, config: envrt_driver_local::LocalConfig) -> Self {
        self.local = config;
        self
    }

    /// Builds the runtime; fails when an enabled driver cannot be set up.
    pub async fn build(self) -> Result<EnvironmentRuntime, BuildError> {
        let (runtime, skipped) = self.build_lenient().await;
        match skipped.into_iter().next() {
            Some(SkippedDriver { key, error }) => Err(BuildError { key, source: error }),
            None => Ok(runtime),
        }
    }

    /// Builds the runtime with every driver that could be set up, and says which could not
    /// (their keys stay unregistered).
    pub async fn build_lenient(self) -> (EnvironmentRuntime, Vec<SkippedDriver>) {
        let store = self.store.unwrap_or_else(|| Arc::new(MemoryStore::new()));
        let runtime = EnvironmentRuntime::with_store(store);
        let mut skipped = Vec::new();
        let wanted = |key: &str| !self.without.contains(key);
        let mut add = |key: &str, made: Result<Arc<dyn EnvironmentDriver>, DriverError>| match made {
            Ok(driver) => {
                runtime.register_driver(driver);
            }
            Err(error) => skipped.push(SkippedDriver {
                key: key.to_owned(),
                error,
            }),
        };
        #[cfg(feature = "local")]
        if wanted("local") {
            let made = envrt_driver_local::LocalDriver::new(self.local.clone());
            add("local", made.map(|d| Arc::new(d) as Arc<dyn EnvironmentDriver>));
        }
        let _ = (&wanted, &mut add);
        for driver in self.extra {
            runtime.register_driver(driver);
        }
        (runtime, skipped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envrt_runtime_core::testkit::{ProbeDriver, ProbeShape};

    /// A builder whose built-in drivers keep their files in `dir`.
    fn builder(dir: &tempfile::TempDir) -> RuntimeBuilder {
        let _ = dir;
        let builder = RuntimeBuilder::new();
        #[cfg(feature = "local")]
        let builder = builder.local_config(envrt_driver_local::LocalConfig {
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
        use envrt_runtime_core::{AcquireRequest, Environment, ExecuteRequest, LeaseStatus};
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

    #[test]
    fn enabled_drivers_follow_the_features() {
        let keys = RuntimeBuilder::enabled_drivers();
        assert_eq!(keys.contains(&"local"), cfg!(feature = "local"));
        assert_eq!(keys.contains(&"docker"), cfg!(feature = "docker"));
        assert_eq!(keys.contains(&"sandbox"), cfg!(feature = "plugin-sandbox"));
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
}
