//! Templates of the Docker driver against a real engine: a capture commits the container
//! to a labelled image, a lease from it runs that image with the captured files and none
//! of the later changes, and deletion removes the image.

mod common;

use envrt_runtime_core::{AcquireRequest, Lease, LeaseStatus, RuntimeError};
use serde_json::json;

/// Image ids carrying `label=value`, per the docker CLI (independent of the driver).
fn cli_images(label: &str, value: &str) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args(["images", "-q", "--filter", &format!("label={label}={value}")])
        .output()
        .expect("docker images");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn cli_label(container: &str, label: &str) -> String {
    let format = format!("{{{{index .Config.Labels \"{label}\"}}}}");
    let out = std::process::Command::new("docker")
        .args(["inspect", "--format", &format, container])
        .output()
        .expect("docker inspect");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Removes every image this test run made, whatever happened.
struct Images(String);

impl Drop for Images {
    fn drop(&mut self) {
        let ids = cli_images(common::TEST_LABEL, &self.0);
        if !ids.is_empty() {
            let _ = std::process::Command::new("docker")
                .args(["rmi", "-f"])
                .args(&ids)
                .output();
        }
    }
}

async fn acquire(h: &common::Harness, environment: &str, template: Option<&str>) -> Result<Lease, RuntimeError> {
    let mut request = AcquireRequest::new(environment, "acme");
    request.template = template.map(str::to_owned);
    request.requested_expires_at = None;
    h.runtime.acquire_lease(request).await
}

#[tokio::test]
async fn a_lease_from_a_template_runs_the_committed_image_without_later_changes() {
    let h = harness_or_skip!();
    let _images = Images(h.run.clone());
    let env = h.environment(json!({})).await;
    let source = acquire(&h, &env, None).await.unwrap();
    let setup = h
        .sh(
            &source,
            "echo v1 > /workspace/config && mkdir -p /workspace/tools && echo t > /workspace/tools/t && echo sys > /tmp/system-file",
        )
        .await;
    assert_eq!(setup.exit_code, Some(0), "{}", String::from_utf8_lossy(&setup.stderr));

    let template = h.runtime.capture_template(&source.id, Some("base")).await.unwrap();
    assert_eq!(template.kind, "image");
    assert_eq!(
        template.metadata["image"],
        format!("envrt-template:{}", template.id).as_str()
    );
    // The image is really there, labelled as a template of this driver's scope.
    assert_eq!(cli_images("envrt.template", &template.id).len(), 1);
    assert_eq!(cli_images(common::TEST_LABEL, &h.run).len(), 1);
    assert_eq!(h.runtime.templates(&env, "acme").await.unwrap(), vec![template.clone()]);
    // Another environment does not see it.
    let other = h.environment(json!({})).await;
    assert!(h.runtime.templates(&other, "acme").await.unwrap().is_empty());
    // Nor does another tenant.
    assert!(h.runtime.templates(&env, "globex").await.unwrap().is_empty());

    let later = h
        .sh(
            &source,
            "echo v2 > /workspace/config && touch /workspace/later && rm /tmp/system-file",
        )
        .await;
    assert_eq!(later.exit_code, Some(0));

    let lease = acquire(&h, &env, Some(&template.id)).await.unwrap();
    assert_eq!(lease.metadata["sourceTemplateRef"], template.id.as_str());
    let seen = h
        .sh(
            &lease,
            "cat config tools/t /tmp/system-file; test -e later || echo no-later; pwd",
        )
        .await;
    assert_eq!(
        String::from_utf8_lossy(&seen.stdout),
        "v1\nt\nsys\nno-later\n/workspace\n"
    );
    let container = lease.provider_lease_id.clone().unwrap();
    assert_eq!(cli_label(&container, "envrt.lease-id"), lease.id);
    assert_eq!(cli_label(&container, "envrt.template"), template.id);

    // Deleting the template while a lease runs its image: the lease keeps running.
    assert!(h.runtime.delete_template(&env, "acme", &template.id).await.unwrap());
    assert!(!h.runtime.delete_template(&env, "acme", &template.id).await.unwrap());
    assert!(h.runtime.templates(&env, "acme").await.unwrap().is_empty());
    assert_eq!(h.sh(&lease, "cat config").await.stdout, b"v1\n");
    let error = acquire(&h, &env, Some(&template.id)).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("Template \"{}\" was not found in environment \"{env}\".", template.id)
    );
    for l in [&source, &lease] {
        h.runtime.release_lease(&l.id, LeaseStatus::Released).await.unwrap();
    }
    // Whatever the engine kept of the deleted template for the lease that ran it went with
    // that lease's container: nothing of the test's is left, and nothing is left to prune.
    assert_eq!(h.driver.prune_template_images().await.unwrap(), Vec::<String>::new());
    assert!(
        cli_images(common::TEST_LABEL, &h.run).is_empty(),
        "template images left behind"
    );
    h.finish().await;
}

#[tokio::test]
async fn an_expiry_of_the_source_does_not_carry_over_and_read_only_roots_are_refused() {
    let h = harness_or_skip!();
    let _images = Images(h.run.clone());
    let env = h.environment(json!({})).await;
    let mut request = AcquireRequest::new(&env, "acme");
    request.requested_expires_at =
        Some(envrt_runtime_core::Timestamp::now().after(std::time::Duration::from_secs(600)));
    let source = h.runtime.acquire_lease(request).await.unwrap();
    let template = h.runtime.capture_template(&source.id, None).await.unwrap();
    assert_eq!(template.label, None);
    let lease = acquire(&h, &env, Some(&template.id)).await.unwrap();
    assert_eq!(lease.expires_at, None);
    assert_eq!(
        cli_label(lease.provider_lease_id.as_deref().unwrap(), "envrt.expires-at"),
        ""
    );
    // Still alive: its main process is not the source's expiry sleep.
    assert_eq!(h.sh(&lease, "true").await.exit_code, Some(0));

    let read_only = h.environment(json!({"readOnlyRootFs": true})).await;
    let ro = acquire(&h, &read_only, None).await.unwrap();
    let error = h.runtime.capture_template(&ro.id, None).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "Invalid input: a container with readOnlyRootFs keeps its workspace on a volume, which a template (an image commit) would not hold"
    );
    assert!(h.runtime.templates(&read_only, "acme").await.unwrap().is_empty());
    for l in [&source, &lease, &ro] {
        h.runtime.release_lease(&l.id, LeaseStatus::Released).await.unwrap();
    }
    assert!(h.runtime.delete_template(&env, "acme", &template.id).await.unwrap());
    assert!(
        cli_images(common::TEST_LABEL, &h.run).is_empty(),
        "template images left behind"
    );
    h.finish().await;
}
