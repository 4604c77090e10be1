//! Warm pools declared in envrt.toml (`[environment.pool] size = N`), started by a host
//! program through `envrt::config` (the CLI itself has no long-lived command): ready
//! leases are handed out once each and clean, the pool refills, stopping releases the
//! ready ones, and `envrt gc` releases the pool leases of a host that was SIGKILLed.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use common::Site;
use envrt::config::{Assembly, Paths};
use envrt::{AcquireRequest, ExecuteRequest, LeaseFilter, LeasePolicy, LeaseStatus, core::POOLED_KEY};

const CONFIG: &str = "[[environment]]\nid = \"warm\"\ndriver = \"local\"\n[environment.pool]\nsize = 2\n";

fn paths(site: &Path) -> Paths {
    std::fs::write(site.join("envrt.toml"), CONFIG).unwrap();
    Paths::resolve(Some(&site.join("envrt.toml")), Some(&site.join("state"))).unwrap()
}

/// Waits (bounded, 60 s) until the pool has `n` ready leases.
async fn ready(assembly: &Assembly, n: usize) {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let status = assembly
            .runtime
            .pool_status("warm", "local", LeasePolicy::Ephemeral)
            .unwrap();
        if status.ready == n {
            return;
        }
        assert!(
            Instant::now() < until,
            "the pool never had {n} ready leases: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn pooled_ids(assembly: &Assembly) -> BTreeSet<String> {
    let filter = LeaseFilter {
        statuses: vec![LeaseStatus::Active],
        ..Default::default()
    };
    assembly
        .runtime
        .leases(&filter)
        .await
        .unwrap()
        .into_iter()
        .filter(|l| l.metadata.contains_key(POOLED_KEY))
        .map(|l| l.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_starts_the_configured_pool_and_hands_out_distinct_clean_leases() {
    let site = tempfile::tempdir().unwrap();
    let paths = paths(site.path());
    let assembly = Assembly::open(&paths, None).await.unwrap();
    let specs = assembly.start_pools().unwrap();
    assert_eq!(specs.len(), 1);
    assert_eq!((specs[0].environment_id.as_str(), specs[0].size), ("warm", 2));
    assert_eq!(specs[0].company_id, "local");
    ready(&assembly, 2).await;
    let pooled = pooled_ids(&assembly).await;
    assert_eq!(pooled.len(), 2);

    // Two acquires at once get the two ready leases, one each.
    let request = || AcquireRequest::new("warm", "local");
    let (a, b) = tokio::join!(
        assembly.runtime.acquire_lease(request()),
        assembly.runtime.acquire_lease(request())
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a.id, b.id);
    assert_eq!(BTreeSet::from([a.id.clone(), b.id.clone()]), pooled);
    for lease in [&a, &b] {
        assert!(!lease.metadata.contains_key(POOLED_KEY), "handed out: no longer pooled");
        assert_eq!(lease.metadata["holderPid"], std::process::id(), "held by this host");
        let out = assembly
            .runtime
            .execute(&lease.id, ExecuteRequest::new("ls", ["-A"]))
            .await
            .unwrap();
        assert_eq!(
            (out.exit_code, out.stdout.as_slice()),
            (Some(0), &b""[..]),
            "a clean workspace"
        );
    }
    // The pool refills behind them with fresh leases.
    ready(&assembly, 2).await;
    let refilled = pooled_ids(&assembly).await;
    assert!(refilled.is_disjoint(&pooled), "{refilled:?} {pooled:?}");
    for lease in [&a, &b] {
        assembly
            .runtime
            .release_lease(&lease.id, LeaseStatus::Released)
            .await
            .unwrap();
    }

    let stopped = assembly.runtime.stop_pools().await;
    assert_eq!(stopped.released.len(), 2, "{stopped:?}");
    assert!(pooled_ids(&assembly).await.is_empty());
    let workspaces = paths.state_dir.join("workspaces");
    assert_eq!(
        std::fs::read_dir(workspaces).unwrap().count(),
        0,
        "every workspace is gone"
    );
}

#[test]
fn a_pool_that_cannot_be_parsed_is_refused_with_its_file_and_text() {
    let site = tempfile::tempdir().unwrap();
    let file = site.path().join("envrt.toml");
    std::fs::write(
        &file,
        "[[environment]]\nid = \"warm\"\ndriver = \"local\"\n[environment.pool]\nsize = 0\n",
    )
    .unwrap();
    let paths = Paths::resolve(Some(&file), Some(&site.path().join("state"))).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let error = runtime.block_on(Assembly::open(&paths, None)).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "envrt: config \"{}\": environment \"warm\": pool size expects a whole number from 1 to 64, got 0",
            file.display()
        )
    );
    // The CLI says the same, as a usage error.
    let s = Site::new();
    std::fs::write(
        s.path().join("envrt.toml"),
        "[[environment]]\nid = \"w\"\ndriver = \"local\"\n[environment.pool]\nsize = 65\n",
    )
    .unwrap();
    let out = s.run(&["lease", "list"]);
    assert_eq!(out.code, Some(2));
    assert_eq!(
        out.stderr,
        "envrt: config \"envrt.toml\": environment \"w\": pool size expects a whole number from 1 to 64, got 65\n"
    );
}

/// The environment variable that makes the test below run as the host.
const HOST: &str = "ENVRT_TEST_POOL_HOST";

#[test]
fn gc_releases_the_pool_leases_of_a_host_that_was_sigkilled() {
    if let Some(dir) = std::env::var_os(HOST) {
        return host(Path::new(&dir));
    }
    let s = Site::new();
    std::fs::create_dir_all(s.state()).unwrap();
    let marker = s.path().join("ready");
    let mut host = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "gc_releases_the_pool_leases_of_a_host_that_was_sigkilled",
            "--nocapture",
        ])
        .env(HOST, s.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while !marker.exists() {
        if Instant::now() > until || host.try_wait().unwrap().is_some() {
            let _ = host.kill();
            let _ = host.wait();
            panic!("the host never got its pool ready");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = host.id();
    host.kill().unwrap();
    host.wait().unwrap();

    let leases = s.leases_json();
    assert_eq!(leases.len(), 2, "{leases:?}");
    let workspaces: Vec<_> = leases
        .iter()
        .map(|l| std::path::PathBuf::from(l["metadata"]["workspace"].as_str().unwrap()))
        .collect();
    assert!(workspaces.iter().all(|w| w.is_dir()));
    let gc = s.run(&["gc"]);
    assert_eq!(gc.code, Some(0), "{}", gc.stderr);
    let text = gc.stdout_text();
    for lease in &leases {
        let line = format!(
            "released lease {} (its holder, pid {pid}, is gone)",
            lease["id"].as_str().unwrap()
        );
        assert!(text.contains(&line), "{text}");
    }
    assert!(text.ends_with("gc: 2 released, 0 failed\n"), "{text}");
    assert!(workspaces.iter().all(|w| !w.exists()), "the pool's workspaces are gone");
}

/// The host: opens the runtime from the site's envrt.toml, starts its pool, says when it
/// is full, and waits to be killed (at most two minutes).
fn host(site: &Path) {
    let paths = paths(site);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let assembly = Assembly::open(&paths, None).await.unwrap();
        assembly.start_pools().unwrap();
        ready(&assembly, 2).await;
        std::fs::write(site.join("ready"), "").unwrap();
        tokio::time::sleep(Duration::from_secs(120)).await;
        assembly.runtime.stop_pools().await;
    });
}
