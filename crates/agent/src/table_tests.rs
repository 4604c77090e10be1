//! The process table's own tests: identity checks before a signal, and the replay
//! reservation of ended processes.

use super::*;

/// The agent reaps any child of its process (`waitpid(-1)`), as it should when it is the
/// only supervisor there. Tests in one binary each make an agent of their own, so the
/// ones that spawn take turns: otherwise one agent reaps another's child and counts it as
/// an orphan, and the other waits for an exit it never sees.
static SPAWNING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits (bounded) until process `id` has exited and its output is drained.
async fn ended(agent: &Arc<Agent>, id: u64) {
    for _ in 0..1000 {
        agent.reap();
        if agent.finished(id).unwrap().is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("process {id} never ended");
}

#[tokio::test]
async fn an_ended_process_reserves_only_the_bytes_it_holds() {
    let _turn = SPAWNING.lock().await;
    let config = Config {
        buffer_bound: 4096,
        ..Config::default()
    };
    let agent = Arc::new(Agent::new(config));
    let request = |argv: &[&str]| SpawnRequest {
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        keep: Some(1024),
        ..SpawnRequest::default()
    };
    // Twenty processes of 2 × 1024 reserved bytes each, one after the other, under a
    // bound of 4096: each gives back what it did not fill once it ended.
    for _ in 0..20 {
        let info = agent.spawn(request(&["sh", "-c", "printf 0123456789"])).unwrap();
        ended(&agent, info.id).await;
    }
    assert_eq!(agent.lock().reserved, 20 * 10);
    // Running processes still reserve their whole keep.
    let first = agent.spawn(request(&["sleep", "100"])).unwrap();
    assert_eq!(
        agent.spawn(request(&["sleep", "100"])).unwrap_err(),
        refuse::buffer_bound(2048, 2048 + 200, 4096)
    );
    agent.signal(first.id, rustix::process::Signal::KILL).unwrap();
    ended(&agent, first.id).await;
    assert_eq!(agent.lock().reserved, 200);
}

#[tokio::test]
async fn a_pid_whose_start_time_changed_is_never_signalled() {
    let _turn = SPAWNING.lock().await;
    let agent = Agent::new(Config::default());
    let request = SpawnRequest {
        argv: vec!["sleep".into(), "100".into()],
        ..SpawnRequest::default()
    };
    let info = agent.spawn(request).unwrap();
    // As if the pid had been reused by another process started later.
    agent.lock().procs.get_mut(&info.id).unwrap().start_time += 1;
    assert_eq!(
        agent.signal(info.id, rustix::process::Signal::KILL).unwrap_err(),
        format!(
            "process {} (pid {}) is gone: its pid now names another process",
            info.id, info.pid
        )
    );
    assert!(spawn::start_time(info.pid).is_some(), "the process was not signalled");
    agent.lock().procs.get_mut(&info.id).unwrap().start_time -= 1;
    agent.signal(info.id, rustix::process::Signal::KILL).unwrap();
}

#[tokio::test]
async fn an_agent_gives_at_most_its_span_of_ids_ended_processes_included() {
    let _turn = SPAWNING.lock().await;
    let agent = Agent::new(Config {
        first_id: 4097,
        id_span: 2,
        ..Config::default()
    });
    let request = SpawnRequest {
        argv: vec!["true".into()],
        ..SpawnRequest::default()
    };
    let first = agent.spawn(request.clone()).unwrap();
    let second = agent.spawn(request.clone()).unwrap();
    assert_eq!((first.id, second.id), (4097, 4098));
    ended(&agent, second.id).await;
    assert_eq!(
        agent.spawn(request).unwrap_err(),
        "the agent has given all 2 process ids of its generation; the lease's next supervisor numbers past them"
    );
}
