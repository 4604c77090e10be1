//! PID-1 duty outside a container: with `--subreaper` the agent reaps the orphans that land
//! on it and keeps them apart from its own processes' exit statuses; SIGTERM ends the agent
//! and every process group it holds.

mod common;

use std::time::Duration;

use common::{bounded, collect, sh, start};
use envrt_agent::proto::{Offsets, Status, Stream};

fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
}

#[tokio::test]
async fn a_subreaper_reaps_orphans_apart_from_its_own_processes() {
    bounded(30, async {
        let agent = start(&["--subreaper"]).await;
        let client = agent.client().await;
        assert!(client.agent().await.unwrap().reaps_orphans);
        let info = client.spawn(sh("sleep 100 >/dev/null 2>&1 & echo $!")).await.unwrap();
        let (bytes, exit) = collect(&client, info.id, Offsets::default()).await;
        assert_eq!(exit.unwrap().status, Status::Exited { code: 0 });
        let orphan: i32 = String::from_utf8_lossy(&bytes[&Stream::Stdout]).trim().parse().unwrap();
        assert_eq!(
            parent_of(orphan),
            Some(agent.pid()),
            "the orphan was reparented to the agent"
        );
        let orphan_pid = rustix::process::Pid::from_raw(orphan).unwrap();
        rustix::process::kill_process(orphan_pid, rustix::process::Signal::KILL).unwrap();
        // The reaping is inside the agent and reports no event: ask until it shows.
        let reaped = loop {
            let state = client.agent().await.unwrap();
            if state.recent_orphans.contains(&orphan) {
                break state;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(reaped.orphans_reaped, 1);
        assert!(parent_of(orphan).is_none(), "the orphan left no zombie");
        assert_eq!(client.info(info.id).await.unwrap().status, Status::Exited { code: 0 });
        assert_eq!(reaped.processes, 1);
    })
    .await;
}

#[tokio::test]
async fn without_the_flag_the_agent_does_not_claim_orphans() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let state = client.agent().await.unwrap();
        assert!(!state.reaps_orphans);
        assert_eq!(state.pid, agent.pid());
    })
    .await;
}

#[tokio::test]
async fn sigterm_kills_every_process_group_and_ends_the_agent() {
    bounded(30, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let info = client.spawn(sh("sleep 100 & echo $!; sleep 100")).await.unwrap();
        let mut output = client.output(info.id, Offsets::default()).await.unwrap();
        let background: i32 = common::read_until(&mut output, "\n").await.trim().parse().unwrap();
        let pidfds = vec![common::pidfd(info.pid), common::pidfd(background)];
        let status = agent.stop().await;
        assert!(status.success(), "the agent ended with {status}");
        assert!(
            common::all_end(pidfds).await,
            "a process of the agent survived its SIGTERM"
        );
    })
    .await;
}

#[tokio::test]
async fn an_agent_told_so_ends_with_its_processes_once_its_socket_is_gone() {
    bounded(30, async {
        let mut agent = start(&["--subreaper", "--exit-when-socket-gone"]).await;
        let client = agent.client().await;
        let info = client.spawn(sh("echo up; exec sleep 300")).await.unwrap();
        let pid = info.pid;
        // The lease directory goes without a release.
        std::fs::remove_dir_all(agent.socket.parent().unwrap()).unwrap();
        let status = agent.child.wait().await.unwrap();
        assert!(status.success(), "{status:?}");
        // Its process group went with it.
        loop {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if state.is_empty() || state[state.rfind(')').unwrap() + 2..].starts_with('Z') {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn an_agent_not_told_so_keeps_serving_without_its_socket_file() {
    bounded(30, async {
        let agent = start(&["--subreaper"]).await;
        let client = agent.client().await;
        std::fs::remove_file(&agent.socket).unwrap();
        // Past two looks: the agent and its connected client still work.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let info = client.spawn(sh("echo still")).await.unwrap();
        let (bytes, exit) = collect(&client, info.id, Offsets::default()).await;
        assert_eq!(exit.unwrap().status, Status::Exited { code: 0 });
        assert_eq!(bytes[&Stream::Stdout], b"still\n");
    })
    .await;
}
