//! Fork of the local driver behind the runtime, against the real file system and real
//! processes: every copy holds the source's workspace as it was at the fork, no copy sees
//! another's or the source's later writes, the source keeps running untouched, processes
//! are not copied, and a copy that fails half-way leaves nothing behind.

mod common;

use std::sync::Arc;

use common::{Harness, bounded, processes_with, unique_sleep};
use envrt_driver_local::{LocalConfig, LocalDriver};
use envrt_runtime_core::{Environment, EnvironmentRuntime, LeaseFilter, LeaseStatus, SpawnRequest};

#[tokio::test]
async fn each_copy_holds_the_fork_point_and_nothing_written_later() {
    let h = Harness::new().await;
    let source = h.lease().await;
    let setup = h
        .sh(
            &source,
            "mkdir -p d/e && printf base > d/e/f && printf x > exe && chmod 751 exe && ln -s d/e/f link",
        )
        .await;
    assert_eq!(setup.exit_code, Some(0), "{}", String::from_utf8_lossy(&setup.stderr));
    // A process of the source runs across the fork: it keeps running and is not copied.
    let tag = unique_sleep();
    let spawned = h
        .runtime
        .spawn(&source.id, SpawnRequest::new(["sleep", tag.as_str()]))
        .await
        .unwrap();

    let copies = bounded(h.runtime.fork_lease(&source.id, 3)).await.unwrap();
    assert_eq!(copies.len(), 3);
    let mut ids: Vec<&str> = copies.iter().map(|c| c.id.as_str()).collect();
    ids.push(&source.id);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "every copy has an id of its own");
    for copy in &copies {
        assert_eq!(copy.status, LeaseStatus::Active);
        assert_eq!(copy.company_id, "acme");
        assert_eq!(copy.run_id.as_deref(), Some("run-1"));
        assert_eq!(copy.environment_id.as_deref(), Some("env-local"));
        assert_eq!(copy.metadata["forkedFrom"], source.id.as_str());
        assert_ne!(h.workspace(copy), h.workspace(&source));
        assert!(
            h.runtime.processes(&copy.id).await.unwrap().is_empty(),
            "processes are not copied"
        );
    }
    assert_eq!(
        processes_with(&tag).len(),
        1,
        "the source's process runs once, not copied"
    );

    // Later writes, in the source and in each copy, stay where they were made.
    h.sh(&source, "printf source > d/e/f").await;
    for (n, copy) in copies.iter().enumerate() {
        let out = h
            .sh(
                copy,
                &format!("cat d/e/f; echo; cat link; echo; printf copy{n} > d/e/f"),
            )
            .await;
        assert_eq!(String::from_utf8_lossy(&out.stdout), "base\nbase\n", "copy {n}");
        let mode = h.sh(copy, "stat -c %a exe").await;
        assert_eq!(String::from_utf8_lossy(&mode.stdout), "751\n");
    }
    for (n, copy) in copies.iter().enumerate() {
        let out = h.sh(copy, "cat d/e/f").await;
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("copy{n}"));
    }
    let out = h.sh(&source, "cat d/e/f").await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "source");
    assert_eq!(
        h.runtime.process(&spawned.id.to_string()).await.unwrap().status,
        envrt_runtime_core::ProcessStatus::Running
    );

    // Each copy is a lease like any other: it is listed, released and removed on its own.
    let active = LeaseFilter {
        statuses: vec![LeaseStatus::Active],
        ..Default::default()
    };
    assert_eq!(h.runtime.leases(&active).await.unwrap().len(), 4);
    for lease in copies.iter().chain([&source]) {
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    }
    assert!(processes_with(&tag).is_empty());
    h.finish();
}

#[tokio::test]
async fn a_fork_count_out_of_bounds_or_a_lease_not_active_is_refused() {
    let h = Harness::new().await;
    let source = h.lease().await;
    let refused =
        |r: Result<Vec<envrt_runtime_core::Lease>, envrt_runtime_core::RuntimeError>| r.unwrap_err().to_string();
    assert_eq!(
        refused(h.runtime.fork_lease(&source.id, 0).await),
        "Invalid input: a fork needs a count of at least 1"
    );
    assert_eq!(
        refused(h.runtime.fork_lease(&source.id, 17).await),
        "Invalid input: a fork makes at most 16 copies, not 17"
    );
    assert_eq!(
        refused(h.runtime.fork_lease("no-such-lease", 1).await),
        "Lease \"no-such-lease\" was not found."
    );
    h.runtime
        .release_lease(&source.id, LeaseStatus::Released)
        .await
        .unwrap();
    assert_eq!(
        refused(h.runtime.fork_lease(&source.id, 1).await),
        format!("Lease \"{}\" is not active (status: released).", source.id)
    );
    assert_eq!(h.runtime.leases(&LeaseFilter::default()).await.unwrap().len(), 1);
    h.finish();
}

/// A tmpfs of 1 MiB mounted for the test, unmounted when dropped.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount() -> Option<SmallDisk> {
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var_os("CI").is_none(),
                "the failed-copy test needs root (to mount a tmpfs)"
            );
            envrt_test_support::skip_loudly("skipping: mounting a tmpfs needs root");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("envrt-fork-disk-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m,mode=0700", "envrt-fork-test"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(status.success(), "mount a tmpfs on {}", dir.display());
        Some(SmallDisk(dir))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[tokio::test]
async fn a_copy_that_fails_half_way_ends_the_copies_made_so_far() {
    let Some(disk) = SmallDisk::mount() else { return };
    let root = disk.0.join("root");
    let driver = Arc::new(
        LocalDriver::new(LocalConfig {
            root: Some(root.clone()),
            ..Default::default()
        })
        .unwrap(),
    );
    let runtime = EnvironmentRuntime::new();
    runtime.register_driver(driver);
    runtime
        .put_environment(Environment::new("env-local", "Local", "local"))
        .await
        .unwrap();
    let source = runtime
        .acquire_lease(envrt_runtime_core::AcquireRequest::new("env-local", "acme"))
        .await
        .unwrap();
    let workspace = std::path::PathBuf::from(source.metadata["workspace"].as_str().unwrap());
    // 400 KiB: the first copy fits on the 1 MiB disk, the second does not.
    std::fs::write(workspace.join("big"), vec![7u8; 400 * 1024]).unwrap();

    let error = runtime.fork_lease(&source.id, 3).await.unwrap_err().to_string();
    let prefix = format!("cannot copy {}/lease-", root.display());
    assert!(
        error.starts_with(&prefix) && error.ends_with("/big: No space left on device (os error 28)"),
        "{error}"
    );
    // The source was copied (the first copy made); the second copy, taken from the first, failed.
    assert!(!error.contains(&source.id), "{error}");
    // Nothing of the copies is left: no workspace, no watchdog, no record.
    let left: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec![format!("lease-{}", source.id)]);
    let leases = runtime.leases(&LeaseFilter::default()).await.unwrap();
    assert_eq!(
        leases.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
        [source.id.as_str()]
    );
    // The source is untouched and still usable.
    assert_eq!(std::fs::read(workspace.join("big")).unwrap().len(), 400 * 1024);
    let copies = runtime.fork_lease(&source.id, 1).await.unwrap();
    for lease in copies.iter().chain([&source]) {
        runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    }
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
}
