//! The recovery group against the real test `sshd`: a driver started afresh (the host
//! program restarted) finds the lease directories on its host, and reaps one with what it
//! still runs.

mod common;

use envrt_driver_ssh::{SshConfig, SshDriver};
use envrt_runtime_core::{EnvironmentDriver, ExecuteRequest};

use common::{acquire, runtime, server, survivors};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_driver_inventories_and_reaps_a_remote_lease() {
    let Some(server) = server() else { return };
    let (first, rt, root) = runtime(&server, "recovery", |_| {}).await;
    let lease = acquire(&rt).await;
    // Something the lease still runs, outside any call (it left its group).
    let marker = format!("envrt-ssh-recovery-{}", common::uuid_like());
    let script = format!("setsid sh -c 'while :; do sleep 1; done' {marker} >/dev/null 2>&1 </dev/null & echo ok");
    rt.execute(&lease.id, ExecuteRequest::new("sh", ["-c".to_string(), script]))
        .await
        .unwrap();
    first.shutdown().await;

    let fresh = SshDriver::new(SshConfig {
        target: Some(server.target()),
        root: root.to_string(),
        ..Default::default()
    })
    .unwrap();
    let recovery = fresh.as_recovery().unwrap();
    let items = recovery.inventory().await.unwrap();
    let dir = format!("{}/{root}/lease-{}", server.home(), lease.id);
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].kind, "workspace");
    assert_eq!(items[0].lease_id.as_deref(), Some(lease.id.as_str()));
    assert_eq!(items[0].id, format!("{}:{dir}", server.target().shown()));
    recovery.reap(&items[0]).await.unwrap();
    recovery.reap(&items[0]).await.unwrap();
    assert!(!std::path::Path::new(&dir).exists());
    assert_eq!(
        survivors(&marker).await,
        Vec::<u32>::new(),
        "what the lease ran is killed"
    );
    assert!(recovery.inventory().await.unwrap().is_empty());
    let err = recovery
        .reap(&envrt_runtime_core::InventoryItem {
            kind: "workspace".into(),
            id: "nobody@elsewhere:/x/lease-1".into(),
            lease_id: None,
        })
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid input: \"nobody@elsewhere:/x/lease-1\" names no host this driver knows"
    );
    fresh.shutdown().await;
}
