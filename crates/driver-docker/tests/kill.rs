//! Ending a command's processes against a real engine: a dropped execute future kills
//! its whole tree (also when the async runtime shuts down right after, as the CLI's
//! SIGINT path does, and also before the wrapper's pid report was read), and a command that fills the container's pids limit is still
//! killed at its timeout, from outside the container.

mod common;

use std::time::Duration;

use envrt_runtime_core::{ExecuteRequest, LeasePolicy};
use serde_json::json;

fn unique() -> u32 {
    // A sleep length no other test uses, to find the test's own processes.
    100_000 + (uuid::Uuid::new_v4().as_u128() % 800_000) as u32
}

/// Host processes of `container` whose command line contains `needle` (not zombies).
fn host_processes(container: &str, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let path = entry.path();
        let Ok(cgroup) = std::fs::read_to_string(path.join("cgroup")) else {
            continue;
        };
        if !cgroup.contains(container) {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        if stat.rsplit(") ").next().is_some_and(|rest| rest.starts_with('Z')) {
            continue;
        }
        let cmdline = std::fs::read(path.join("cmdline")).unwrap_or_default();
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(needle) {
            found.push(text);
        }
    }
    found
}

/// Waits up to 10 s (the contract's bound) for no process matching `needle` to be left.
async fn gone_within_bound(container: &str, needle: &str) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = host_processes(container, needle);
        if left.is_empty() || tokio::time::Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Returns once `count` processes matching `needle` run in `container`.
async fn started(container: &str, needle: String, count: usize) {
    while host_processes(container, &needle).len() < count {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_execute_kills_its_whole_tree() {
    let h = harness_or_skip!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let container = lease.provider_lease_id.clone().unwrap();
        let n = unique();
        let script = format!("sleep {n} & setsid sleep {n}1 & echo started; sleep {n}2");
        let request = ExecuteRequest::new("sh", ["-c", &script]);
        let mut execute = Box::pin(h.runtime.execute(&lease.id, request));
        let all_started = tokio::select! {
            _ = &mut execute => false,
            _ = started(&container, format!("sleep {n}"), 3) => true,
        };
        assert!(all_started);
        // Dropped while it runs.
        drop(execute);
        assert_eq!(
            gone_within_bound(&container, &format!("sleep {n}")).await,
            Vec::<String>::new()
        );
        // The lease still runs commands.
        assert_eq!(h.sh(&lease, "echo ok").await.stdout, b"ok\n");
    })
    .await;
    h.finish().await;
}

#[test]
fn dropping_an_execute_kills_its_tree_when_the_runtime_shuts_down_right_after() {
    let n = unique();
    let container = {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let made = runtime.block_on(async {
            let h = common::harness().await?;
            let lease = h.default_lease().await;
            let container = lease.provider_lease_id.clone().unwrap();
            let script = format!("sleep {n} & sleep {n}1");
            let mut execute = Box::pin(h.runtime.execute(&lease.id, ExecuteRequest::new("sh", ["-c", &script])));
            let all_started = tokio::select! {
                _ = &mut execute => false,
                _ = started(&container, format!("sleep {n}"), 2) => true,
            };
            assert!(all_started);
            drop(execute);
            h.abandon();
            Some(container)
        });
        // As the CLI does after an interrupt: no task of this runtime runs again.
        runtime.shutdown_background();
        match made {
            Some(made) => made,
            None => return,
        }
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let left = gone_within_bound(&container, &format!("sleep {n}")).await;
        let h = common::harness().await.unwrap();
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", "-v", &container])
            .output();
        h.finish().await;
        assert_eq!(left, Vec::<String>::new());
    });
}

#[test]
fn dropping_an_execute_before_its_pid_report_was_read_kills_it_when_the_runtime_shuts_down_right_after() {
    let n = unique();
    let needle = format!("sleep {n}");
    let container = {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let made = runtime.block_on(async {
            let h = common::harness().await?;
            let lease = h.default_lease().await;
            let container = lease.provider_lease_id.clone().unwrap();
            let request = ExecuteRequest::new("sleep", [n.to_string()]);
            let mut execute = Box::pin(h.runtime.execute(&lease.id, request));
            // Polled only while nothing of the command is in the container: once its
            // wrapper (whose arguments name the command) shows, it is dropped without
            // another poll, so the wrapper's pid report is never read.
            while host_processes(&container, &needle).is_empty() {
                assert!(
                    futures::FutureExt::now_or_never(execute.as_mut()).is_none(),
                    "the command ended"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            drop(execute);
            h.abandon();
            Some(container)
        });
        // As the CLI does after an interrupt: no task of this runtime runs again.
        runtime.shutdown_background();
        match made {
            Some(made) => made,
            None => return,
        }
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let left = gone_within_bound(&container, &needle).await;
        let h = common::harness().await.unwrap();
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", "-v", &container])
            .output();
        h.finish().await;
        assert_eq!(left, Vec::<String>::new());
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_filling_the_pids_limit_is_killed_at_its_timeout_and_the_lease_runs_again() {
    let h = harness_or_skip!();
    common::bounded(180, async {
        let lease = h.lease(json!({"pidsLimit": 64}), LeasePolicy::Ephemeral).await;
        let container = lease.provider_lease_id.clone().unwrap();
        // Forks until the pids limit refuses, and keeps trying.
        let script = "f() { while :; do f & sleep 1; done; }; sleep 3000 & f 2>/dev/null & wait";
        let mut request = ExecuteRequest::new("sh", ["-c", script]);
        request.timeout = Some(Duration::from_secs(3));
        let r = h.runtime.execute(&lease.id, request).await.unwrap();
        assert!(r.timed_out, "{:?}", r.exit_code);
        assert_eq!(r.metadata["survivors"], 0);
        assert_eq!(gone_within_bound(&container, "f() {").await, Vec::<String>::new());
        assert_eq!(gone_within_bound(&container, "sleep 1").await, Vec::<String>::new());
        // Only the container's own processes are left: docker-init and its main process.
        assert_eq!(
            host_processes(&container, "").len(),
            2,
            "{:?}",
            host_processes(&container, "")
        );
        assert_eq!(h.sh(&lease, "echo ok").await.stdout, b"ok\n");
    })
    .await;
    h.finish().await;
}
