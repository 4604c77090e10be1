//! The real `sshd` of `scripts/start-sshd.sh`, found through its env file
//! (`ENVRT_TEST_SSH_ENV`, default `/var/lib/envrt-test-ssh/env`). Without it the tests
//! skip loudly, unless `ENVRT_REQUIRE_SSH=1` (as in CI), which makes them fail.

#![allow(dead_code, unreachable_pub)]

pub mod supervisor;

use std::sync::Arc;

use envrt_driver_ssh::{SshConfig, SshDriver, SshTarget};
use envrt_runtime_core::{AcquireRequest, Environment, EnvironmentRuntime, JsonMap, Lease};

/// The test server's settings.
pub struct Server {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub key: String,
    pub known_hosts: String,
}

impl Server {
    pub fn target(&self) -> SshTarget {
        let mut t = SshTarget::new(&self.host);
        t.port = Some(self.port);
        t.user = Some(self.user.clone());
        t.key = Some(self.key.clone().into());
        t.known_hosts = Some(self.known_hosts.clone().into());
        t
    }

    pub fn config(&self) -> JsonMap {
        serde_json::json!({
            "host": self.host, "port": self.port, "user": self.user,
            "key": self.key, "knownHosts": self.known_hosts,
        })
        .as_object()
        .cloned()
        .unwrap()
    }

    /// The remote user's home.
    pub fn home(&self) -> String {
        format!("/home/{}", self.user)
    }
}

/// The server, or `None` (after a loud notice) when there is none and it is not required.
pub fn server() -> Option<Server> {
    let vars = match envrt_test_support::ssh::settings() {
        Ok(vars) => vars,
        Err(error) => {
            envrt_test_support::Component::Ssh.skip_or_fail(
                format_args!("ENVRT_REQUIRE_SSH=1 but no test sshd ({error}); run scripts/start-sshd.sh"),
                format_args!(
                    "\n*** SKIPPED: no test sshd ({error}); run scripts/start-sshd.sh, set ENVRT_REQUIRE_SSH=1 to make this a failure ***\n"
                ),
            );
            return None;
        }
    };
    let get = |k: &str| vars.get(k).map(|v| v.to_string()).unwrap_or_default();
    Some(Server {
        host: get("ENVRT_TEST_SSH_HOST"),
        port: get("ENVRT_TEST_SSH_PORT").parse().expect("a port"),
        user: get("ENVRT_TEST_SSH_USER"),
        key: get("ENVRT_TEST_SSH_KEY"),
        known_hosts: get("ENVRT_TEST_SSH_KNOWN_HOSTS"),
    })
}

/// A remote root unique to this test, so parallel tests never see each other's leases.
pub fn unique_root(tag: &str) -> String {
    format!(".envrt-test/{tag}-{}", uuid_like())
}

pub fn uuid_like() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// A test's remote root (relative to the remote home), removed with everything below it
/// when dropped (this machine is the server).
pub struct Root {
    relative: String,
    home: String,
}

impl std::fmt::Display for Root {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.relative)
    }
}

impl Root {
    /// The root's path on this machine (the test sshd runs here).
    pub fn path(&self) -> String {
        format!("{}/{}", self.home, self.relative)
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(format!("{}/{}", self.home, self.relative));
    }
}

/// The guard of the remote root `relative` (removed with everything below it when dropped).
pub fn root_at(server: &Server, relative: String) -> Root {
    Root {
        relative,
        home: server.home(),
    }
}

/// A driver with its own root, and a runtime with one environment on the server.
pub async fn runtime(
    server: &Server,
    tag: &str,
    tune: impl FnOnce(&mut SshConfig),
) -> (Arc<SshDriver>, EnvironmentRuntime, Root) {
    let root = unique_root(tag);
    let mut config = SshConfig {
        root: root.clone(),
        ..SshConfig::default()
    };
    tune(&mut config);
    let driver = Arc::new(SshDriver::new(config).unwrap());
    let runtime = EnvironmentRuntime::new();
    runtime.register_driver(driver.clone());
    runtime
        .put_environment(Environment::new("env-ssh", "Remote", "ssh").with_config(server.config()))
        .await
        .unwrap();
    let root = Root {
        relative: root,
        home: server.home(),
    };
    (driver, runtime, root)
}

pub async fn acquire(runtime: &EnvironmentRuntime) -> Lease {
    runtime
        .acquire_lease(AcquireRequest::new("env-ssh", "acme"))
        .await
        .unwrap()
}

/// The processes whose command line carries `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmdline).contains(marker) {
                found.push(pid);
            }
        }
    }
    found
}

/// Waits (bounded) until no process carries `marker`; returns the survivors.
pub async fn survivors(marker: &str) -> Vec<u32> {
    let mut left = Vec::new();
    for _ in 0..100 {
        left = processes_with(marker);
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    left
}
