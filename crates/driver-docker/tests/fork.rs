//! Fork of the Docker driver against a real engine: the source container is committed
//! once to an image the copies share, each copy's file system is the source's at the
//! fork, later writes stay where they were made, the shared image is never listed as a
//! template and goes with the last copy, and a copy that cannot be made ends the others.

mod common;

use envrt_runtime_core::{
    AcquireInput, AcquireRequest, EnvironmentDriver, Lease, LeaseContext, LeasePolicy, LeaseStatus, SpawnRequest,
};
use serde_json::json;

/// Image ids carrying this run's label, per the docker CLI (independent of the driver).
fn cli_images(run: &str) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args([
            "images",
            "-aq",
            "--filter",
            &format!("label={}={run}", common::TEST_LABEL),
        ])
        .output()
        .expect("docker images");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Removes every image this test made, whatever happened.
struct Images(String);

impl Drop for Images {
    fn drop(&mut self) {
        let ids = cli_images(&self.0);
        if !ids.is_empty() {
            let _ = std::process::Command::new("docker")
                .args(["rmi", "-f"])
                .args(&ids)
                .output();
        }
    }
}

async fn source(h: &common::Harness) -> (String, Lease) {
    let env = h.environment(json!({})).await;
    let mut request = AcquireRequest::new(&env, "acme");
    request.run_id = Some("run-1".into());
    let lease = h.runtime.acquire_lease(request).await.unwrap();
    (env, lease)
}

#[tokio::test]
async fn each_copy_runs_the_fork_point_and_the_shared_image_goes_with_the_last_copy() {
    // With the process supervisor, so the source has a process that outlives a command.
    let Some(h) = common::harness_with(|c| c.agent = Some(envrt_test_support::docker::static_agent())).await else {
        return;
    };
    let _images = Images(h.run.clone());
    let (env, source) = source(&h).await;
    let setup = h.sh(&source, "echo base > /workspace/f && echo sys > /tmp/s").await;
    assert_eq!(setup.exit_code, Some(0), "{}", String::from_utf8_lossy(&setup.stderr));
    h.runtime
        .spawn(&source.id, SpawnRequest::new(["sleep", "3000"]))
        .await
        .unwrap();

    let copies = common::bounded(120, h.runtime.fork_lease(&source.id, 2)).await.unwrap();
    assert_eq!(copies.len(), 2);
    // One image, shared, not listed as a template.
    assert_eq!(cli_images(&h.run).len(), 1);
    assert!(h.runtime.templates(&env, "acme").await.unwrap().is_empty());

    h.sh(&source, "echo source > /workspace/f").await;
    for (n, copy) in copies.iter().enumerate() {
        assert_eq!(copy.metadata["forkedFrom"], source.id.as_str());
        assert_ne!(copy.provider_lease_id, source.provider_lease_id);
        let out = h
            .sh(copy, &format!("cat /workspace/f /tmp/s; echo copy{n} > /workspace/f"))
            .await;
        assert_eq!(String::from_utf8_lossy(&out.stdout), "base\nsys\n", "copy {n}");
        assert!(
            h.processes_matching(copy, "sleep 3000").await.is_empty(),
            "processes are not copied"
        );
    }
    for (n, copy) in copies.iter().enumerate() {
        let out = h.sh(copy, "cat /workspace/f").await;
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("copy{n}\n"));
    }
    let out = h.sh(&source, "cat /workspace/f").await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "source\n");
    assert_eq!(
        h.processes_matching(&source, "sleep 3000").await.len(),
        1,
        "the source keeps its process"
    );

    h.runtime
        .release_lease(&copies[0].id, LeaseStatus::Released)
        .await
        .unwrap();
    assert_eq!(cli_images(&h.run).len(), 1, "a copy still runs the image");
    h.runtime
        .release_lease(&copies[1].id, LeaseStatus::Released)
        .await
        .unwrap();
    assert_eq!(
        cli_images(&h.run),
        Vec::<String>::new(),
        "the last copy took the image with it"
    );
    h.runtime
        .release_lease(&source.id, LeaseStatus::Released)
        .await
        .unwrap();
    h.finish().await;
}

#[tokio::test]
async fn a_copy_that_cannot_be_created_ends_the_copies_made_so_far_and_the_image() {
    let h = harness_or_skip!();
    let _images = Images(h.run.clone());
    let (env, source) = source(&h).await;
    let environment = h.runtime.environment(&env).await.unwrap().unwrap();
    let ids: Vec<String> = (0..3).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    // The third copy's container name is taken: the engine refuses to create it.
    let blocker = format!("envrt-{}", ids[2]);
    let made = std::process::Command::new("docker")
        .args(["create", "--name", &blocker, "--label"])
        .arg(format!("{}={}", common::TEST_LABEL, h.run))
        .args([common::image().as_str(), "true"])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let inputs: Vec<AcquireInput> = ids
        .iter()
        .map(|id| AcquireInput {
            lease_id: id.clone(),
            environment: environment.clone(),
            company_id: "acme".into(),
            run_id: None,
            issue_id: None,
            execution_workspace_id: None,
            policy: LeasePolicy::Ephemeral,
            requested_cwd: None,
            metadata: Default::default(),
            requested_expires_at: None,
            template: None,
            network: None,
        })
        .collect();
    let context = LeaseContext {
        lease: source.clone(),
        environment: Some(environment),
    };
    let fork = h.driver.as_fork().expect("the Docker driver forks");
    let error = fork.fork_lease(&context, &inputs).await.unwrap_err().to_string();
    // The engine's own words sit between the driver's (they vary by engine version).
    assert!(
        error.starts_with("Docker engine at ")
            && error.contains(" refused creating a container: ")
            && error.contains(&blocker)
            && error.ends_with("(HTTP 409)."),
        "{error}"
    );

    // Left: the source's container and the blocker; no copy, no image.
    let mut left = common::cli_containers(&h.run);
    left.sort();
    let mut expected = vec![
        container_id(source.provider_lease_id.as_deref().unwrap()),
        container_id(&blocker),
    ];
    expected.sort();
    assert_eq!(left, expected);
    assert_eq!(cli_images(&h.run), Vec::<String>::new());
    let _ = std::process::Command::new("docker")
        .args(["rm", "-f", &blocker])
        .output();
    h.runtime
        .release_lease(&source.id, LeaseStatus::Released)
        .await
        .unwrap();
    h.finish().await;
}

/// The short id `docker ps -q` prints for a container.
fn container_id(name_or_id: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["inspect", "--format", "{{.Id}}", name_or_id])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim()[..12].to_owned()
}
