//! `execute` against a real engine (contract section 5) through the lease's supervisor:
//! every case of `execute.rs` again, with the static supervisor mounted, so that each
//! execute runs as one request on the supervisor's socket; and what only this path has.

mod common;

use std::sync::{Arc, Mutex};

use cases::unique;
use envrt_runtime_core::{ExecuteRequest, OutputStream};

macro_rules! execute_harness {
    () => {
        match common::harness_with(|config| config.agent = Some(envrt_test_support::docker::static_agent())).await {
            Some(h) => h,
            None => return,
        }
    };
}

#[path = "cases/execute.rs"]
mod cases;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execute_runs_through_the_supervisor_and_one_as_another_user_through_the_engine() {
    let h = execute_harness!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let r = h.sh(&lease, "echo $$; exit 4").await;
        assert_eq!(r.exit_code, Some(4));
        assert_eq!(r.metadata["supervisor"], true, "{:?}", r.metadata);
        // The supervisor is the command's parent.
        let r = h.sh(&lease, "cat /proc/$PPID/cmdline | tr '\\0' ' '").await;
        assert!(
            String::from_utf8_lossy(&r.stdout).starts_with("/.envrt/agent --socket /.envrt/run/sock"),
            "{r:?}"
        );
        let mut request = ExecuteRequest::new("id", ["-u"]);
        request.user = Some("0".into());
        match h.runtime.execute(&lease.id, request).await {
            Ok(r) => assert!(r.metadata.get("supervisor").is_none(), "{:?}", r.metadata),
            // The test environment may not allow another user: then nothing ran at all.
            Err(error) => assert!(error.to_string().contains("user"), "{error}"),
        }
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_kills_its_supervisor_fails_its_call_and_the_next_execute_starts_another() {
    let h = execute_harness!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let n = unique();
        let script = format!("setsid sleep {n} & sleep 0.1; kill -9 $PPID; sleep {n}1");
        let error = h
            .runtime
            .execute(&lease.id, ExecuteRequest::new("sh", ["-c", &script]))
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains(&format!(
                "the process supervisor of lease {} broke off an execute: ",
                lease.id
            )),
            "{text}"
        );
        // Its tree (the escapee holding its output included) is gone.
        assert_eq!(
            h.processes_matching(&lease, &format!("sleep {n}")).await,
            Vec::<String>::new()
        );
        let r = h.sh(&lease, "echo again").await;
        assert_eq!((r.exit_code, r.stdout.as_slice()), (Some(0), &b"again\n"[..]));
        assert_eq!(r.metadata["supervisor"], true);
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_execute_through_the_supervisor_kills_its_tree_escapees_included() {
    let h = execute_harness!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let n = unique();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let started_tx = Mutex::new(Some(started_tx));
        let mut request = ExecuteRequest::new(
            "sh",
            ["-c", &format!("setsid sleep {n} & sleep {n}1 & echo started; wait")],
        );
        request.sink = Some(Arc::new(move |_: OutputStream, _: &[u8]| {
            if let Some(tx) = started_tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
        }));
        let mut call = Box::pin(h.runtime.execute(&lease.id, request));
        tokio::select! {
            ended = &mut call => panic!("the execute ended before it was dropped: {ended:?}"),
            started = started_rx => started.unwrap(),
        }
        // The two sleeps, and the shell whose command line names them.
        assert_eq!(h.processes_matching(&lease, &format!("sleep {n}")).await.len(), 3);
        drop(call);
        assert_eq!(
            h.processes_matching(&lease, &format!("sleep {n}")).await,
            Vec::<String>::new()
        );
    })
    .await;
    h.finish().await;
}
