//! Rows of warm pools (8): acquire and acquire + first `true` from a full pool against a
//! cold acquire, on one runtime and environment, per driver; for Docker also the cold
//! acquire against the bare Engine API create + start.
//!
//! Each round waits (untimed) until the pool is full again before every contender, so a
//! refill never runs under a measurement it does not belong to; leases are released
//! outside the timed part.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use envrt_runtime_core::{AcquireRequest, LeaseStatus, PoolSpec};

use crate::Config;
use crate::facade::{Leased, run_on};
use crate::measure::percentile_ms;
use crate::report::{Figure, Row, Target};

/// The group key and row number of every pool row.
pub(crate) const NUMBER: u8 = 8;

/// Leases the measured pool keeps ready.
const SIZE: usize = 2;

/// The tenant of the pool, and the tenant of the cold acquires (no pool).
const WARM: &str = "bench-pool";
const COLD: &str = "bench-cold";

/// The bare baselines: one timed run of each (their clean-up untimed, inside), in the
/// order of [`BARE_NAMES`].
pub(crate) type Bare<'a> = Box<dyn FnMut() -> Pin<Box<dyn Future<Output = Result<[Duration; 2], String>> + 'a>> + 'a>;

/// The names of the bare baselines.
const BARE_NAMES: [&str; 2] = [
    "bare Engine API create+start",
    "bare Engine API create+start with the driver's isolation",
];

/// The row names of `driver`'s pool rows.
pub(crate) fn names(driver: &str) -> Vec<String> {
    let mut names = vec![
        format!("{driver} acquire from a warm pool p50"),
        format!("{driver} acquire + first `true` from a warm pool p50"),
    ];
    if driver == "docker" {
        names.push("docker cold acquire p50".into());
    }
    names
}

/// Rounds of one driver's pool rows.
fn rounds(config: &Config, driver: &str) -> usize {
    match (driver, config.quick) {
        ("local", true) => 40,
        ("local", false) => 200,
        (_, true) => 15,
        (_, false) => 60,
    }
}

/// Measures `driver`'s rows on `leased`'s runtime and environment.
pub(crate) async fn measure(
    config: &Config,
    group: &'static str,
    driver: &str,
    leased: &Leased,
    mut bare: Option<Bare<'_>>,
) -> Result<Vec<Row>, String> {
    let runtime = &leased.runtime;
    runtime
        .start_pool(PoolSpec::new(&leased.environment, WARM, SIZE))
        .map_err(|e| e.to_string())?;
    let rounds = rounds(config, driver);
    // acquire, acquire + true: warm; the same cold; the bare baseline.
    let mut samples: [Vec<Duration>; 6] = Default::default();
    let mut result = Ok(());
    for round in 0..rounds + 2 {
        let keep = round >= 2;
        let one = async |company: &str| -> Result<(Duration, Duration), String> {
            wait_full(leased).await?;
            let start = Instant::now();
            let lease = runtime
                .acquire_lease(AcquireRequest::new(&leased.environment, company))
                .await
                .map_err(|e| e.to_string())?;
            let acquired = start.elapsed();
            let ran = run_on(runtime, &lease.id, &["true"]).await;
            let first = start.elapsed();
            let _ = runtime.release_lease(&lease.id, LeaseStatus::Released).await;
            ran.map(|()| (acquired, first))
        };
        let step = async {
            let warm = one(WARM).await?;
            let cold = one(COLD).await?;
            let bare = match bare.as_mut() {
                Some(bare) => {
                    wait_full(leased).await?;
                    Some(bare().await?)
                }
                None => None,
            };
            Ok::<_, String>((warm, cold, bare))
        };
        let step = step.await.map(|((wa, wf), (ca, cf), bare)| {
            if keep {
                samples[0].push(wa);
                samples[1].push(wf);
                samples[2].push(ca);
                samples[3].push(cf);
                if let Some([b0, b1]) = bare {
                    samples[4].push(b0);
                    samples[5].push(b1);
                }
            }
        });
        if let Err(e) = step {
            result = Err(e);
            break;
        }
    }
    let _ = runtime.stop_pools().await;
    result?;
    let p50 = |i: usize| Figure::ms(percentile_ms(&samples[i], 50.0));
    let names = names(driver);
    let mut rows = vec![
        Row::new(group, NUMBER, names[0].clone(), p50(0))
            .baseline("cold acquire", p50(2))
            .target(Target::AtMost(5.0)),
        Row::new(group, NUMBER, names[1].clone(), p50(1)).baseline("cold acquire + first `true`", p50(3)),
    ];
    if bare.is_some() {
        rows.push(
            Row::new(group, NUMBER, names[2].clone(), p50(2))
                .baseline(BARE_NAMES[0], p50(4))
                .baseline(BARE_NAMES[1], p50(5))
                .target(Target::RatioAtMost(0, 1.05))
                .note(
                    "\"with the driver's isolation\": the same create+start plus the driver's default host \
                     config (network none, memory and pids limits, capabilities, no-new-privileges) and \
                     working directory",
                ),
        );
    }
    Ok(rows)
}

/// Waits until the pool of `leased`'s environment is full again (refills run after each
/// hand-over).
async fn wait_full(leased: &Leased) -> Result<(), String> {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let status = leased
            .runtime
            .pool_status(&leased.environment, WARM, envrt_runtime_core::LeasePolicy::Ephemeral)
            .ok_or("the pool is not running")?;
        if status.ready >= status.size {
            return Ok(());
        }
        if Instant::now() > until {
            return Err(format!("the pool did not refill: {status:?}"));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The rows of `driver` when they cannot be measured.
fn missing(group: &'static str, driver: &str, e: &str) -> Vec<Row> {
    let why = if e.starts_with("n/a") {
        e.to_owned()
    } else {
        format!("error: {e}")
    };
    names(driver)
        .into_iter()
        .map(|n| Row::missing(group, NUMBER, n, why.clone()))
        .collect()
}

/// The local driver's pool rows.
pub(crate) async fn local_rows(config: &Config) -> Vec<Row> {
    let local = match crate::targets::local::Local::open(None).await {
        Ok(local) => local,
        Err(e) => return missing("pool-local", "local", &e),
    };
    let rows = measure(config, "pool-local", "local", &local.leased, None).await;
    local.leased.close().await;
    rows.unwrap_or_else(|e| missing("pool-local", "local", &e))
}

/// The sandbox driver's pool rows (the reference worker).
pub(crate) async fn sandbox_rows(config: &Config) -> Vec<Row> {
    {
        let root = match tempfile::tempdir() {
            Ok(root) => root,
            Err(e) => return missing("pool-sandbox", "sandbox", &e.to_string()),
        };
        let (leased, driver) = match crate::targets::sandbox::open(root.path()).await {
            Ok(opened) => opened,
            Err(e) => return missing("pool-sandbox", "sandbox", &e),
        };
        let rows = measure(config, "pool-sandbox", "sandbox", &leased, None).await;
        crate::targets::sandbox::close(leased, driver).await;
        rows.unwrap_or_else(|e| missing("pool-sandbox", "sandbox", &e))
    }
}

/// The Docker driver's pool rows, with the bare Engine API create + start of the same
/// image and entrypoint (`sleep infinity` under docker-init) as the cold baseline.
pub(crate) async fn docker_rows(config: &Config) -> Vec<Row> {
    docker::rows(config)
        .await
        .unwrap_or_else(|e| missing("pool-docker", "docker", &e))
}

mod docker {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use bollard::Docker;
    use bollard::models::{ContainerCreateBody, HostConfig};
    use bollard::query_parameters::{CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder};
    use envrt_driver_docker::{DockerConfig, DockerDriver};
    use envrt_runtime_core::JsonMap;

    use super::Bare;
    use crate::Config;
    use crate::facade::Leased;
    use crate::report::Row;

    pub(super) async fn rows(config: &Config) -> Result<Vec<Row>, String> {
        let driver = DockerDriver::connect(DockerConfig::default())
            .await
            .map_err(|e| format!("n/a (no engine): {e}"))?;
        let mut env = JsonMap::new();
        env.insert("image".into(), crate::targets::docker::IMAGE.into());
        let leased = Leased::open(Arc::new(driver), env).await?;
        let host = std::env::var("DOCKER_HOST").unwrap_or_default();
        let socket = host.strip_prefix("unix://").unwrap_or("/var/run/docker.sock");
        let bare = Docker::connect_with_unix(socket, 120, bollard::API_DEFAULT_VERSION).map_err(|e| e.to_string())?;
        let counter = AtomicU64::new(0);
        let (bare, counter) = (&bare, &counter);
        let run: Bare<'_> = Box::new(move || {
            Box::pin(async move {
                let name = format!(
                    "envrt-bench-bare-{}-{}",
                    std::process::id(),
                    counter.fetch_add(1, Ordering::Relaxed)
                );
                let plain = create_start(bare, &format!("{name}-a"), false).await?;
                let isolated = create_start(bare, &format!("{name}-b"), true).await?;
                Ok([plain, isolated])
            })
        });
        let rows = super::measure(config, "pool-docker", "docker", &leased, Some(run)).await;
        leased.close().await;
        rows
    }

    /// Creates and starts a container the way the driver does for a lease without expiry
    /// (with `isolated`, also with the driver's default isolation: no network, its memory
    /// and process limits, its capabilities, `no-new-privileges`, the workspace as working
    /// directory); returns the time of the two calls, then removes it (untimed).
    async fn create_start(docker: &Docker, name: &str, isolated: bool) -> Result<Duration, String> {
        let mut host_config = HostConfig {
            init: Some(true),
            ..Default::default()
        };
        if isolated {
            host_config.network_mode = Some("none".into());
            host_config.memory = Some(envrt_driver_docker::DEFAULT_MEMORY_BYTES);
            host_config.memory_swap = Some(envrt_driver_docker::DEFAULT_MEMORY_BYTES);
            host_config.pids_limit = Some(envrt_driver_docker::DEFAULT_PIDS_LIMIT);
            host_config.cap_drop = Some(vec!["ALL".into()]);
            host_config.cap_add = Some(
                envrt_driver_docker::KEPT_CAPABILITIES
                    .iter()
                    .map(|c| (*c).to_owned())
                    .collect(),
            );
            host_config.security_opt = Some(vec!["no-new-privileges".into()]);
        }
        let body = ContainerCreateBody {
            image: Some(crate::targets::docker::IMAGE.into()),
            entrypoint: Some(vec!["sleep".into()]),
            cmd: Some(vec!["infinity".into()]),
            working_dir: isolated.then(|| envrt_driver_docker::DEFAULT_WORKING_DIR.to_owned()),
            host_config: Some(host_config),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default().name(name).build();
        let start = Instant::now();
        let created = docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| e.to_string())?;
        let started = docker
            .start_container(&created.id, None)
            .await
            .map_err(|e| e.to_string());
        let took = start.elapsed();
        let remove = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
        let _ = docker.remove_container(&created.id, Some(remove)).await;
        started?;
        Ok(took)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_selects_every_pool_group_and_only_docker_has_the_engine_row() {
        let config = Config {
            quick: true,
            only: vec!["pool".into()],
            list: false,
        };
        for group in ["pool-local", "pool-docker", "pool-sandbox"] {
            assert!(config.wants(group, NUMBER), "{group}");
        }
        assert!(!config.wants("exec-docker", 2));
        assert_eq!(names("docker").len(), 3);
        assert_eq!(names("local").len(), 2);
        assert_eq!(
            missing("pool-local", "local", "boom")[0].ours.as_ref().unwrap_err(),
            "error: boom"
        );
    }
}
