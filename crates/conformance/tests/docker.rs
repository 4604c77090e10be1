//! The conformance suite against the Docker driver (`cargo xtask conformance --driver
//! docker`), on the local test image `envrt-test:latest` (`cargo xtask docker-image`), with
//! the static process supervisor built for it.
//! Containers carry a label unique to this run; none may remain afterwards. Without an
//! engine the suite is skipped loudly, unless `ENVRT_REQUIRE_DOCKER=1` (as in CI), which
//! makes it fail.

use std::collections::BTreeMap;
use std::sync::Arc;

use envrt_conformance::{LeftoversFuture, ResourceFuture, Suite, Target, report_not_started};
use envrt_driver_docker::{DockerConfig, DockerDriver};
use envrt_test_support::Component;
use envrt_test_support::docker::DEFAULT_IMAGE as IMAGE;
use serde_json::json;

mod egress_host;

fn main() {
    // Kept until the suite ends: the egress checks reach it through each lease's proxy.
    let (test_host, egress, roots) = egress_host::make_with_roots();
    let dns = test_host.as_ref().map(|host| host.dns());
    let required = Component::Docker.required();
    let run = format!("{}-{}", std::process::id(), uuid_like());
    let built = Suite::build(|| async move {
        let config = DockerConfig {
            extra_labels: BTreeMap::from([("envrt.conformance-run".to_string(), run)]),
            // The static supervisor, so that the processes checks run in the busybox image.
            agent: Some(envrt_test_support::docker::static_agent()),
            egress: Some(envrt_test_support::network::egress_binary()),
            egress_dns: dns,
            // The test host's CA: the proxy verifies it when it brokers a credential.
            egress_roots: roots,
            ..DockerConfig::default()
        };
        let driver = Arc::new(DockerDriver::connect(config).await.map_err(|e| e.to_string())?);
        if !driver.image_exists(IMAGE).await.map_err(|e| e.to_string())? {
            return Err(format!(
                "the image {IMAGE} is missing; build it with `cargo xtask docker-image`"
            ));
        }
        let probe = driver.clone();
        let leftovers = Arc::new(move || -> LeftoversFuture {
            let probe = probe.clone();
            Box::pin(async move {
                let containers = probe.managed_containers().await.map_err(|e| e.to_string())?;
                Ok(containers
                    .into_iter()
                    .map(|(id, lease)| format!("container {id} of lease {lease}"))
                    .collect())
            })
        });
        // A lease's resource is its container (found by the lease label, running or not).
        let probe = driver.clone();
        let resource = Arc::new(move |lease: &envrt_runtime_core::Lease| -> ResourceFuture {
            let probe = probe.clone();
            let id = lease.id.clone();
            Box::pin(async move {
                let containers = probe.managed_containers().await.map_err(|e| e.to_string())?;
                Ok(containers.iter().any(|(_, lease)| *lease == id))
            })
        });
        let config = json!({"image": IMAGE}).as_object().cloned().unwrap_or_default();
        Ok(Target::new(driver)
            .with_config(config)
            .with_cases(8)
            .with_leftovers(leftovers)
            .with_resource_probe(resource)
            .with_egress_host(egress))
    });
    match built {
        Ok(suite) => {
            let passed = suite.run();
            // The test host goes before the exit (which runs no destructor).
            drop(test_host);
            std::process::exit(if passed { 0 } else { 101 });
        }
        Err(error) if !required => {
            eprintln!(
                "\n*** SKIPPED: the Docker conformance suite: {error} (set ENVRT_REQUIRE_DOCKER=1 to fail instead) ***\n"
            );
            report_not_started("driver_docker", &error, true);
        }
        Err(error) => {
            eprintln!("ENVRT_REQUIRE_DOCKER=1 but the Docker driver cannot run: {error}");
            report_not_started("driver_docker", &error, false);
            drop(test_host);
            std::process::exit(101);
        }
    }
}

fn uuid_like() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
