//! The runtime as the tool sees it: the configured environments in the SQLite store, every
//! driver this build enables, and lease helpers shared by the subcommands.

use std::sync::Arc;

use envrt::config::{Assembly, Config, Paths};
use envrt::sqlite::holder::Holder;
use envrt::{
    AcquireRequest, Environment, EnvironmentRuntime, JsonMap, Lease, LeasePolicy, LeaseStatus, RuntimeError,
    SkippedDriver,
};

use crate::Target;
use crate::error::CliError;

/// An opened runtime.
pub(crate) struct App {
    pub(crate) runtime: Arc<EnvironmentRuntime>,
    pub(crate) config: Config,
    pub(crate) skipped: Vec<SkippedDriver>,
}

impl App {
    /// Loads the configuration, opens the store, registers the drivers and records the
    /// configured environments in the store.
    pub(crate) async fn open(paths: &Paths) -> Result<App, CliError> {
        Self::open_for(paths, None).await
    }

    /// Like [`open`](Self::open), also setting up driver `extra` (from `--driver`). A
    /// driver that needs a connection or a worker (docker, plugins) is set up only when an
    /// environment (configured, or recorded in the store) or `extra` uses it.
    pub(crate) async fn open_for(paths: &Paths, extra: Option<&str>) -> Result<App, CliError> {
        let Assembly {
            runtime,
            config,
            skipped,
        } = Assembly::open(paths, extra).await?;
        Ok(App {
            runtime,
            config,
            skipped,
        })
    }

    /// Fails with the set-up error when driver `key` is enabled but could not be set up
    /// (so the user sees why, not just "not registered").
    pub(crate) fn check_driver(&self, key: &str) -> Result<(), CliError> {
        match self.skipped.iter().find(|s| s.key == key) {
            Some(s) => Err(CliError::Failure(format!(
                "Environment driver \"{}\" could not be set up: {}",
                s.key, s.error
            ))),
            None => Ok(()),
        }
    }

    /// The environment `target` names: `--env-id`, else the first configured environment
    /// with `--driver`'s key (or an unconfigured one named after it), else the default.
    pub(crate) async fn environment_id(&self, target: &Target) -> Result<String, CliError> {
        if let Some(id) = &target.env_id {
            return Ok(id.clone());
        }
        if let Some(key) = &target.driver {
            if let Some(e) = self.config.environments.iter().find(|e| &e.driver == key) {
                return Ok(e.id.clone());
            }
            let adhoc = Environment::new(key.clone(), key.clone(), key.clone());
            if self.runtime.environment(key).await?.is_none() {
                self.runtime.put_environment(adhoc).await?;
            }
            return Ok(key.clone());
        }
        Ok(self.config.default_environment.clone())
    }

    /// The driver an environment uses, when it is known.
    pub(crate) async fn environment_driver(&self, id: &str) -> Result<Option<String>, CliError> {
        Ok(self.runtime.environment(id).await?.map(|e| e.driver))
    }

    /// Acquires a lease on `environment_id` held by `holder` (none: gc never touches it),
    /// expiring after `ttl`, else after the environment's configured `ttl`, else never.
    pub(crate) async fn acquire(
        &self,
        environment_id: &str,
        policy: LeasePolicy,
        run_id: Option<String>,
        holder: Option<Holder>,
        ttl: Option<std::time::Duration>,
        purpose: &str,
    ) -> Result<Lease, CliError> {
        self.acquire_from(environment_id, policy, run_id, holder, ttl, purpose, None)
            .await
    }

    /// [`acquire`](Self::acquire), starting the lease from `template` when one is given.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn acquire_from(
        &self,
        environment_id: &str,
        policy: LeasePolicy,
        run_id: Option<String>,
        holder: Option<Holder>,
        ttl: Option<std::time::Duration>,
        purpose: &str,
        template: Option<String>,
    ) -> Result<Lease, CliError> {
        self.acquire_with(environment_id, policy, run_id, holder, ttl, purpose, template, None)
            .await
    }

    /// [`acquire_from`](Self::acquire_from), with a network policy of the lease's own.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn acquire_with(
        &self,
        environment_id: &str,
        policy: LeasePolicy,
        run_id: Option<String>,
        holder: Option<Holder>,
        ttl: Option<std::time::Duration>,
        purpose: &str,
        template: Option<String>,
        network: Option<envrt::core::network::Policy>,
    ) -> Result<Lease, CliError> {
        let request = self
            .acquire_request(environment_id, policy, run_id, holder, ttl, purpose, template, network)
            .await?;
        Ok(self.runtime.acquire_lease(request).await?)
    }

    /// The request [`acquire_with`](Self::acquire_with) sends, for a caller that adds to it
    /// (`lease acquire --scope`, `--label`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn acquire_request(
        &self,
        environment_id: &str,
        policy: LeasePolicy,
        run_id: Option<String>,
        holder: Option<Holder>,
        ttl: Option<std::time::Duration>,
        purpose: &str,
        template: Option<String>,
        network: Option<envrt::core::network::Policy>,
    ) -> Result<AcquireRequest, CliError> {
        let ttl = ttl.or_else(|| self.config.ttls.get(environment_id).copied());
        if let Some(driver) = self.environment_driver(environment_id).await? {
            self.check_driver(&driver)?;
        }
        let mut metadata = JsonMap::new();
        metadata.insert("acquiredBy".into(), purpose.into());
        if let Some(holder) = holder {
            holder.write_to(&mut metadata);
        }
        let request = AcquireRequest {
            environment_id: environment_id.to_owned(),
            company_id: self.config.company.clone(),
            run_id,
            policy,
            metadata,
            requested_expires_at: ttl.map(|ttl| envrt::Timestamp::now().after(ttl)),
            template,
            network,
            ..Default::default()
        };
        Ok(request)
    }

    /// Checks that lease `id` exists and that its driver was set up.
    pub(crate) async fn existing_lease(&self, id: &str) -> Result<Lease, CliError> {
        let lease = self
            .runtime
            .lease(id)
            .await?
            .ok_or_else(|| RuntimeError::LeaseNotFound { id: id.to_owned() })?;
        let environment = match &lease.environment_id {
            Some(e) => self.runtime.environment(e).await?,
            None => None,
        };
        let key = envrt::core::model::resolve_driver_key(&lease, environment.as_ref()).to_owned();
        self.check_driver(&key)?;
        Ok(lease)
    }

    /// Releases a lease this invocation acquired; a failure is reported on stderr (the
    /// lease stays `pending_cleanup` for `envrt gc`) but does not change the exit code.
    pub(crate) async fn release_own(&self, lease: &Lease, status: LeaseStatus) {
        if let Err(e) = self.runtime.release_lease(&lease.id, status).await {
            crate::say!("envrt: releasing lease {} failed: {e}", lease.id);
        }
    }
}
