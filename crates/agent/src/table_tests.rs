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
    // Running processes still reserve their whole keep; the second one fits only once
    // the ended processes' buffers are freed (oldest ended first), and a third cannot.
    let first = agent.spawn(request(&["sleep", "100"])).unwrap();
    assert_eq!(agent.lock().reserved, 2048 + 200);
    let second = agent.spawn(request(&["sleep", "100"])).unwrap();
    assert_eq!(agent.lock().reserved, 4096);
    assert_eq!(
        agent.spawn(request(&["sleep", "100"])).unwrap_err(),
        refuse::buffer_bound(2048, 4096, 4096)
    );
    // Every ended process kept its status and its offsets; its bytes read as dropped.
    for info in agent.list().iter().filter(|info| info.id < first.id) {
        assert_eq!(info.status, Status::Exited { code: 0 });
        let stdout = &info.streams[0];
        assert_eq!((stdout.written, stdout.dropped), (10, 10), "{info:?}");
    }
    for id in [first.id, second.id] {
        agent.signal(id, rustix::process::Signal::KILL).unwrap();
        ended(&agent, id).await;
    }
    assert_eq!(agent.lock().reserved, 0);
}

#[tokio::test]
async fn the_leases_bound_frees_the_oldest_ended_buffers_first_and_then_refuses() {
    let _turn = SPAWNING.lock().await;
    let agent = Agent::new(Config::default());
    let request = |argv: &[&str]| SpawnRequest {
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        keep: Some(1024),
        replay_bound: Some(5000),
        ..SpawnRequest::default()
    };
    // Two ended processes holding 1024 bytes of stdout each (2000 written).
    let old = agent.spawn(request(&["sh", "-c", "head -c 2000 /dev/zero"])).unwrap();
    ended(&agent, old.id).await;
    let newer = agent.spawn(request(&["sh", "-c", "head -c 2000 /dev/zero"])).unwrap();
    ended(&agent, newer.id).await;
    assert_eq!(agent.lock().reserved, 2048);
    // 2048 + 2048 fits in 5000; 1024 more needs the older buffer (freed), not both.
    let running = agent.spawn(request(&["sleep", "100"])).unwrap();
    let small = SpawnRequest {
        keep: Some(512),
        ..request(&["sleep", "100"])
    };
    let second = agent.spawn(small).unwrap();
    let held = |id| agent.info(id).unwrap().streams[0].clone();
    assert_eq!((held(old.id).written, held(old.id).dropped), (2000, 2000));
    assert_eq!((held(newer.id).written, held(newer.id).dropped), (2000, 976));
    assert_eq!(agent.info(old.id).unwrap().status, Status::Exited { code: 0 });
    assert_eq!(agent.lock().reserved, 1024 + 2048 + 1024);
    // Nothing ended is left to free past the newer one's 1024: refused.
    assert_eq!(
        agent.spawn(request(&["sleep", "100"])).unwrap_err(),
        "the process would reserve 2048 bytes of replay buffers, but 4096 of the agent's bound of 5000 bytes are reserved"
    );
    // A refused spawn frees nothing.
    assert_eq!(held(newer.id).dropped, 976);
    for id in [running.id, second.id] {
        agent.signal(id, rustix::process::Signal::KILL).unwrap();
        ended(&agent, id).await;
    }
}

#[tokio::test]
async fn a_full_table_evicts_the_process_that_ended_first_never_a_running_one() {
    let _turn = SPAWNING.lock().await;
    let agent = Agent::new(Config {
        max_processes: 3,
        ..Config::default()
    });
    let request = |argv: &[&str]| SpawnRequest {
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        ..SpawnRequest::default()
    };
    let running = agent.spawn(request(&["sleep", "100"])).unwrap();
    let first = agent.spawn(request(&["true"])).unwrap();
    ended(&agent, first.id).await;
    let second = agent.spawn(request(&["true"])).unwrap();
    ended(&agent, second.id).await;
    // Full: the one that ended first goes, the running one stays.
    let third = agent.spawn(request(&["true"])).unwrap();
    let held: Vec<u64> = agent.list().iter().map(|info| info.id).collect();
    assert_eq!(held, [running.id, second.id, third.id]);
    let evicted = format!(
        "process {} ended and was evicted: the agent holds at most 3 processes and evicts the oldest ended first",
        first.id
    );
    assert_eq!(agent.info(first.id).unwrap_err(), evicted);
    assert_eq!(
        agent.signal(first.id, rustix::process::Signal::KILL).unwrap_err(),
        evicted
    );
    // An id it never gave is still unknown.
    assert_eq!(agent.info(99).unwrap_err(), "no process 99 in this agent");
    // A long run of short processes never fills the table.
    for _ in 0..20 {
        let info = agent.spawn(request(&["true"])).unwrap();
        ended(&agent, info.id).await;
    }
    assert_eq!(agent.list().len(), 3);
    // All running: the bound refuses.
    let more = [
        agent.spawn(request(&["sleep", "100"])).unwrap(),
        agent.spawn(request(&["sleep", "100"])).unwrap(),
    ];
    assert_eq!(
        agent.spawn(request(&["true"])).unwrap_err(),
        "the agent already holds 3 processes, its bound"
    );
    for info in [running].iter().chain(&more) {
        agent.signal(info.id, rustix::process::Signal::KILL).unwrap();
        ended(&agent, info.id).await;
    }
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
