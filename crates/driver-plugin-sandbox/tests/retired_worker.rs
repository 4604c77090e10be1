//! A worker the host retires for a protocol violation (a data frame under a route id the
//! host never issued), against the scriptable worker: every route and call it had ends at
//! once with the worker-exit error, and its leases can still be ended.

mod host_common;

use std::sync::Arc;
use std::time::Duration;

use envrt_driver_plugin_sandbox::{RestartPolicy, RouteSlots, SandboxError, SandboxOptions};
use envrt_runtime_core::{DriverError, ExecuteRequest, LeaseFilter, LeaseStatus, RuntimeError};
use host_common::*;
use serde_json::json;

const KILLED: &str = "Worker process exited (code=null, signal=SIGKILL)";

fn driver_error(err: &RuntimeError) -> &DriverError {
    match err {
        RuntimeError::Driver(d) => d,
        other => panic!("not a driver error: {other:?}"),
    }
}

#[tokio::test]
async fn a_forged_route_ends_the_pending_read_and_call_with_the_exit_and_leaves_leases_cleanable() {
    let options = SandboxOptions {
        route_slots: RouteSlots::new(4),
        // a backoff long enough that the release below meets it
        restart: RestartPolicy {
            base: Duration::from_secs(4),
            ..RestartPolicy::default()
        },
        ..SandboxOptions::default()
    };
    let driver = start(script_manifest("", &[]), options).await;
    let runtime = Arc::new(runtime_with(driver.clone()).await);
    let duplex_lease = acquire(&runtime).await;
    let call_lease = acquire(&runtime).await;
    let channel = bounded(
        "open",
        runtime.open_duplex_channel(&duplex_lease.id, &["cat".to_owned()]),
    )
    .await
    .unwrap();
    let channel: Arc<dyn envrt_runtime_core::DuplexChannel> = Arc::from(channel);
    let pid = driver.worker_pid().unwrap();

    // a read waiting for output and an execute the worker never answers
    let read = {
        let channel = channel.clone();
        tokio::spawn(async move { channel.read().await })
    };
    let call = {
        let runtime = runtime.clone();
        let id = call_lease.id.clone();
        tokio::spawn(async move { runtime.execute(&id, ExecuteRequest::new("hang", [""; 0])).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!read.is_finished() && !call.is_finished());

    // the worker sends a data frame under a route id the host never issued
    let forged = json!({"jsonrpc": "2.0", "method": "duplexChannel.data",
        "params": {"hostRouteId": "duplex-route-999999999", "workerSessionId": "s-1", "chunk": "aGk="}});
    let _ = bounded("emit", driver.call("test.emit", json!({ "line": forged }))).await;
    assert!(
        wait_gone(pid, Duration::from_secs(10)).await,
        "the worker was not retired"
    );

    // both end at once with the worker-exit error (bounded far below every timeout)
    let read = tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("the pending read hung after the worker was retired")
        .unwrap();
    let err = read.expect_err("the read must fail with the worker's exit, not end quietly");
    assert_eq!(err.to_string(), KILLED);
    assert!(
        matches!(SandboxError::of(&err), Some(SandboxError::WorkerExited { .. })),
        "{err:?}"
    );
    let err = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the pending call hung after the worker was retired")
        .unwrap()
        .unwrap_err();
    assert_eq!(err.to_string(), KILLED);
    assert!(matches!(
        SandboxError::of(driver_error(&err)),
        Some(SandboxError::WorkerExited { .. })
    ));
    // later reads, writes and waits on the dead route answer at once too
    let err = bounded("read again", channel.read()).await.unwrap_err();
    assert_eq!(err.to_string(), KILLED);
    let err = bounded("write", channel.write(b"x")).await.unwrap_err();
    assert_eq!(err.to_string(), KILLED);
    bounded("close", channel.close()).await.unwrap();

    // the leases can be ended: a release while the worker waits out its restart backoff
    // is refused at once (retryable) and recorded as pending_cleanup...
    let err = bounded(
        "release during the backoff",
        runtime.release_lease(&duplex_lease.id, LeaseStatus::Released),
    )
    .await
    .unwrap_err();
    assert_eq!(driver_error(&err).kind(), "unavailable", "{err}");
    assert!(
        matches!(
            SandboxError::of(driver_error(&err)),
            Some(SandboxError::WorkerRestarting { .. })
        ),
        "{err:?}"
    );
    let recorded = runtime.lease(&duplex_lease.id).await.unwrap().unwrap();
    assert_eq!(recorded.status, LeaseStatus::PendingCleanup);
    // ...and both leases end once a worker serves again
    restarted(&driver, pid).await;
    bounded(
        "release",
        runtime.release_lease(&duplex_lease.id, LeaseStatus::Released),
    )
    .await
    .unwrap();
    bounded("release", runtime.release_lease(&call_lease.id, LeaseStatus::Failed))
        .await
        .unwrap();
    let left: Vec<_> = runtime
        .leases(&LeaseFilter::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|l| matches!(l.status, LeaseStatus::Active | LeaseStatus::PendingCleanup))
        .collect();
    assert!(left.is_empty(), "leases left: {left:?}");
    assert_eq!(bounded("health", driver.health()).await.unwrap()["status"], "ok");
}
