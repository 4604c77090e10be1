//! The kit's bypass checks on the Docker driver with a real userland: the busybox image of
//! the Docker suite has no `python3`, so there they say "not checked"; here the Debian
//! image (`scripts/docker-debian-image.sh`) runs them, each through the lease's own
//! `envrt-egress`, against a test host with HTTPS whose CA the driver's proxy trusts for
//! the brokered credential. Every one must pass. Needs Docker with the Debian image, root
//! for `ip netns`, `openssl` and `python3`; fails instead of skipping with
//! `ENVRT_REQUIRE_DOCKER=1` / `ENVRT_REQUIRE_NETWORK=1`.

mod egress_host;

use std::sync::Arc;

use envrt_conformance::{Suite, Target};
use envrt_driver_docker::{DockerConfig, DockerDriver};
use serde_json::json;

#[test]
fn docker_with_a_real_userland_passes_every_bypass_check() {
    let Some(image) = envrt_test_support::docker::debian_image_or_skip() else {
        return;
    };
    let (host, egress, roots) = egress_host::make_with_roots();
    let Some(host) = host else {
        return;
    };
    let dns = host.dns();
    let suite = Suite::build(|| async move {
        let config = DockerConfig {
            agent: Some(envrt_test_support::docker::static_agent()),
            egress: Some(envrt_test_support::network::egress_binary()),
            egress_dns: Some(dns),
            egress_roots: roots,
            ..DockerConfig::default()
        };
        let driver = Arc::new(DockerDriver::connect(config).await.map_err(|e| e.to_string())?);
        let config = json!({"image": image}).as_object().cloned().unwrap_or_default();
        Ok(Target::new(driver)
            .with_config(config)
            .with_cases(1)
            .with_egress_host(egress)
            .only(&["egress_"]))
    })
    .expect("the Docker suite");
    egress_host::assert_bypass_checks_pass(&suite);
    drop(suite);
    drop(host);
}
