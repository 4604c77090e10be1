//! Several OS processes write one database at once; afterwards every record is there,
//! intact, with its last written state.
//!
//! The test binary is its own writer: run with `ENVRT_STORE_WRITER=<db>,<writer>,<count>`
//! it writes `count` leases from four store instances concurrently, updating each one
//! twice, and exits; run without it, it starts the writers and checks the result.

use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envrt_runtime_core::{Lease, LeaseFilter, LeasePolicy, LeaseStatus, LeaseStore, Timestamp};
use envrt_store_sqlite::SqliteStore;

const WRITERS: usize = 6;
const LEASES_PER_WRITER: usize = 120;
const STORES_PER_WRITER: usize = 4;

fn lease(writer: usize, n: usize, status: LeaseStatus) -> Lease {
    let id = format!("w{writer}-l{n}");
    let mut metadata = serde_json::Map::new();
    metadata.insert("driver".into(), "local".into());
    metadata.insert("writer".into(), writer.into());
    metadata.insert("n".into(), n.into());
    // A payload large enough that torn writes would show.
    metadata.insert("payload".into(), format!("{id}:").repeat(200).into());
    Lease {
        id,
        company_id: "acme".into(),
        environment_id: Some(format!("env-{}", n % 3)),
        execution_workspace_id: None,
        issue_id: None,
        run_id: Some(format!("run-{writer}")),
        status,
        lease_policy: LeasePolicy::Ephemeral,
        provider: Some("local".into()),
        provider_lease_id: Some(format!("p-{writer}-{n}")),
        acquired_at: Timestamp((writer * 100_000 + n) as u64),
        last_used_at: Timestamp(0),
        expires_at: None,
        released_at: None,
        failure_reason: None,
        cleanup_status: None,
        metadata,
    }
}

fn writer(spec: &str) -> ExitCode {
    let mut parts = spec.split(',');
    let (Some(db), Some(w), Some(count)) = (parts.next(), parts.next(), parts.next()) else {
        eprintln!("bad ENVRT_STORE_WRITER {spec:?}");
        return ExitCode::FAILURE;
    };
    let w: usize = w.parse().unwrap();
    let count: usize = count.parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let mut stores = Vec::new();
        for _ in 0..STORES_PER_WRITER {
            stores.push(Arc::new(SqliteStore::open(db).await.unwrap()));
        }
        let mut tasks = Vec::new();
        for n in 0..count {
            let store = Arc::clone(&stores[n % STORES_PER_WRITER]);
            tasks.push(tokio::spawn(async move {
                store.put_lease(&lease(w, n, LeaseStatus::Active)).await.unwrap();
                let mut ended = lease(w, n, LeaseStatus::Released);
                ended.released_at = Some(Timestamp(n as u64));
                store.put_lease(&ended).await.unwrap();
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    });
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    if let Ok(spec) = std::env::var("ENVRT_STORE_WRITER") {
        return writer(&spec);
    }
    // libtest-style arguments (filters, --list) are accepted and ignored; --list lists one.
    if std::env::args().any(|a| a == "--list") {
        println!("concurrent_processes_lose_and_corrupt_nothing: test");
        return ExitCode::SUCCESS;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leases.db");
    let exe = std::env::current_exe().unwrap();
    let mut children = Vec::new();
    for w in 0..WRITERS {
        children.push(
            Command::new(&exe)
                .env(
                    "ENVRT_STORE_WRITER",
                    format!("{},{w},{LEASES_PER_WRITER}", db.display()),
                )
                .spawn()
                .unwrap(),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    for mut child in children {
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "a writer failed: {status}");
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("a writer did not finish in time");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        let store = SqliteStore::open(&db).await.unwrap();
        let all = store.list_leases(&LeaseFilter::default()).await.unwrap();
        assert_eq!(all.len(), WRITERS * LEASES_PER_WRITER, "records were lost");
        for w in 0..WRITERS {
            for n in 0..LEASES_PER_WRITER {
                let mut expected = lease(w, n, LeaseStatus::Released);
                expected.released_at = Some(Timestamp(n as u64));
                let got = store.get_lease(&expected.id).await.unwrap();
                assert_eq!(got.as_ref(), Some(&expected), "lease {} differs", expected.id);
            }
        }
        let active = LeaseFilter {
            statuses: vec![LeaseStatus::Active],
            ..Default::default()
        };
        assert!(store.list_leases(&active).await.unwrap().is_empty());
        let run0 = LeaseFilter {
            run_id: Some("run-0".into()),
            ..Default::default()
        };
        assert_eq!(store.list_leases(&run0).await.unwrap().len(), LEASES_PER_WRITER);
    });
    // libtest's closing line, so tools that sum test results count this binary too.
    println!(
        "test concurrent_processes_lose_and_corrupt_nothing ... ok ({WRITERS} processes x {LEASES_PER_WRITER} leases)"
    );
    println!("\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n");
    ExitCode::SUCCESS
}
