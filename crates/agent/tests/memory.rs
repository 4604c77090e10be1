//! The agent's memory with 1,000 live processes: a measurement printed for the record
//! (`--nocapture` shows it), held only to a generous sanity bound.

mod common;

use common::{bounded, cmd, start};

fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_thousand_live_processes_cost_the_agent_little_memory_each() {
    bounded(300, async {
        let agent = start(&[]).await;
        let client = agent.client().await;
        let mut request = cmd(&["sleep", "1000"]);
        request.keep = Some(4096);
        // One process first, so the measurement leaves out the first-use allocations.
        client.spawn(request.clone()).await.unwrap();
        let before = rss_kib(agent.pid());
        for _ in 0..1000 {
            client.spawn(request.clone()).await.unwrap();
        }
        let after = rss_kib(agent.pid());
        let listed = client.list().await.unwrap();
        assert_eq!(listed.len(), 1001);
        assert!(listed.iter().all(|p| p.status == envrt_agent::proto::Status::Running));
        let per_process = (after.saturating_sub(before) * 1024) / 1000;
        println!("agent RSS {before} KiB -> {after} KiB with 1,000 more live processes: {per_process} bytes each");
        assert!(
            per_process < 1024 * 1024,
            "{per_process} bytes per process is past any sane bound"
        );
        assert!(agent.stop().await.success());
    })
    .await;
}
