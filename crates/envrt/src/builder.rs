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
/// (`local`, `docker`, `ssh`), then one sandbox driver per plugin added with `sandbox_plugin`
/// (feature `plugin-sandbox`: a plugin needs a manifest naming its worker), then the
/// drivers added with [`driver`](Self::driver). A later registration replaces an earlier
/// one with the same key.
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
    tenant: Option<String>,
    extra: Vec<Arc<dyn EnvironmentDriver>>,
    without: BTreeSet<String>,
    #[cfg(feature = "local")]
    local: envrt_driver_local::LocalConfig,
    #[cfg(feature = "docker")]
    docker: envrt_driver_docker::DockerConfig,
    #[cfg(feature = "ssh")]
    ssh: envrt_driver_ssh::SshConfig,
    #[cfg(feature = "plugin-sandbox")]
    plugins: Vec<(
        envrt_driver_plugin_sandbox::PluginManifest,
        envrt_driver_plugin_sandbox::SandboxOptions,
    )>,
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

/// The driver keys this build of envrt knows without any plugin: those the builder
/// registers by itself ([`RuntimeBuilder::enabled_drivers`]), then `sandbox` (the reference
/// worker, run when an environment uses it) with the `plugin-sandbox` feature. A
/// `[[plugin]]` adds its own keys. The CLI lists these after a mistyped driver key.
pub fn known_drivers() -> Vec<&'static str> {
    let mut keys = RuntimeBuilder::enabled_drivers().to_vec();
    #[cfg(feature = "plugin-sandbox")]
    keys.push(envrt_driver_plugin_sandbox::DEFAULT_DRIVER_KEY);
    keys
}

impl RuntimeBuilder {
    /// A builder with every enabled driver at its default configuration and an in-memory
    /// store.
    pub fn new() -> Self {
        RuntimeBuilder {
            store: None,
            tenant: None,
            extra: Vec::new(),
            without: BTreeSet::new(),
            #[cfg(feature = "local")]
            local: envrt_driver_local::LocalConfig::default(),
            #[cfg(feature = "docker")]
            docker: envrt_driver_docker::DockerConfig::default(),
            #[cfg(feature = "ssh")]
            ssh: envrt_driver_ssh::SshConfig::default(),
            #[cfg(feature = "plugin-sandbox")]
            plugins: Vec::new(),
        }
    }

    /// The keys of the drivers this build registers by itself, in registration order
    /// (sandbox drivers come from [`sandbox_plugin`](Self::sandbox_plugin) instead).
    pub fn enabled_drivers() -> &'static [&'static str] {
        &[
            #[cfg(feature = "local")]
            "local",
            #[cfg(feature = "docker")]
            "docker",
            #[cfg(feature = "ssh")]
            "ssh",
        ]
    }

    /// Uses `store` for environments and leases (e.g. a
    /// [`SqliteStore`](crate::SqliteStore) so leases outlive the process).
    pub fn store(mut self, store: Arc<dyn LeaseStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Binds the runtime to tenant `company_id`: its lease operations refuse another
    /// tenant's lease as not found (see [`EnvironmentRuntime::for_tenant`]).
    pub fn tenant(mut self, company_id: impl Into<String>) -> Self {
        self.tenant = Some(company_id.into());
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

    /// Configures the Docker driver.
    #[cfg(feature = "docker")]
    #[cfg_attr(docsrs, doc(cfg(feature = "docker")))]
    pub fn docker_config(mut self, config: envrt_driver_docker::DockerConfig) -> Self {
        self.docker = config;
        self
    }

    /// Configures the SSH driver (it connects lazily, on a lease's first call).
    #[cfg(feature = "ssh")]
    #[cfg_attr(docsrs, doc(cfg(feature = "ssh")))]
    pub fn ssh_config(mut self, config: envrt_driver_ssh::SshConfig) -> Self {
        self.ssh = config;
        self
    }

    /// Adds a sandbox driver run by the plugin worker `manifest` names; its key is the
    /// manifest entry's `driverKey` (`sandbox` by default).
    #[cfg(feature = "plugin-sandbox")]
    #[cfg_attr(docsrs, doc(cfg(feature = "plugin-sandbox")))]
    pub fn sandbox_plugin(
        mut self,
        manifest: envrt_driver_plugin_sandbox::PluginManifest,
        options: envrt_driver_plugin_sandbox::SandboxOptions,
    ) -> Self {
        self.plugins.push((manifest, options));
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
        let mut runtime = EnvironmentRuntime::with_store(store);
        if let Some(tenant) = self.tenant.clone() {
            runtime = runtime.for_tenant(tenant);
        }
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
        #[cfg(feature = "docker")]
        if wanted("docker") {
            let made = envrt_driver_docker::DockerDriver::connect(self.docker.clone()).await;
            add("docker", made.map(|d| Arc::new(d) as Arc<dyn EnvironmentDriver>));
        }
        #[cfg(feature = "ssh")]
        if wanted("ssh") {
            let made = envrt_driver_ssh::SshDriver::new(self.ssh.clone());
            add("ssh", made.map(|d| Arc::new(d) as Arc<dyn EnvironmentDriver>));
        }
        #[cfg(feature = "plugin-sandbox")]
        for (manifest, options) in self.plugins {
            let key = plugin_key(&manifest, &options);
            if wanted(&key) {
                let made = envrt_driver_plugin_sandbox::SandboxDriver::start(manifest, options).await;
                add(&key, made.map(|d| Arc::new(d) as Arc<dyn EnvironmentDriver>));
            }
        }
        let _ = (&wanted, &mut add);
        for driver in self.extra {
            runtime.register_driver(driver);
        }
        (runtime, skipped)
    }
}

/// The key a plugin's driver registers under (as `SandboxDriver::start` picks it).
#[cfg(feature = "plugin-sandbox")]
fn plugin_key(
    manifest: &envrt_driver_plugin_sandbox::PluginManifest,
    options: &envrt_driver_plugin_sandbox::SandboxOptions,
) -> String {
    manifest.driver_key(options.driver_key.as_deref())
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

    #[cfg(feature = "docker")]
    #[tokio::test]
    async fn an_unreachable_docker_engine_is_skipped_leniently_and_fails_a_strict_build() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("no-engine.sock");
        let config = || envrt_driver_docker::DockerConfig {
            host: Some(format!("unix://{}", socket.display())),
            connect_timeout: std::time::Duration::from_secs(5),
            ..Default::default()
        };
        let (runtime, skipped) = builder(&dir).docker_config(config()).build_lenient().await;
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].key, "docker");
        assert!(runtime.driver("docker").is_none());
        assert_eq!(runtime.driver("local").is_some(), cfg!(feature = "local"));
        let e = builder(&dir).docker_config(config()).build().await.unwrap_err();
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
        let manifest = envrt_driver_plugin_sandbox::PluginManifest::from_json(
            r#"{"id":"ghost","worker":{"command":["/nonexistent/envrt-worker"]},
                "environmentDrivers":[{"driverKey":"ghostbox","kind":"sandbox_provider","displayName":"G"}]}"#,
        )
        .unwrap();
        let (runtime, skipped) = builder(&dir)
            .sandbox_plugin(manifest, Default::default())
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
        let known = known_drivers();
        assert_eq!(&known[..keys.len()], keys);
        assert_eq!(known.contains(&"sandbox"), cfg!(feature = "plugin-sandbox"));
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
