//! What a command moves out of its process group on purpose (a child in a new session
//! through `setsid`, a job of a job-control shell) against the real test `sshd`: a timeout
//! kills it and the execute returns; a command that ends leaves none of it running; the
//! release of the lease kills what escaped the command altogether.

mod common;

use std::time::Duration;

use envrt_runtime_core::{ExecuteRequest, LeaseStatus};

use common::{acquire, processes_with, runtime, server, survivors};

/// How long any one call here may take before the test fails instead of hanging.
const BOUND: Duration = Duration::from_secs(60);

fn looping(marker: &str) -> String {
    format!("sh -c 'while :; do sleep 1; done' {marker}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_kills_a_new_session_and_a_job_control_group_and_returns() {
    let Some(server) = server() else { return };
    let (_driver, rt, _root) = runtime(&server, "escape", |c| c.kill_grace = Duration::from_millis(500)).await;
    let lease = acquire(&rt).await;
    let marker = format!("envrt-ssh-session-{}", common::uuid_like());
    let script = format!(
        "echo partial; setsid {l} & sh -c \"set -m; {l} & wait\" & wait",
        l = looping(&marker)
    );
    let mut request = ExecuteRequest::new("sh", ["-c".to_string(), script]);
    request.timeout = Some(Duration::from_millis(1500));
    let r = tokio::time::timeout(BOUND, rt.execute(&lease.id, request))
        .await
        .expect("the execute returns after its timeout although a child left its group")
        .unwrap();
    assert!(r.timed_out);
    assert_eq!(r.exit_code, None);
    assert_eq!(r.stdout, b"partial\n");
    assert_eq!(survivors(&marker).await, Vec::<u32>::new());
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_ends_leaves_no_new_session_holding_its_output() {
    let Some(server) = server() else { return };
    let (_driver, rt, _root) = runtime(&server, "escape-end", |_| {}).await;
    let lease = acquire(&rt).await;
    let marker = format!("envrt-ssh-ended-{}", common::uuid_like());
    let script = format!("setsid {l} & echo started", l = looping(&marker));
    let r = tokio::time::timeout(
        BOUND,
        rt.execute(&lease.id, ExecuteRequest::new("sh", ["-c".to_string(), script])),
    )
    .await
    .expect("the execute returns when the command ends although a new session holds stdout")
    .unwrap();
    assert_eq!((r.exit_code, r.stdout.as_slice()), (Some(0), &b"started\n"[..]));
    assert_eq!(survivors(&marker).await, Vec::<u32>::new());
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_kills_what_escaped_its_command_and_the_workspace() {
    let Some(server) = server() else { return };
    let (_driver, rt, _root) = runtime(&server, "escape-release", |_| {}).await;
    let lease = acquire(&rt).await;
    let marker = format!("envrt-ssh-escaped-{}", common::uuid_like());
    // A double fork into a new session, out of the workspace, with no descriptor of the
    // command's: nothing of the command's run leads to it, only its HOME (the workspace).
    // The command ends only once the escapee is in its new session (it leaves a file then):
    // until `setsid` has run it is still of the command's session, which the command's end
    // rightly kills.
    let script = format!(
        "(cd / && setsid sh -c ': > \"$HOME/escaped\"; while :; do sleep 1; done' {marker} \
         </dev/null >/dev/null 2>&1 &) ; \
         while [ ! -e \"$HOME/escaped\" ]; do sleep 0.05; done; echo started"
    );
    let r = tokio::time::timeout(
        BOUND,
        rt.execute(&lease.id, ExecuteRequest::new("sh", ["-c".to_string(), script])),
    )
    .await
    .expect("the execute returns")
    .unwrap();
    assert_eq!((r.exit_code, r.stdout.as_slice()), (Some(0), &b"started\n"[..]));
    let mut running = Vec::new();
    for _ in 0..100 {
        running = processes_with(&marker);
        if !running.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!running.is_empty(), "the escapee never started");
    tokio::time::timeout(BOUND, rt.release_lease(&lease.id, LeaseStatus::Released))
        .await
        .expect("the release returns")
        .unwrap();
    assert_eq!(survivors(&marker).await, Vec::<u32>::new());
}
