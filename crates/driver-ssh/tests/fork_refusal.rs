//! A fork on the SSH driver makes its copies on the source's host: when the environment
//! names another host by the time of the fork, the driver refuses with its exact text and
//! nothing of the copies is left (no lease record active, no remote directory).

mod common;

use envrt_runtime_core::{Environment, LeaseFilter, LeaseStatus};

use common::{acquire, runtime, server};

#[tokio::test]
async fn a_fork_whose_environment_names_another_host_is_refused() {
    let Some(server) = server() else { return };
    let (_driver, rt, root) = runtime(&server, "fork-host", |_| {}).await;
    let lease = acquire(&rt).await;
    let mut moved = server.config();
    moved.insert("port".into(), (server.port + 1).into());
    rt.put_environment(Environment::new("env-ssh", "Remote", "ssh").with_config(moved))
        .await
        .unwrap();
    let refused = rt.fork_lease(&lease.id, 2).await.unwrap_err();
    assert_eq!(
        refused.to_string(),
        "Invalid input: a fork's copies live on the source's host, and this environment names another"
    );
    let active: Vec<String> = rt
        .leases(&LeaseFilter::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|l| l.status == LeaseStatus::Active)
        .map(|l| l.id)
        .collect();
    assert_eq!(active, vec![lease.id.clone()], "only the source is active");
    let dirs: Vec<String> = std::fs::read_dir(root.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("lease-"))
        .collect();
    assert_eq!(dirs, vec![format!("lease-{}", lease.id)], "a copy's directory was left");
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}
