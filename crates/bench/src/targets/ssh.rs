//! The SSH target, on the test `sshd` (`scripts/start-sshd.sh`; its settings come from
//! `ENVRT_TEST_SSH_ENV`, default `/var/lib/envrt-test-ssh/env`): a lease through the
//! facade, and the `ssh` options and destination its baselines share, over the driver's own
//! open master connection.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use envrt_driver_ssh::{SshConfig, SshDriver, SshTarget};
use envrt_runtime_core::JsonMap;

use crate::facade::Leased;
use crate::measure::q;
use crate::report::Row;

pub(crate) struct Ssh1 {
    pub(crate) driver: Arc<SshDriver>,
    pub(crate) leased: Leased,
    pub(crate) target: SshTarget,
    /// `ssh` options every baseline shares (port, user, key, known hosts, batch mode).
    pub(crate) options: String,
    /// `user@host`.
    pub(crate) destination: String,
}

pub(crate) async fn open() -> Result<Ssh1, String> {
    let path = std::env::var("ENVRT_TEST_SSH_ENV").unwrap_or_else(|_| "/var/lib/envrt-test-ssh/env".into());
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("n/a (no test sshd: {path}: {e}; run scripts/start-sshd.sh)"))?;
    let vars: HashMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |k: &str| vars.get(k).copied().unwrap_or_default().to_owned();
    let mut config = JsonMap::new();
    config.insert("host".into(), get("ENVRT_TEST_SSH_HOST").into());
    config.insert(
        "port".into(),
        get("ENVRT_TEST_SSH_PORT").parse::<u16>().unwrap_or(22).into(),
    );
    config.insert("user".into(), get("ENVRT_TEST_SSH_USER").into());
    config.insert("key".into(), get("ENVRT_TEST_SSH_KEY").into());
    config.insert("knownHosts".into(), get("ENVRT_TEST_SSH_KNOWN_HOSTS").into());
    let driver = Arc::new(
        SshDriver::new(SshConfig {
            root: format!(".envrt-bench/{}", std::process::id()),
            ..SshConfig::default()
        })
        .map_err(|e| e.to_string())?,
    );
    let target = driver.target_of(&config).map_err(|e| e.to_string())?;
    let leased = Leased::open(driver.clone(), config).await?;
    let options = format!(
        "-o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile={} -o IdentitiesOnly=yes -i {} -p {}",
        q(&PathBuf::from(get("ENVRT_TEST_SSH_KNOWN_HOSTS"))),
        q(&PathBuf::from(get("ENVRT_TEST_SSH_KEY"))),
        get("ENVRT_TEST_SSH_PORT"),
    );
    let destination = format!("{}@{}", get("ENVRT_TEST_SSH_USER"), get("ENVRT_TEST_SSH_HOST"));
    Ok(Ssh1 {
        driver,
        leased,
        target,
        options,
        destination,
    })
}

impl Ssh1 {
    pub(crate) async fn close(self) {
        self.leased.close().await;
        self.driver.shutdown().await;
    }

    /// `ssh` over the driver's open master (`-o ControlPath`).
    pub(crate) async fn over_master(&self) -> Result<String, String> {
        let socket = self
            .driver
            .control_socket(&self.target)
            .await
            .ok_or("the driver has no open master")?;
        Ok(format!(
            "ssh {} -o ControlMaster=no -o ControlPath={} {}",
            self.options,
            q(&socket),
            self.destination
        ))
    }
}

pub(crate) fn missing(group: &'static str, names: &[String], e: &str) -> Vec<Row> {
    let why = if e.starts_with("n/a") {
        e.to_owned()
    } else {
        format!("error: {e}")
    };
    let number = if group == "exec-ssh" { 2 } else { 6 };
    names
        .iter()
        .map(|n| Row::missing(group, number, n.clone(), why.clone()))
        .collect()
}
