//! Termination receipts (contract section 3, plugin protocol "Release and destroy"): the
//! receipt a worker answers release or destroy with is recorded on the lease as
//! `metadata.terminationReceipt`; a receipt for another provider lease (the worker is
//! untrusted) or none at all (Paperclip's "void") records nothing, and the release still
//! succeeds.

mod host_common;

use envrt_driver_plugin_sandbox::SandboxOptions;
use envrt_runtime_core::{LeaseStatus, TERMINATION_RECEIPT_KEY};
use host_common::*;
use serde_json::json;

async fn released_with(mode: &str) -> envrt_runtime_core::Lease {
    let driver = start(script_manifest(mode, &[]), SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    assert!(!lease.metadata.contains_key(TERMINATION_RECEIPT_KEY));
    let released = runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(released.status, LeaseStatus::Released);
    // what the store holds, not only what the call returned
    let stored = runtime.lease(&lease.id).await.unwrap().unwrap();
    assert_eq!(
        stored.metadata.get(TERMINATION_RECEIPT_KEY),
        released.metadata.get(TERMINATION_RECEIPT_KEY)
    );
    driver.shutdown().await;
    released
}

#[tokio::test]
async fn the_worker_s_receipt_is_recorded_on_the_released_lease() {
    let released = released_with("").await;
    assert_eq!(
        released.metadata[TERMINATION_RECEIPT_KEY],
        json!({"providerLeaseId": "lease-1", "state": "stopped"})
    );
}

#[tokio::test]
async fn a_receipt_for_another_lease_or_none_records_nothing() {
    for mode in ["foreign-receipt", "no-receipt"] {
        let released = released_with(mode).await;
        assert!(
            !released.metadata.contains_key(TERMINATION_RECEIPT_KEY),
            "{mode}: {:?}",
            released.metadata
        );
    }
}
