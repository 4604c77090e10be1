//! Templates of the local driver against the real file system and real processes: a
//! capture holds the workspace as it was, a lease from it starts with those files, later
//! changes to the source do not reach it, and deletion removes the copy.

mod common;

use common::Harness;
use envrt_runtime_core::{AcquireRequest, LeaseStatus, RuntimeError};

fn from(template: &str) -> AcquireRequest {
    let mut request = AcquireRequest::new("env-local", "acme");
    request.template = Some(template.to_owned());
    request
}

#[tokio::test]
async fn a_lease_from_a_template_has_the_captured_files_and_not_later_changes() {
    let h = Harness::new().await;
    let source = h.lease().await;
    let setup = h
        .sh(
            &source,
            "mkdir -p tools/bin && printf 'v1' > tools/config && printf '#!/bin/sh\\necho hi' > tools/bin/run \
             && chmod 755 tools/bin/run && ln -s tools/config cfg-link",
        )
        .await;
    assert_eq!(setup.exit_code, Some(0), "{}", String::from_utf8_lossy(&setup.stderr));

    let template = h.runtime.capture_template(&source.id, Some("tools")).await.unwrap();
    assert_eq!(template.kind, "snapshot");
    assert_eq!(template.environment_id, "env-local");
    let cloned = template.metadata["filesCloned"].as_u64().unwrap();
    let copied = template.metadata["filesCopied"].as_u64().unwrap();
    assert_eq!(cloned + copied, 2, "{:?}", template.metadata);
    assert!(
        h.root
            .join(".templates")
            .join(&template.id)
            .join("tree/tools/config")
            .is_file()
    );

    // Changed after the capture: none of this may reach the template.
    let later = h
        .sh(&source, "printf 'v2' > tools/config && touch later && rm tools/bin/run")
        .await;
    assert_eq!(later.exit_code, Some(0));

    let lease = h.runtime.acquire_lease(from(&template.id)).await.unwrap();
    assert_eq!(lease.metadata["sourceTemplateRef"], template.id.as_str());
    let seen = h
        .sh(
            &lease,
            "cat tools/config; echo; tools/bin/run; cat cfg-link; echo; test -e later || echo no-later",
        )
        .await;
    assert_eq!(String::from_utf8_lossy(&seen.stdout), "v1\nhi\nv1\nno-later\n");
    // The new workspace is private like any other, and the template is untouched by it.
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(h.workspace(&lease)).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700);
    h.sh(&lease, "printf 'v3' > tools/config").await;
    let again = h.runtime.acquire_lease(from(&template.id)).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&h.sh(&again, "cat tools/config").await.stdout),
        "v1"
    );

    assert_eq!(
        h.runtime.templates("env-local", "acme").await.unwrap(),
        vec![template.clone()]
    );
    // Another tenant neither sees nor deletes it.
    assert!(h.runtime.templates("env-local", "globex").await.unwrap().is_empty());
    assert!(
        !h.runtime
            .delete_template("env-local", "globex", &template.id)
            .await
            .unwrap()
    );
    for l in [&source, &lease, &again] {
        h.runtime.release_lease(&l.id, LeaseStatus::Released).await.unwrap();
    }
    assert!(
        h.runtime
            .delete_template("env-local", "acme", &template.id)
            .await
            .unwrap()
    );
    h.finish();
}

#[tokio::test]
async fn a_deleted_template_refuses_an_acquire_with_its_text_and_leaves_no_workspace() {
    let h = Harness::new().await;
    let source = h.lease().await;
    h.sh(&source, "echo x > f").await;
    let template = h.runtime.capture_template(&source.id, None).await.unwrap();
    assert!(
        h.runtime
            .delete_template("env-local", "acme", &template.id)
            .await
            .unwrap()
    );
    assert!(
        !h.runtime
            .delete_template("env-local", "acme", &template.id)
            .await
            .unwrap()
    );
    let error = h.runtime.acquire_lease(from(&template.id)).await.unwrap_err();
    assert!(matches!(error, RuntimeError::TemplateNotFound { .. }));
    assert_eq!(
        error.to_string(),
        format!(
            "Template \"{}\" was not found in environment \"env-local\".",
            template.id
        )
    );
    h.runtime
        .release_lease(&source.id, LeaseStatus::Released)
        .await
        .unwrap();
    h.finish();
}

#[tokio::test]
async fn capture_of_an_ended_lease_is_refused_and_captures_nothing() {
    let h = Harness::new().await;
    let source = h.lease().await;
    h.runtime
        .release_lease(&source.id, LeaseStatus::Released)
        .await
        .unwrap();
    let error = h.runtime.capture_template(&source.id, None).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("Lease \"{}\" is not active (status: released).", source.id)
    );
    assert!(h.runtime.templates("env-local", "acme").await.unwrap().is_empty());
    h.finish();
}

/// On a file system that shares blocks (btrfs, XFS with reflink) every file of a capture is
/// cloned, not copied. Set `ENVRT_REFLINK_DIR` to a directory on one to run it (it skips
/// loudly otherwise; ext4 and tmpfs cannot clone).
#[tokio::test]
async fn on_a_reflink_file_system_a_capture_clones_every_file() {
    let Some(dir) = std::env::var_os("ENVRT_REFLINK_DIR") else {
        // Straight to the process's stderr, past the test harness's capture.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED: set ENVRT_REFLINK_DIR to a directory on btrfs or XFS with reflink ***\n"
        );
        return;
    };
    let root = std::path::Path::new(&dir).join(format!("envrt-reflink-{}", uuid::Uuid::new_v4().simple()));
    let driver = std::sync::Arc::new(
        envrt_driver_local::LocalDriver::new(envrt_driver_local::LocalConfig {
            root: Some(root.clone()),
            ..Default::default()
        })
        .unwrap(),
    );
    let runtime = envrt_runtime_core::EnvironmentRuntime::new();
    runtime.register_driver(driver);
    let env = envrt_runtime_core::Environment::new("env-local", "Local", "local");
    runtime.put_environment(env).await.unwrap();
    let sh = |lease: &envrt_runtime_core::Lease, script: &str| {
        let request = envrt_runtime_core::ExecuteRequest::new("sh", ["-c", script]);
        let id = lease.id.clone();
        let runtime = &runtime;
        async move { runtime.execute(&id, request).await.unwrap().stdout }
    };
    let source = runtime
        .acquire_lease(AcquireRequest::new("env-local", "acme"))
        .await
        .unwrap();
    sh(
        &source,
        "head -c 1048576 /dev/zero > big && echo small > small && mkdir d && echo x > d/x",
    )
    .await;
    let template = runtime.capture_template(&source.id, None).await.unwrap();
    assert_eq!(template.metadata["filesCloned"], 3, "{:?}", template.metadata);
    assert_eq!(template.metadata["filesCopied"], 0, "{:?}", template.metadata);
    let lease = runtime.acquire_lease(from(&template.id)).await.unwrap();
    assert_eq!(sh(&lease, "wc -c < big; cat small d/x").await, b"1048576\nsmall\nx\n");
    for l in [&source, &lease] {
        runtime.release_lease(&l.id, LeaseStatus::Released).await.unwrap();
    }
    assert!(
        runtime
            .delete_template("env-local", "acme", &template.id)
            .await
            .unwrap()
    );
    std::fs::remove_dir(&root).expect("nothing is left under the root");
}
