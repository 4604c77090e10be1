//! Rows of the SSH driver, on the test `sshd` (`scripts/start-sshd.sh`; its settings come
//! from `ENVRT_TEST_SSH_ENV`, default `/var/lib/envrt-test-ssh/env`): execute latency (2)
//! against `ssh` over the driver's own open master connection and against a fresh `ssh`
//! connection per command, and sync in of small files (6) against `tar | ssh tar -x` over
//! the same master.

use crate::Config;
use crate::report::Row;

/// Row 2 (SSH): `true` through the facade vs `ssh` over the open master and a fresh `ssh`.
pub(crate) async fn exec_rows(config: &Config) -> Vec<Row> {
    let name = "ssh execute `true` p50".to_string();
    #[cfg(feature = "ssh")]
    return imp::exec_rows(config, name).await;
    #[cfg(not(feature = "ssh"))]
    {
        let _ = config;
        vec![Row::missing("exec-ssh", 2, name, crate::facade::DRIVER_MISSING)]
    }
}

/// Row 6 (SSH): sync in of small files vs `tar | ssh tar -x`.
pub(crate) async fn sync_rows(config: &Config) -> Vec<Row> {
    let name = format!("ssh sync in {} small files", config.small_files());
    #[cfg(feature = "ssh")]
    return imp::sync_rows(config, name).await;
    #[cfg(not(feature = "ssh"))]
    vec![Row::missing("sync-ssh", 6, name, crate::facade::DRIVER_MISSING)]
}

#[cfg(feature = "ssh")]
mod imp {
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::sync::Arc;

    use envrt_driver_ssh::{SshConfig, SshDriver, SshTarget};
    use envrt_runtime_core::{JsonMap, WorkspaceRequest};

    use crate::Config;
    use crate::facade::Leased;
    use crate::local::{Contender, SyncKind, copy_medians};
    use crate::measure::{Scratch, interleave, q, sh};
    use crate::report::{Figure, Row, Target};

    struct Ssh1 {
        driver: Arc<SshDriver>,
        leased: Leased,
        target: SshTarget,
        /// `ssh` options every baseline shares (port, user, key, known hosts, batch mode).
        options: String,
        /// `user@host`.
        destination: String,
    }

    async fn open() -> Result<Ssh1, String> {
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
        async fn close(self) {
            self.leased.close().await;
            self.driver.shutdown().await;
        }

        /// `ssh` over the driver's open master (`-o ControlPath`).
        async fn over_master(&self) -> Result<String, String> {
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

    fn missing(group: &'static str, names: &[String], e: &str) -> Vec<Row> {
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

    pub(super) async fn exec_rows(config: &Config, name: String) -> Vec<Row> {
        let d = match open().await {
            Ok(d) => d,
            Err(e) => return missing("exec-ssh", &[name], &e),
        };
        let rows = async {
            let master = format!("{} true", d.over_master().await?);
            let fresh = format!(
                "ssh {} -o ControlMaster=no -o ControlPath=none {} true",
                d.options, d.destination
            );
            let (l, master, fresh) = (&d.leased, master.as_str(), fresh.as_str());
            let m = interleave(3, 3, config.slow_exec_rounds(), |i| async move {
                match i {
                    0 => l.run(&["true"]).await,
                    1 => sh(master).await,
                    _ => sh(fresh).await,
                }
            })
            .await?;
            Ok::<_, String>(vec![
                Row::new("exec-ssh", 2, name.clone(), Figure::ms(m.p(0, 50.0)))
                    .baseline("ssh over the open master", Figure::ms(m.p(1, 50.0)))
                    .baseline("fresh ssh connection", Figure::ms(m.p(2, 50.0)))
                    .target(Target::All(vec![
                        Target::RatioAtMost(0, 1.0),
                        Target::RatioAtMost(1, 0.2),
                    ]))
                    .note("sshd on 127.0.0.1 (scripts/start-sshd.sh); the master is the driver's own"),
            ])
        }
        .await;
        d.close().await;
        rows.unwrap_or_else(|e| missing("exec-ssh", &[name], &e))
    }

    pub(super) async fn sync_rows(config: &Config, name: String) -> Vec<Row> {
        let d = match open().await {
            Ok(d) => d,
            Err(e) => return missing("sync-ssh", &[name], &e),
        };
        let rows = sync_on(config, &d, &name).await;
        d.close().await;
        rows.unwrap_or_else(|e| missing("sync-ssh", &[name], &e))
    }

    async fn sync_on(config: &Config, d: &Ssh1, name: &str) -> Result<Vec<Row>, String> {
        let workspace = d
            .leased
            .runtime
            .realize_workspace(&d.leased.lease, &WorkspaceRequest::default())
            .await
            .map_err(|e| e.to_string())?
            .cwd;
        let scratch = Scratch::new("4g")?;
        let (small_src, _big) = crate::local::sync_fixtures(&scratch, config.small_files(), 1 << 20)?;
        let ssh = d.over_master().await?;
        let in_env = format!("{workspace}/small");
        let tar_env = format!("{workspace}/tar");
        let clean = format!("{ssh} rm -rf {in_env} {tar_env}");
        let tar_in = format!(
            "tar -C {} -cf - . | {ssh} 'mkdir -p {tar_env} && tar -C {tar_env} -xf -'",
            q(&small_src)
        );
        let src_s = small_src.display().to_string();
        let l = &d.leased;
        let (clean, tar_in, src_s) = (clean.as_str(), tar_in.as_str(), src_s.as_str());
        let contenders: Vec<Contender<'_>> = vec![
            Box::new(|| {
                Box::pin(async move {
                    let took = l.sync_in(SyncKind::Dir.file(src_s, "small")).await?;
                    sh(clean).await?;
                    Ok(took)
                })
            }),
            Box::new(|| {
                Box::pin(async move {
                    let took = crate::measure::time_sh(tar_in).await?;
                    sh(clean).await?;
                    Ok(took)
                })
            }),
        ];
        let reps = config.reps();
        let m = copy_medians(&contenders, &[], reps).await?;
        crate::baseline::remove(&small_src);
        Ok(vec![
            Row::new("sync-ssh", 6, name.to_owned(), Figure::ms(m[0]))
                .baseline("tar | ssh tar -x (open master)", Figure::ms(m[1]))
                .target(Target::RatioAtMost(0, 1.1))
                .note(format!(
                    "host side on a private tmpfs; sshd on 127.0.0.1; median of {reps} runs"
                )),
        ])
    }
}
