//! A host that returns early (`?`) from `#[tokio::main]` after `Assembly::start_pools`
//! leaves nothing behind: dropping the runtime releases every ready lease of its pools.
//! The host is this test binary run again as a child process, with a real local pool and
//! a real Docker pool; once it has exited, no pooled lease is active in the store and no
//! container of its state directory exists.
#![cfg(all(feature = "config", feature = "local", feature = "docker"))]

use std::path::Path;
use std::time::{Duration, Instant};

use envrt::config::{Assembly, ConfigError, Paths};
use envrt::{LeaseFilter, LeasePolicy, LeaseStatus, LeaseStore, SqliteStore};

const CHILD: &str = "ENVRT_POOL_DROP_SITE";

fn paths(site: &Path) -> Paths {
    Paths {
        config: Some(site.join("envrt.toml")),
        state_dir: site.join("state"),
    }
}

/// The host: starts the pools, waits until they are full, then fails with `?`.
#[tokio::main]
async fn host(site: &Path) -> Result<(), ConfigError> {
    let assembly = Assembly::open(&paths(site), None).await?;
    assembly.start_pools()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    for environment in ["warm-local", "warm-docker"] {
        while assembly
            .runtime
            .pool_status(environment, "local", LeasePolicy::Ephemeral)
            .is_none_or(|s| s.ready < 2)
        {
            assert!(Instant::now() < deadline, "the {environment} pool did not fill");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    std::fs::write(site.join("full"), "").unwrap();
    Err(ConfigError::Invalid("the host gives up early".into()))?;
    Ok(())
}

#[test]
fn host_returns_early() {
    let Some(site) = std::env::var_os(CHILD) else { return };
    let error = host(Path::new(&site)).unwrap_err();
    assert_eq!(error.to_string(), "the host gives up early");
}

fn containers_of(state: &Path) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label={}={}", envrt::config::STATE_LABEL, state.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "docker ps: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_host_returning_early_after_start_pools_leaves_no_pooled_lease_or_container() {
    let site = tempfile::tempdir().unwrap();
    let image = envrt_test_support::docker::image();
    std::fs::write(
        site.path().join("envrt.toml"),
        format!(
            "[[environment]]\nid = \"warm-local\"\ndriver = \"local\"\n[environment.pool]\nsize = 2\n\
             [[environment]]\nid = \"warm-docker\"\ndriver = \"docker\"\n[environment.config]\nimage = \"{image}\"\n[environment.pool]\nsize = 2\n"
        ),
    )
    .unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["host_returns_early", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, site.path())
        .status()
        .unwrap();
    assert!(status.success(), "the host failed: {status}");
    assert!(
        site.path().join("full").exists(),
        "the host filled its pools before returning"
    );

    let store = SqliteStore::open(site.path().join("state/leases.db")).await.unwrap();
    let leases = store.list_leases(&LeaseFilter::default()).await.unwrap();
    assert_eq!(leases.len(), 4, "two pooled leases per pool were acquired: {leases:?}");
    for lease in &leases {
        assert_eq!(lease.status, LeaseStatus::Released, "{lease:?}");
    }
    assert_eq!(containers_of(&site.path().join("state")), Vec::<String>::new());
}
