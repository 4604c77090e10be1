//! Many OS processes open one brand-new store at the same instant: every one of them
//! succeeds (creating the file, switching it to WAL and creating the schema is raced by
//! all of them) and every one's write is there afterwards.
//!
//! The test binary is its own opener: run with `ENVRT_OPEN_RACE=<db>,<n>` it waits for
//! end-of-file on stdin (the barrier: the parent closes the one pipe every opener shares,
//! so all of them go at once), opens the store through two connections, writes lease
//! `p<n>` and reads the list back. Without it, it runs `ENVRT_OPEN_RACE_ROUNDS` rounds
//! (default 10) of `OPENERS` openers, each round on a fresh database.

use std::io::{Read, Write};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use envrt_runtime_core::{Lease, LeaseFilter, LeasePolicy, LeaseStatus, LeaseStore, Timestamp};
use envrt_store_sqlite::SqliteStore;

const NAME: &str = "a_fresh_store_opened_by_16_processes_at_once_loses_nothing";
const OPENERS: usize = 16;

fn lease(n: usize) -> Lease {
    Lease {
        id: format!("p{n}"),
        company_id: "acme".into(),
        environment_id: Some("env".into()),
        execution_workspace_id: None,
        issue_id: None,
        run_id: Some("race".into()),
        status: LeaseStatus::Active,
        lease_policy: LeasePolicy::Ephemeral,
        provider: Some("local".into()),
        provider_lease_id: None,
        acquired_at: Timestamp(n as u64),
        last_used_at: Timestamp(0),
        expires_at: None,
        released_at: None,
        failure_reason: None,
        cleanup_status: None,
        metadata: serde_json::Map::new(),
    }
}

/// One opener: ready, wait for the barrier, open twice at once, write, read.
fn opener(spec: &str) -> ExitCode {
    let Some((db, n)) = spec.split_once(',') else {
        eprintln!("bad ENVRT_OPEN_RACE {spec:?}");
        return ExitCode::FAILURE;
    };
    let n: usize = n.parse().expect("opener number");
    // Tell the parent this process is up, then block until every opener may go.
    print!("r");
    std::io::stdout().flush().unwrap();
    let mut rest = Vec::new();
    std::io::stdin().read_to_end(&mut rest).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let outcome = rt.block_on(async {
        let (a, b) = tokio::join!(SqliteStore::open(db), SqliteStore::open(db));
        let (a, b) = (a?, b?);
        a.put_lease(&lease(n)).await?;
        let seen = b.list_leases(&LeaseFilter::default()).await?;
        if !seen.iter().any(|l| l.id == format!("p{n}")) {
            return Err(envrt_runtime_core::StoreError::new("own write not visible"));
        }
        Ok::<_, envrt_runtime_core::StoreError>(())
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("opener {n}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Waits (bounded) for `child`, returning its stderr when it failed.
fn wait(child: Child, deadline: Instant) -> Result<(), String> {
    let mut child = child;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut stderr);
            }
            return if status.success() {
                Ok(())
            } else {
                Err(format!("{status}: {}", stderr.trim()))
            };
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("did not finish in time".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn round(exe: &std::path::Path) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let (barrier, go) = std::io::pipe().unwrap();
    let mut children = Vec::new();
    for n in 0..OPENERS {
        let child = Command::new(exe)
            .env("ENVRT_OPEN_RACE", format!("{},{n}", db.display()))
            .stdin(Stdio::from(barrier.try_clone().unwrap()))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        children.push(child);
    }
    drop(barrier);
    for child in &mut children {
        let mut ready = [0u8; 1];
        child.stdout.as_mut().unwrap().read_exact(&mut ready).unwrap();
    }
    // Every opener is blocked on the pipe: closing its only write end releases them all.
    drop(go);
    let deadline = Instant::now() + Duration::from_secs(120);
    let failures: Vec<String> = children
        .into_iter()
        .enumerate()
        .filter_map(|(n, child)| wait(child, deadline).err().map(|e| format!("opener {n}: {e}")))
        .collect();
    if !failures.is_empty() {
        return Err(failures.join("\n"));
    }
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        let store = SqliteStore::open(&db).await.unwrap();
        let mut ids: Vec<String> = store
            .list_leases(&LeaseFilter::default())
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.id)
            .collect();
        ids.sort();
        let mut expected: Vec<String> = (0..OPENERS).map(|n| format!("p{n}")).collect();
        expected.sort();
        if ids == expected {
            Ok(())
        } else {
            Err(format!("records differ: {ids:?}"))
        }
    })
}

fn main() -> ExitCode {
    if let Ok(spec) = std::env::var("ENVRT_OPEN_RACE") {
        return opener(&spec);
    }
    // libtest-style arguments (filters) are accepted and ignored; --list lists the test.
    if std::env::args().any(|a| a == "--list") {
        println!("{NAME}: test");
        return ExitCode::SUCCESS;
    }
    let rounds: usize = std::env::var("ENVRT_OPEN_RACE_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(10);
    let exe = std::env::current_exe().unwrap();
    println!("\nrunning 1 test");
    for r in 0..rounds {
        if let Err(e) = round(&exe) {
            println!("test {NAME} ... FAILED\n\n---- {NAME} ----\nround {r} of {rounds}:\n{e}\n");
            println!("test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n");
            return ExitCode::FAILURE;
        }
    }
    println!("test {NAME} ... ok ({rounds} rounds x {OPENERS} processes)");
    println!("\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n");
    ExitCode::SUCCESS
}
