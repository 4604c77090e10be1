//! Containers are hardened by default: read from inside a real
//! container created by the driver, and from `docker inspect`.

mod common;

use common::bounded;
use envrt_driver_docker::{DEFAULT_MEMORY_BYTES, DEFAULT_PIDS_LIMIT};
use envrt_runtime_core::{Lease, LeasePolicy};
use serde_json::json;

/// A `/proc/self/status` field of a command run in the lease.
async fn status_field(h: &common::Harness, lease: &Lease, field: &str) -> String {
    let out = h.sh(lease, "cat /proc/self/status").await;
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {text}"))
        .trim()
        .to_owned()
}

/// The first readable of `paths` inside the container (cgroup v2 or v1 layouts).
async fn cgroup_value(h: &common::Harness, lease: &Lease, paths: &[&str]) -> String {
    let script = "for f; do [ -r \"$f\" ] && { cat \"$f\"; exit 0; }; done; exit 3";
    let mut args = vec!["-c", script, "sh"];
    args.extend_from_slice(paths);
    let out = h
        .runtime
        .execute(&lease.id, envrt_runtime_core::ExecuteRequest::new("sh", args))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "none of {paths:?} is readable");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn inspect(h: &common::Harness, lease: &Lease) -> serde_json::Value {
    let id = lease.provider_lease_id.as_deref().unwrap();
    let out = std::process::Command::new("docker")
        .args(["inspect", id])
        .output()
        .unwrap();
    assert!(out.status.success());
    let _ = h;
    serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()[0].clone()
}

#[tokio::test]
async fn default_containers_drop_capabilities_forbid_new_privileges_and_are_bounded() {
    let h = harness_or_skip!();
    bounded(120, async {
        let lease = h.default_lease().await;
        // Root in the container keeps only CHOWN (0), DAC_OVERRIDE (1) and FOWNER (3).
        assert_eq!(status_field(&h, &lease, "CapEff").await, "000000000000000b");
        assert_eq!(status_field(&h, &lease, "CapBnd").await, "000000000000000b");
        assert_eq!(status_field(&h, &lease, "NoNewPrivs").await, "1");
        let pids = cgroup_value(&h, &lease, &["/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max"]).await;
        assert_eq!(pids, DEFAULT_PIDS_LIMIT.to_string());
        let memory = cgroup_value(
            &h,
            &lease,
            &[
                "/sys/fs/cgroup/memory.max",
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            ],
        )
        .await;
        assert_eq!(memory, DEFAULT_MEMORY_BYTES.to_string());
        let host = &inspect(&h, &lease)["HostConfig"];
        assert_eq!(host["CapDrop"], json!(["ALL"]));
        assert_eq!(host["SecurityOpt"], json!(["no-new-privileges"]));
        assert_eq!(host["PidsLimit"], json!(DEFAULT_PIDS_LIMIT));
        assert_eq!(host["Memory"], json!(DEFAULT_MEMORY_BYTES));
        assert_eq!(host["ReadonlyRootfs"], json!(false));
        // A setuid binary gains nothing: no_new_privs is inherited by every exec.
        let out = h.sh(&lease, "id -u").await;
        assert_eq!(out.stdout, b"0\n");
        // Without CAP_SYS_ADMIN/NET_ADMIN/MKNOD, root cannot mount, or make devices.
        let out = h.sh(&lease, "mount -t tmpfs none /mnt 2>&1; echo $?").await;
        assert_ne!(
            String::from_utf8_lossy(&out.stdout).trim_end().lines().last(),
            Some("0")
        );
        let out = h.sh(&lease, "mknod /tmp/null c 1 3 2>&1; echo $?").await;
        assert_ne!(
            String::from_utf8_lossy(&out.stdout).trim_end().lines().last(),
            Some("0")
        );
        h.runtime
            .release_lease(&lease.id, envrt_runtime_core::LeaseStatus::Released)
            .await
            .unwrap();
    })
    .await;
    h.finish().await;
}

#[tokio::test]
async fn tightened_containers_run_read_only_as_a_user_with_no_capabilities_and_tighter_limits() {
    let h = harness_or_skip!();
    bounded(120, async {
        let lease = h
            .lease(
                json!({"readOnlyRootFs": true, "user": "65534:65534", "pidsLimit": 64,
                       "memoryBytes": 134217728, "nanoCpus": 500000000}),
                LeasePolicy::Ephemeral,
            )
            .await;
        assert_eq!(status_field(&h, &lease, "CapEff").await, "0000000000000000");
        assert_eq!(status_field(&h, &lease, "NoNewPrivs").await, "1");
        assert_eq!(
            cgroup_value(&h, &lease, &["/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max"]).await,
            "64"
        );
        let host = &inspect(&h, &lease)["HostConfig"];
        assert_eq!(host["ReadonlyRootfs"], json!(true));
        assert_eq!(host["NanoCpus"], json!(500000000));
        assert_eq!(host["Memory"], json!(134217728));
        // The root is read-only; the workspace and /tmp are writable.
        let out = h
            .sh(
                &lease,
                "touch /etc/x 2>/dev/null; echo $?; id -u; touch x /tmp/y && echo ok",
            )
            .await;
        assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n65534\nok\n");
        // Sync works into and out of the volume workspace.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"data").unwrap();
        let file = |s: &str, t: &str| envrt_runtime_core::SyncFile::file(s, t);
        let op = |f| envrt_runtime_core::SyncOperation {
            operation_id: "op".into(),
            files: vec![f],
            post_upload_commands: Vec::new(),
        };
        h.runtime
            .sync_in(&lease.id, &[op(file(dir.path().join("f").to_str().unwrap(), "in/f"))])
            .await
            .unwrap();
        let back = dir.path().join("back");
        h.runtime
            .sync_out(&lease.id, &[op(file("in/f", back.to_str().unwrap()))])
            .await
            .unwrap();
        assert_eq!(std::fs::read(&back).unwrap(), b"data");
        h.runtime
            .release_lease(&lease.id, envrt_runtime_core::LeaseStatus::Released)
            .await
            .unwrap();
    })
    .await;
    h.finish().await;
}
