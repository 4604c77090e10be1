//! Pause and unpause on Docker against the real engine: a paused container's counter does
//! not move while another lease's does, the lease refuses with the exact text, its
//! spawned process and output buffer go on after unpause; a paused container ends at
//! release, at destroy and at its expiry (the host watchdog alone), and a
//! `reuse_by_environment` release stops it for a later resume.

mod common;

use std::time::{Duration, Instant};

use envrt_runtime_core::{
    AcquireRequest, ExecuteRequest, Lease, LeasePolicy, LeaseStatus, Offsets, OutputEvent, ProcessStream, SpawnRequest,
    SyncOperation, Timestamp, is_paused,
};
use serde_json::json;

/// A harness whose containers carry the supervisor, for spawned processes.
async fn harness() -> Option<common::Harness> {
    common::harness_with(|config| config.agent = Some(envrt_test_support::docker::static_agent())).await
}

macro_rules! with_agent_or_skip {
    () => {
        match harness().await {
            Some(h) => h,
            None => return,
        }
    };
}

fn inspect(container: &str, format: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["inspect", "-f", format, container])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The counter's value, read from the host through the container's init's root (the
/// container is frozen, so nothing can be asked inside it).
fn count(lease: &Lease) -> u64 {
    let container = lease.provider_lease_id.as_deref().unwrap();
    let pid = inspect(container, "{{.State.Pid}}");
    let workspace = lease.metadata["workspace"].as_str().unwrap();
    std::fs::read_to_string(format!("/proc/{pid}/root{workspace}/count"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(30);
    while !done() {
        if Instant::now() > until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

fn counter() -> SpawnRequest {
    SpawnRequest::new([
        "sh",
        "-c",
        "i=0; while :; do i=$((i+1)); echo $i > count.tmp; mv count.tmp count; echo tick-$i; sleep 0.02; done",
    ])
}

async fn counting(h: &common::Harness, env: &str, policy: LeasePolicy, ttl: Option<Duration>) -> (Lease, String) {
    let mut request = AcquireRequest::new(env, "acme");
    request.policy = policy;
    request.requested_expires_at = ttl.map(|t| Timestamp::now().after(t));
    let lease = h.runtime.acquire_lease(request).await.unwrap();
    let process = h.runtime.spawn(&lease.id, counter()).await.unwrap().id.to_string();
    assert!(eventually(|| count(&lease) > 2).await, "the counter never counted");
    (lease, process)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_container_stands_still_refuses_and_goes_on_after_unpause() {
    let h = with_agent_or_skip!();
    common::bounded(240, async {
        let env = h.environment(json!({})).await;
        let (lease, process) = counting(&h, &env, LeasePolicy::Ephemeral, None).await;
        let (reference, _) = counting(&h, &env, LeasePolicy::Ephemeral, None).await;
        let container = lease.provider_lease_id.clone().unwrap();

        assert!(is_paused(&h.runtime.pause_lease(&lease.id).await.unwrap()));
        assert_eq!(inspect(&container, "{{.State.Paused}}"), "true");
        let frozen_at = count(&lease);
        let start = count(&reference);
        assert!(
            eventually(|| count(&reference) >= start + 20).await,
            "the reference stopped too"
        );
        assert_eq!(count(&lease), frozen_at, "the paused container's counter moved");

        let text = format!("Lease \"{}\" is paused.", lease.id);
        let refused = h
            .runtime
            .execute(&lease.id, ExecuteRequest::new("true", Vec::<String>::new()))
            .await
            .unwrap_err();
        assert_eq!(refused.to_string(), text);
        let refused = h
            .runtime
            .spawn(&lease.id, SpawnRequest::new(["true"]))
            .await
            .unwrap_err();
        assert_eq!(refused.to_string(), text);
        let nothing: [SyncOperation; 0] = [];
        assert_eq!(
            h.runtime.sync_in(&lease.id, &nothing).await.unwrap_err().to_string(),
            text
        );
        let refused = match h.runtime.open_duplex_channel(&lease.id, &["cat".to_owned()]).await {
            Err(e) => e,
            Ok(_) => panic!("a duplex channel opened on a paused lease"),
        };
        assert_eq!(refused.to_string(), text);

        assert!(!is_paused(&h.runtime.unpause_lease(&lease.id).await.unwrap()));
        assert_eq!(inspect(&container, "{{.State.Paused}}"), "false");
        assert!(
            eventually(|| count(&lease) > frozen_at + 2).await,
            "the counter did not go on"
        );
        let mut output = h.runtime.output(&process, &Offsets::zero()).await.unwrap();
        let mut stdout = Vec::new();
        let after = format!("tick-{}\n", frozen_at + 2);
        while !String::from_utf8_lossy(&stdout).contains(&after) {
            match output.next().await.unwrap() {
                Some(OutputEvent::Chunk(c)) if c.stream == ProcessStream::Stdout => stdout.extend(c.bytes),
                Some(OutputEvent::Chunk(_)) => {}
                other => panic!("the counter ended: {other:?}"),
            }
        }
        assert!(String::from_utf8_lossy(&stdout).starts_with("tick-1\n"));
        drop(output);

        // Paused, the container still goes at release and at destroy.
        h.runtime.pause_lease(&lease.id).await.unwrap();
        h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        assert_eq!(
            inspect(&container, "{{.Id}}"),
            "",
            "a paused container outlived release"
        );
        let other = reference.provider_lease_id.clone().unwrap();
        h.runtime.pause_lease(&reference.id).await.unwrap();
        h.runtime.destroy_lease(&reference.id).await.unwrap();
        assert_eq!(inspect(&other, "{{.Id}}"), "", "a paused container outlived destroy");
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_container_ends_at_its_expiry_and_a_kept_one_stops_for_resume() {
    let h = with_agent_or_skip!();
    common::bounded(240, async {
        let env = h.environment(json!({})).await;
        let (lease, _) = counting(&h, &env, LeasePolicy::Ephemeral, Some(Duration::from_secs(5))).await;
        let container = lease.provider_lease_id.clone().unwrap();
        h.runtime.pause_lease(&lease.id).await.unwrap();
        assert_eq!(inspect(&container, "{{.State.Paused}}"), "true");
        // Nobody releases it: the host watchdog ends the frozen container at its expiry.
        assert!(
            eventually(|| inspect(&container, "{{.Id}}").is_empty()).await,
            "a paused container outlived its expiry"
        );
        let report = h.runtime.release_expired().await.unwrap();
        assert_eq!(report.released.len(), 1, "{report:?}");

        let (kept, _) = counting(&h, &env, LeasePolicy::ReuseByEnvironment, None).await;
        let kept_container = kept.provider_lease_id.clone().unwrap();
        h.runtime.pause_lease(&kept.id).await.unwrap();
        h.runtime.release_lease(&kept.id, LeaseStatus::Released).await.unwrap();
        assert_eq!(
            inspect(&kept_container, "{{.State.Running}} {{.State.Paused}}"),
            "false false"
        );
        let resumed = h.runtime.resume_lease(&kept.id).await.unwrap();
        assert!(!is_paused(&resumed));
        assert_eq!(h.sh(&resumed, "echo back").await.stdout, b"back\n");
        h.runtime.destroy_lease(&kept.id).await.unwrap();
    })
    .await;
    h.finish().await;
}
