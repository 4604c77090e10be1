//! [`RuntimeBuilder`]: an [`EnvironmentRuntime`] with every driver this build enables,
//! set up through the drivers' descriptors ([`crate::registry`]).

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use envrt_runtime_core::descriptor::{BuildContext, DriverConfig};
use envrt_runtime_core::{DriverError, Environment, EnvironmentDriver, EnvironmentRuntime, LeaseStore, MemoryStore};

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

/// What an `envrt.toml` assembly adds to a build: where its state is, its environments,
/// and the driver keys it needs (drivers that connect or start a process are set up only
/// when needed).
#[derive(Default)]
pub(crate) struct Assembling {
    pub(crate) state_dir: PathBuf,
    pub(crate) environments: Vec<Environment>,
    pub(crate) needed: BTreeSet<String>,
    /// The assembly's sqlite store, where plugin workers' `ctx.state` persists.
    pub(crate) plugin_state: Option<Arc<dyn envrt_runtime_core::PluginStateStore>>,
}

impl std::fmt::Debug for Assembling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembling")
            .field("state_dir", &self.state_dir)
            .field("environments", &self.environments)
            .field("needed", &self.needed)
            .field("plugin_state", &self.plugin_state.is_some())
            .finish()
    }
}

/// Builds an [`EnvironmentRuntime`] that registers every driver enabled by cargo features
/// (each through its descriptor in [`registry`](crate::registry), configured with
/// [`configure`](Self::configure) or at its default settings; the sandbox driver
/// registers one driver per plugin added with `SandboxSettings`), then the drivers added
/// with [`driver`](Self::driver). A later registration replaces an earlier one with the
/// same key.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use envrt::RuntimeBuilder;
/// let dir = tempfile::tempdir().unwrap();
/// let builder = RuntimeBuilder::new();
/// #[cfg(feature = "local")]
/// let builder = builder.configure(envrt::local::LocalConfig {
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
    settings: BTreeMap<&'static str, Arc<dyn Any + Send + Sync>>,
    assembling: Option<Assembling>,
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
            .field("configured", &self.settings.keys().collect::<Vec<_>>())
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
            tenant: None,
            extra: Vec::new(),
            without: BTreeSet::new(),
            settings: BTreeMap::new(),
            assembling: None,
        }
    }

    /// The keys of the drivers this build registers by itself, in registration order
    /// (sandbox drivers come from plugins instead; [`crate::known_drivers`] lists every
    /// key this build knows).
    pub fn enabled_drivers() -> &'static [&'static str] {
        static ENABLED: OnceLock<Vec<&'static str>> = OnceLock::new();
        ENABLED.get_or_init(|| {
            crate::registry::descriptors()
                .iter()
                .filter(|d| d.registers_by_default())
                .map(|d| d.key())
                .collect()
        })
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

    /// Configures the built-in driver whose settings `config` is (a driver crate's
    /// configuration type, such as `envrt::local::LocalConfig`), replacing earlier
    /// settings of that driver.
    pub fn configure<C: DriverConfig>(mut self, config: C) -> Self {
        self.settings.insert(C::KEY, Arc::new(config));
        self
    }

    /// Changes the settings of the driver `C` belongs to in place (starting from those
    /// configured so far, else the defaults), e.g. to add one more sandbox plugin.
    pub fn configure_with<C: DriverConfig + Default>(mut self, change: impl FnOnce(&mut C)) -> Self {
        let mut config = self
            .settings
            .remove(C::KEY)
            .and_then(|s| s.downcast_ref::<C>().cloned())
            .unwrap_or_default();
        change(&mut config);
        self.settings.insert(C::KEY, Arc::new(config));
        self
    }

    /// Configures the driver `key` from `section`, its settings in the form of its
    /// `envrt.toml` section (a JSON object; the first section the descriptor owns), read by
    /// its descriptor with the file's exact refusals. The error names a key this build
    /// does not know, with the known ones, or is the descriptor's refusal.
    pub fn configure_section(mut self, key: &str, section: &serde_json::Value) -> Result<Self, String> {
        let Some(descriptor) = crate::registry::descriptors().iter().find(|d| d.key() == key) else {
            return Err(format!(
                "unknown driver \"{key}\"; this build knows {}",
                crate::known_drivers().join(", ")
            ));
        };
        let mut sections = BTreeMap::new();
        if let Some(name) = descriptor.sections().first() {
            sections.insert((*name).to_owned(), section.clone());
        }
        let context = envrt_runtime_core::descriptor::SettingsContext {
            state_dir: None,
            config_dir: None,
        };
        let settings = descriptor.settings(&sections, &context)?;
        self.settings.insert(descriptor.key(), Arc::from(settings));
        Ok(self)
    }

    /// Settings read from `envrt.toml` for the driver `key`.
    #[cfg(feature = "config")]
    pub(crate) fn settings(mut self, key: &'static str, settings: Arc<dyn Any + Send + Sync>) -> Self {
        self.settings.insert(key, settings);
        self
    }

    /// Makes this the build of an `envrt.toml` assembly.
    #[cfg(feature = "config")]
    pub(crate) fn assembling(mut self, assembling: Assembling) -> Self {
        self.assembling = Some(assembling);
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
        match self.build_checked().await {
            Ok(built) => built,
            Err((key, message, runtime)) => (
                runtime,
                vec![SkippedDriver {
                    key: key.to_owned(),
                    error: DriverError::InvalidInput { message },
                }],
            ),
        }
    }

    /// [`build_lenient`](Self::build_lenient), except that a descriptor refusing its
    /// settings (a plugin manifest that does not load) stops the build: `(key, message,
    /// the runtime so far)`.
    #[allow(clippy::type_complexity)]
    pub(crate) async fn build_checked(
        mut self,
    ) -> Result<(EnvironmentRuntime, Vec<SkippedDriver>), (&'static str, String, EnvironmentRuntime)> {
        let store = self.store.take().unwrap_or_else(|| Arc::new(MemoryStore::new()));
        let mut runtime = EnvironmentRuntime::with_store(store);
        if let Some(tenant) = self.tenant.clone() {
            runtime = runtime.for_tenant(tenant);
        }
        let mut skipped = Vec::new();
        for descriptor in crate::registry::descriptors() {
            let key = descriptor.key();
            let settings = self
                .settings
                .remove(key)
                .unwrap_or_else(|| Arc::from(descriptor.default_settings()));
            let assembling = self.assembling.as_ref();
            let context = BuildContext {
                state_dir: assembling.map(|a| a.state_dir.as_path()),
                environments: assembling.map_or(&[], |a| a.environments.as_slice()),
                needed: assembling.filter(|_| descriptor.on_demand()).map(|a| &a.needed),
                left_out: Some(&self.without),
                plugin_state: assembling.and_then(|a| a.plugin_state.as_ref()),
            };
            let built = match descriptor.build(&*settings, &context).await {
                Ok(built) => built,
                Err(message) => return Err((key, message, runtime)),
            };
            for built in built {
                match built.driver {
                    Ok(driver) => {
                        runtime.register_driver(driver);
                    }
                    Err(error) => skipped.push(SkippedDriver { key: built.key, error }),
                }
            }
        }
        for driver in self.extra {
            runtime.register_driver(driver);
        }
        Ok((runtime, skipped))
    }
}
