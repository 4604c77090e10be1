//! The conformance suite against the SSH driver (`cargo xtask conformance --driver ssh`),
//! on the test `sshd` of `scripts/start-sshd.sh` (settings read from its env file,
//! `ENVRT_TEST_SSH_ENV`, default `/var/lib/envrt-test-ssh/env`). Leases live under a
//! remote root unique to this run, which must hold no lease directory and no process
//! afterwards. Without the server the suite is skipped loudly, unless
//! `ENVRT_REQUIRE_SSH=1` (as in CI), which makes it fail.

use std::collections::HashMap;
use std::sync::Arc;

use envrt_conformance::{LeftoversFuture, ResourceFuture, Suite, Target, report_not_started};
use envrt_driver_ssh::{SshConfig, SshDriver};
use envrt_test_support::Component;
use serde_json::json;

fn settings() -> Result<HashMap<String, String>, String> {
    envrt_test_support::ssh::settings().map_err(|e| format!("no test sshd ({e}); run scripts/start-sshd.sh"))
}

/// The remote user's home, from the password database (the server is this machine).
fn home_of(user: &str) -> Option<String> {
    std::fs::read_to_string("/etc/passwd").ok()?.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&user))
            .then(|| f.get(5).map(|h| h.to_string()))
            .flatten()
    })
}

/// Processes whose working directory lies in `dir`.
fn processes_in(dir: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) {
            if cwd.starts_with(dir) {
                found.push(format!("process {pid} in {}", cwd.display()));
            }
        }
    }
    found
}

fn main() {
    let required = Component::Ssh.required();
    let run = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let root = format!(".envrt-conformance/{run}");
    let mut local_root = None;
    let built = settings().and_then(|s| {
        let user = s.get("ENVRT_TEST_SSH_USER").cloned().unwrap_or_default();
        let home = home_of(&user).ok_or_else(|| format!("the test user {user:?} has no home here"))?;
        let remote_root = format!("{home}/{root}");
        local_root = Some(remote_root.clone());
        let config = json!({
            "host": s.get("ENVRT_TEST_SSH_HOST"),
            "port": s.get("ENVRT_TEST_SSH_PORT").and_then(|p| p.parse::<u16>().ok()),
            "user": user,
            "key": s.get("ENVRT_TEST_SSH_KEY"),
            "knownHosts": s.get("ENVRT_TEST_SSH_KNOWN_HOSTS"),
        })
        .as_object()
        .cloned()
        .unwrap_or_default();
        let root = root.clone();
        Suite::build(|| async move {
            let driver = SshDriver::new(SshConfig {
                root,
                max_channels: 32,
                ..SshConfig::default()
            })
            .map_err(|e| e.to_string())?;
            let target = driver.target_of(&config).map_err(|e| e.to_string())?;
            driver.check(&target).await.map_err(|e| e.to_string())?;
            let probe_root = remote_root.clone();
            let leftovers = Arc::new(move || -> LeftoversFuture {
                let root = probe_root.clone();
                Box::pin(async move {
                    let mut left: Vec<String> = match std::fs::read_dir(&root) {
                        Ok(entries) => entries
                            .filter_map(|e| e.ok())
                            .map(|e| format!("lease directory {}", e.path().display()))
                            .collect(),
                        Err(_) => Vec::new(),
                    };
                    left.extend(processes_in(&root));
                    Ok(left)
                })
            });
            // A lease's resource is its remote workspace (this machine is the server).
            let resource = Arc::new(|lease: &envrt_runtime_core::Lease| -> ResourceFuture {
                let dir = lease
                    .metadata
                    .get("workspace")
                    .and_then(|v| v.as_str())
                    .map(String::from);
                Box::pin(async move {
                    let dir = dir.ok_or("the lease has no metadata.workspace")?;
                    Ok(std::path::Path::new(&dir).exists())
                })
            });
            Ok(Target::new(Arc::new(driver))
                .with_config(config)
                .with_cases(8)
                .with_leftovers(leftovers)
                .with_resource_probe(resource)
                .with_deviation(
                    "execute_signal_reported",
                    "OpenSSH's multiplexing protocol relays a command's exit status but not its \
                     exit-signal: a signal the driver did not send itself is reported as neither \
                     an exit code nor a signal (metadata.signal = \"unknown\")",
                ))
        })
    });
    match built {
        Ok(suite) => {
            let passed = suite.run();
            if let Some(dir) = local_root {
                let _ = std::fs::remove_dir(&dir);
            }
            std::process::exit(if passed { 0 } else { 101 });
        }
        Err(error) if !required => {
            eprintln!(
                "\n*** SKIPPED: the SSH conformance suite: {error} (set ENVRT_REQUIRE_SSH=1 to fail instead) ***\n"
            );
            report_not_started("driver_ssh", &error, true);
        }
        Err(error) => {
            eprintln!("ENVRT_REQUIRE_SSH=1 but the SSH driver cannot run: {error}");
            report_not_started("driver_ssh", &error, false);
            std::process::exit(101);
        }
    }
}
