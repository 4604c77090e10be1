//! Shared set-up for the tests against a real engine: a driver scoped by a per-test label,
//! leases through the real facade, and a guard that leaves no container behind.

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envrt_driver_docker::{DockerConfig, DockerDriver};
use envrt_runtime_core::{
    AcquireRequest, Environment, EnvironmentRuntime, ExecuteRequest, ExecuteResult, Lease, LeasePolicy,
};
use serde_json::{Value, json};

/// The label that scopes one test's containers.
pub const TEST_LABEL: &str = "envrt.test-run";

use envrt_test_support::Component;
/// The test image (`scripts/docker-test-image.sh` builds it).
pub use envrt_test_support::docker::image;

/// Runs a test body with a hard bound, so no test can hang.
pub async fn bounded<F: Future<Output = T>, T>(secs: u64, fut: F) -> T {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .unwrap_or_else(|_| panic!("test did not finish within {secs} s"))
}

/// A driver, a facade with it registered, and the test's own label.
pub struct Harness {
    pub runtime: EnvironmentRuntime,
    pub driver: Arc<DockerDriver>,
    pub run: String,
    finished: Mutex<bool>,
}

/// A driver config scoped to `run`.
pub fn scoped_config(run: &str) -> DockerConfig {
    let mut config = DockerConfig::default();
    config.extra_labels.insert(TEST_LABEL.to_owned(), run.to_owned());
    config.kill_grace = Duration::from_millis(500);
    config
}

/// Connects, or says loudly that the test is skipped (fails instead when
/// `ENVRT_REQUIRE_DOCKER=1`).
pub async fn harness() -> Option<Harness> {
    harness_with(|_| {}).await
}

/// [`harness`] with the scoped config changed by `edit`.
pub async fn harness_with(edit: impl FnOnce(&mut DockerConfig)) -> Option<Harness> {
    let run = uuid::Uuid::new_v4().to_string();
    let mut config = scoped_config(&run);
    edit(&mut config);
    let connected = match DockerDriver::connect(config).await {
        Ok(driver) => match driver.image_exists(&image()).await {
            Ok(true) => Ok(driver),
            Ok(false) => Err(format!(
                "image {} is missing (build it with scripts/docker-test-image.sh)",
                image()
            )),
            Err(e) => Err(e.to_string()),
        },
        Err(e) => Err(e.to_string()),
    };
    match connected {
        Ok(driver) => {
            let driver = Arc::new(driver);
            let runtime = EnvironmentRuntime::new();
            runtime.register_driver(driver.clone());
            Some(Harness {
                runtime,
                driver,
                run,
                finished: Mutex::new(false),
            })
        }
        Err(error) => {
            Component::Docker.skip_or_fail(
                format_args!("ENVRT_REQUIRE_DOCKER=1 but no usable Docker engine: {error}"),
                format_args!(
                    "\n*** SKIPPED: no usable Docker engine ({error}); set ENVRT_REQUIRE_DOCKER=1 to make this a failure ***\n"
                ),
            );
            None
        }
    }
}

impl Harness {
    /// Registers an environment with `config` (the test image unless `image` is given).
    pub async fn environment(&self, config: Value) -> String {
        let mut config = config.as_object().cloned().unwrap_or_default();
        config.entry("image").or_insert_with(|| image().into());
        let id = format!("env-{}", uuid::Uuid::new_v4());
        let env = Environment::new(&id, format!("Docker test {id}"), "docker").with_config(config);
        self.runtime.put_environment(env).await.unwrap();
        id
    }

    /// Acquires a lease on a fresh environment with `config`.
    pub async fn lease(&self, config: Value, policy: LeasePolicy) -> Lease {
        let env = self.environment(config).await;
        let mut request = AcquireRequest::new(env, "acme");
        request.run_id = Some("run-1".into());
        request.policy = policy;
        self.runtime.acquire_lease(request).await.unwrap()
    }

    /// A lease on the test image with the defaults.
    pub async fn default_lease(&self) -> Lease {
        self.lease(json!({}), LeasePolicy::Ephemeral).await
    }

    /// Runs `sh -c script` on the lease and returns the result.
    pub async fn sh(&self, lease: &Lease, script: &str) -> ExecuteResult {
        self.runtime
            .execute(&lease.id, ExecuteRequest::new("sh", ["-c", script]))
            .await
            .unwrap()
    }

    /// Live processes in the lease's container whose command line contains `needle`.
    pub async fn processes_matching(&self, lease: &Lease, needle: &str) -> Vec<String> {
        let r = self.sh(lease, "ps -o pid,stat,args").await;
        String::from_utf8_lossy(&r.stdout)
            .lines()
            .filter(|l| l.contains(needle) && !l.contains("ps -o") && !l.contains(" Z "))
            .map(str::to_owned)
            .collect()
    }

    /// Drops the runtime and the driver without cleaning anything up (a holder that
    /// vanished); the caller checks what became of its containers.
    pub fn abandon(self) {
        *self.finished.lock().unwrap() = true;
    }

    /// Destroys what the test made and checks that no container of this test remains.
    pub async fn finish(self) {
        let containers = self.driver.managed_containers().await.unwrap();
        for (_, lease) in &containers {
            let _ = self.runtime.destroy_lease(lease).await;
        }
        self.driver.reap_orphans(&[]).await.unwrap();
        assert_eq!(self.driver.managed_containers().await.unwrap(), Vec::new());
        assert_eq!(
            cli_containers(&self.run),
            Vec::<String>::new(),
            "containers left behind"
        );
        *self.finished.lock().unwrap() = true;
    }
}

/// Container ids carrying this run's label, per the docker CLI (independent of the driver).
pub fn cli_containers(run: &str) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label={TEST_LABEL}={run}")])
        .output();
    match out {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
        Err(_) => Vec::new(),
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        // A failed test still leaves nothing behind.
        if !*self.finished.lock().unwrap() {
            let ids = cli_containers(&self.run);
            if !ids.is_empty() {
                let _ = std::process::Command::new("docker")
                    .arg("rm")
                    .arg("-f")
                    .args(&ids)
                    .output();
            }
        }
    }
}

/// `Some(harness)` or return from the test (skipped).
#[macro_export]
macro_rules! harness_or_skip {
    () => {
        match common::harness().await {
            Some(h) => h,
            None => return,
        }
    };
}
