//! Rows of the Docker driver: execute latency (2), duplex throughput (5), sync (6).
//!
//! Every row runs on one container (the lease's), against the `docker` CLI and against
//! bare Engine API calls through bollard on the same container.

use crate::Config;
use crate::report::Row;

/// The image the Docker rows run in (`cargo xtask docker-image` builds it).
#[cfg(feature = "docker")]
pub(crate) const IMAGE: &str = "envrt-test:latest";

/// Row 2: `true` through the facade and the Docker driver vs `docker exec` and the bare
/// Engine API.
pub(crate) async fn exec_rows(config: &Config) -> Vec<Row> {
    let name = "docker execute `true`";
    #[cfg(feature = "docker")]
    return imp::exec_rows(config, name).await;
    #[cfg(not(feature = "docker"))]
    {
        let _ = config;
        vec![Row::missing(
            "exec-docker",
            2,
            format!("{name} p50"),
            crate::facade::DRIVER_MISSING,
        )]
    }
}

/// Row 5 (Docker): duplex read and write vs a bare pipe.
pub(crate) async fn duplex_rows(config: &Config) -> Vec<Row> {
    let names = crate::sandbox::duplex_names("docker", config.docker_stream_bytes());
    #[cfg(feature = "docker")]
    return imp::duplex_rows(config, names).await;
    #[cfg(not(feature = "docker"))]
    names
        .into_iter()
        .map(|n| Row::missing("duplex", 5, n, crate::facade::DRIVER_MISSING))
        .collect()
}

/// Row 6 (Docker): small files and one big file, in and out, vs `docker cp` and the bare
/// archive stream.
pub(crate) async fn sync_rows(config: &Config) -> Vec<Row> {
    let names = sync_names(config);
    #[cfg(feature = "docker")]
    return imp::sync_rows(config, names).await;
    #[cfg(not(feature = "docker"))]
    names
        .into_iter()
        .map(|n| Row::missing("sync-docker", 6, n, crate::facade::DRIVER_MISSING))
        .collect()
}

/// The rows with the workspace in the container's own file system, then the same rows
/// with it on a bind-mounted host directory (`WorkspaceMount::Bind`).
fn sync_names(config: &Config) -> Vec<String> {
    let files = config.small_files();
    let big = config.stream_bytes() >> 20;
    ["", " (bound workspace)"]
        .into_iter()
        .flat_map(|bound| {
            [
                format!("docker sync in {files} small files{bound}"),
                format!("docker sync out {files} small files{bound}"),
                format!("docker sync in one {big} MiB file{bound}"),
                format!("docker sync out one {big} MiB file{bound}"),
            ]
        })
        .collect()
}

#[cfg(feature = "docker")]
pub(crate) mod imp {
    use std::sync::Arc;
    use std::time::Duration;

    use bollard::Docker;
    use bollard::exec::{StartExecOptions, StartExecResults};
    use bollard::models::ExecConfig;
    use envrt_driver_docker::{DockerConfig, DockerDriver, WorkspaceMount};
    use envrt_runtime_core::{JsonMap, WorkspaceRequest};
    use futures::StreamExt;

    use super::IMAGE;
    use crate::Config;
    use crate::baseline::remove;
    use crate::facade::Leased;
    use crate::local::{Contender, SyncKind, copy_medians};
    use crate::measure::{Scratch, interleave, q, sh, time_sh};
    use crate::report::{Figure, Row, Target};

    /// The Docker lease, its container, the bare client, and the workspace path.
    struct Docker1 {
        leased: Leased,
        container: String,
        bare: Docker,
    }

    async fn open() -> Result<Docker1, String> {
        open_with(WorkspaceMount::Container).await
    }

    async fn open_with(workspace_mount: WorkspaceMount) -> Result<Docker1, String> {
        let driver = DockerDriver::connect(DockerConfig {
            workspace_mount,
            ..DockerConfig::default()
        })
        .await
        .map_err(|e| format!("n/a (no engine): {e}"))?;
        let mut config = JsonMap::new();
        config.insert("image".into(), IMAGE.into());
        let leased = Leased::open(Arc::new(driver), config).await?;
        let container = match leased.provider_lease_id.clone() {
            Some(id) => id,
            None => {
                leased.close().await;
                return Err("the Docker lease has no container id".into());
            }
        };
        let bare = match connect_bare() {
            Ok(b) => b,
            Err(e) => {
                leased.close().await;
                return Err(e);
            }
        };
        Ok(Docker1 {
            leased,
            container,
            bare,
        })
    }

    pub(crate) fn connect_bare() -> Result<Docker, String> {
        let host = std::env::var("DOCKER_HOST").unwrap_or_default();
        let socket = host.strip_prefix("unix://").unwrap_or("/var/run/docker.sock");
        Docker::connect_with_unix(socket, 120, bollard::API_DEFAULT_VERSION).map_err(|e| e.to_string())
    }

    fn missing(group: &'static str, number: u8, names: &[String], e: &str) -> Vec<Row> {
        let why = if e.starts_with("n/a") {
            e.to_owned()
        } else {
            format!("error: {e}")
        };
        names
            .iter()
            .map(|n| Row::missing(group, number, n.clone(), why.clone()))
            .collect()
    }

    /// The bare Engine API round: create exec, start attached, read to the end, inspect
    /// until the engine records the exit (as a careful client must).
    pub(crate) async fn bare_exec(docker: &Docker, container: &str, argv: &[&str]) -> Result<(), String> {
        bare_exec_steps(docker, container, argv, false).await.map(|_| ())
    }

    /// Milliseconds from the start of a bare round to: create answered, start answered
    /// (attached), first output frame, end of output, exit recorded; and how many
    /// inspects that took.
    #[derive(Clone, Copy, Default)]
    struct Steps {
        at: [f64; 5],
        inspects: u32,
    }

    /// [`bare_exec`] with stdin attached (and closed at once) when `stdin`, timed step by
    /// step.
    async fn bare_exec_steps(docker: &Docker, container: &str, argv: &[&str], stdin: bool) -> Result<Steps, String> {
        let start = std::time::Instant::now();
        let ms = || start.elapsed().as_secs_f64() * 1000.0;
        let mut steps = Steps::default();
        let config = ExecConfig {
            cmd: Some(argv.iter().map(|s| s.to_string()).collect()),
            attach_stdin: Some(stdin),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..Default::default()
        };
        let created = docker.create_exec(container, config).await.map_err(|e| e.to_string())?;
        steps.at[0] = ms();
        let options = StartExecOptions {
            detach: false,
            tty: false,
            output_capacity: None,
        };
        match docker
            .start_exec(&created.id, Some(options))
            .await
            .map_err(|e| e.to_string())?
        {
            StartExecResults::Attached { mut output, mut input } => {
                steps.at[1] = ms();
                if stdin {
                    use tokio::io::AsyncWriteExt;
                    let _ = input.shutdown().await;
                }
                while let Some(frame) = output.next().await {
                    frame.map_err(|e| e.to_string())?;
                    if steps.at[2] == 0.0 {
                        steps.at[2] = ms();
                    }
                }
                steps.at[3] = ms();
            }
            StartExecResults::Detached => return Err("exec started detached".into()),
        }
        loop {
            let inspected = docker.inspect_exec(&created.id).await.map_err(|e| e.to_string())?;
            steps.inspects += 1;
            if inspected.running != Some(true) {
                steps.at[4] = ms();
                return match inspected.exit_code {
                    Some(0) => Ok(steps),
                    other => Err(format!("bare exec exited {other:?}")),
                };
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The median of each step of `steps`, as a note.
    fn steps_note(steps: &[Steps]) -> String {
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        };
        let at = |i: usize| median(steps.iter().map(|s| s.at[i]).collect());
        let inspects: u32 = steps.iter().map(|s| s.inspects).sum();
        format!(
            "bare API running the driver's wrapper with stdin attached, median ms from the start: create {:.1}, \
             start (attached) {:.1}, first frame (the pid line) {:.1}, end of output {:.1}, exit recorded {:.1}; \
             {:.2} inspects per run",
            at(0),
            at(1),
            at(2),
            at(3),
            at(4),
            f64::from(inspects) / steps.len().max(1) as f64
        )
    }

    /// The driver's pid-reporting wrapper (crates/driver-docker/src/process.rs `spawn`,
    /// without secrets), for the bare API to run.
    const WRAPPER_ALONE: &str = "printf 'envrt-pid:%s %s\\n' \"$$\" \"$({ readlink -n /proc/$$/fd/1; printf ' '; readlink -n /proc/$$/fd/2; } 2>/dev/null)\" >&2; exec \"$@\"";

    pub(super) async fn exec_rows(config: &Config, name: &str) -> Vec<Row> {
        let p50 = format!("{name} p50");
        let d = match open().await {
            Ok(d) => d,
            Err(e) => return missing("exec-docker", 2, &[p50], &e),
        };
        let cli = format!("docker exec {} true", d.container);
        let (l, bare, container, cli) = (&d.leased, &d.bare, d.container.as_str(), cli.as_str());
        // Two more bare calls split the driver's wrapper in two: a shell that only `exec`s
        // the command, and the driver's whole pid-reporting wrapper (two command
        // substitutions more).
        let steps = std::sync::Mutex::new(Vec::new());
        let steps_ref = &steps;
        let wrapped = ["sh", "-c", WRAPPER_ALONE, "envrt-exec", "true"];
        let measured = interleave(7, 3, config.slow_exec_rounds(), |i| async move {
            match i {
                0 => l.run(&["true"]).await,
                1 => bare_exec(bare, container, &["true"]).await,
                2 => sh(cli).await,
                3 => bare_exec(bare, container, &["sh", "-c", "exec \"$@\"", "envrt-exec", "true"]).await,
                4 => bare_exec(bare, container, &wrapped).await,
                5 => bare_exec_steps(bare, container, &["true"], true).await.map(|_| ()),
                _ => {
                    let s = bare_exec_steps(bare, container, &wrapped, true).await?;
                    steps_ref.lock().map_err(|e| e.to_string())?.push(s);
                    Ok(())
                }
            }
        })
        .await;
        let steps = steps.into_inner().unwrap_or_default();
        d.leased.close().await;
        match measured {
            Ok(m) => vec![
                Row::new("exec-docker", 2, p50, Figure::ms(m.p(0, 50.0)))
                    .baseline("bare Engine API", Figure::ms(m.p(1, 50.0)))
                    .baseline("docker exec CLI", Figure::ms(m.p(2, 50.0)))
                    .baseline("bare Engine API via sh -c exec", Figure::ms(m.p(3, 50.0)))
                    .baseline("bare Engine API via the driver's wrapper", Figure::ms(m.p(4, 50.0)))
                    .baseline("bare Engine API, stdin attached", Figure::ms(m.p(5, 50.0)))
                    .baseline("bare Engine API via the wrapper, stdin attached", Figure::ms(m.p(6, 50.0)))
                    .target(Target::All(vec![
                        Target::RatioAtMost(0, 1.05),
                        Target::RatioAtMost(1, 0.75),
                    ]))
                    .note(format!("\"via sh -c exec\": `sh -c 'exec \"$@\"' x true`; \"via the driver's wrapper\": the pid-reporting script the driver puts in front of every command (crates/driver-docker/src/process.rs), run through the bare API; \"stdin attached\": the exec also attaches stdin and the client closes it at once (what the driver did for every command until 2026-12-01). {}", steps_note(&steps))),
                Row::new("exec-docker", 2, format!("{name} p99"), Figure::ms(m.p(0, 99.0)))
                    .baseline("bare Engine API", Figure::ms(m.p(1, 99.0)))
                    .baseline("docker exec CLI", Figure::ms(m.p(2, 99.0))),
            ],
            Err(e) => missing("exec-docker", 2, &[p50], &e),
        }
    }

    pub(super) async fn duplex_rows(config: &Config, names: Vec<String>) -> Vec<Row> {
        let d = match open().await {
            Ok(d) => d,
            Err(e) => return missing("duplex", 5, &names, &e),
        };
        let bytes = config.docker_stream_bytes();
        let cli = format!(
            "docker exec {} head -c {bytes} /dev/zero | cat > /dev/null",
            d.container
        );
        let rows =
            crate::sandbox::duplex_measure(&d.leased, config, names, 0.5, bytes, Some(("docker exec CLI", &cli))).await;
        d.leased.close().await;
        rows
    }

    pub(super) async fn sync_rows(config: &Config, names: Vec<String>) -> Vec<Row> {
        let mut rows = Vec::new();
        for (mount, names) in [WorkspaceMount::Container, WorkspaceMount::Bind]
            .into_iter()
            .zip(names.chunks(4))
        {
            let d = match open_with(mount).await {
                Ok(d) => d,
                Err(e) => {
                    rows.extend(missing("sync-docker", 6, names, &e));
                    continue;
                }
            };
            let result = sync_on(config, &d, names, mount).await;
            d.leased.close().await;
            rows.extend(result.unwrap_or_else(|e| missing("sync-docker", 6, names, &e)));
        }
        rows
    }

    async fn sync_on(
        config: &Config,
        d: &Docker1,
        names: &[String],
        mount: WorkspaceMount,
    ) -> Result<Vec<Row>, String> {
        if !d.leased.runtime.supports_sync(&d.leased.lease).await {
            return Err("n/a (driver has no sync yet)".into());
        }
        let workspace = d
            .leased
            .runtime
            .realize_workspace(&d.leased.lease, &WorkspaceRequest::default())
            .await
            .map_err(|e| e.to_string())?
            .cwd;
        let scratch = Scratch::new("16g")?;
        let (small_src, big_dir) = crate::local::sync_fixtures(&scratch, config.small_files(), config.stream_bytes())?;
        let cid = d.container.as_str();
        let l = &d.leased;
        let reps = config.docker_reps();
        let host_out = scratch.join("out-dst");
        let host_cp = scratch.join("cp-dst");
        let host_tar = scratch.join("tar-dst");
        let mut rows = Vec::new();
        for (k, (kind, src, name)) in [
            (SyncKind::Dir, small_src.clone(), "small"),
            (SyncKind::File, big_dir.join("big.bin"), "big.bin"),
        ]
        .into_iter()
        .enumerate()
        {
            let in_env = format!("{workspace}/{name}");
            let cp_env = format!("{workspace}/cp-{name}");
            let tar_env = format!("{workspace}/tar");
            let clean_env = format!("docker exec {cid} rm -rf {in_env} {cp_env} {tar_env}");
            let tar_src = if kind == SyncKind::Dir {
                small_src.clone()
            } else {
                big_dir.clone()
            };
            let src_s = src.display().to_string();
            let cp_in = format!("docker cp {} {cid}:{cp_env}", q(&src));
            let mkdir = format!("docker exec {cid} mkdir -p {tar_env}");
            let tar_in = format!("tar -C {} -cf - . | docker cp - {cid}:{tar_env}", q(&tar_src));
            let contenders_in: Vec<Contender<'_>> = vec![
                Box::new(|| Box::pin(with_cleanup(l.sync_in(kind.file(&src_s, name)), &clean_env))),
                Box::new(|| Box::pin(timed_then(&cp_in, &clean_env))),
                Box::new(|| Box::pin(prepared(&mkdir, &tar_in, &clean_env))),
            ];
            let m_in = copy_medians(&contenders_in, &[], reps).await?;
            l.sync_in(kind.file(&src_s, name)).await?;
            let out_s = host_out.display().to_string();
            let (cp_out, tar_out) = (
                format!("docker cp {cid}:{in_env} {}", q(&host_cp)),
                format!(
                    "mkdir -p {0} && docker cp {cid}:{in_env} - | tar -C {0} -xf -",
                    q(&host_tar)
                ),
            );
            let contenders_out: Vec<Contender<'_>> = vec![
                Box::new(|| Box::pin(l.sync_out(kind.file(name, &out_s)))),
                Box::new(|| Box::pin(time_sh(&cp_out))),
                Box::new(|| Box::pin(time_sh(&tar_out))),
            ];
            let m_out = copy_medians(
                &contenders_out,
                &[host_out.clone(), host_cp.clone(), host_tar.clone()],
                reps,
            )
            .await?;
            sh(&clean_env).await?;
            for (j, m) in [m_in, m_out].into_iter().enumerate() {
                rows.push(
                    Row::new("sync-docker", 6, names[k * 2 + j].clone(), Figure::ms(m[0]))
                        .baseline("docker cp", Figure::ms(m[1]))
                        .baseline("bare archive stream", Figure::ms(m[2]))
                        .target(Target::RatioAtMost(1, 1.1))
                        .note(format!(
                            "host side on a private tmpfs; container side {}; median of {reps} runs",
                            match mount {
                                WorkspaceMount::Container => "in the container's own (overlay) file system",
                                WorkspaceMount::Bind =>
                                    "a bind-mounted host directory (workspace_mount = \"bind\"), the baselines \
                                     into the same container",
                            }
                        )),
                );
            }
        }
        remove(&scratch.join("src-small"));
        Ok(rows)
    }

    async fn with_cleanup(
        fut: impl std::future::Future<Output = Result<Duration, String>>,
        cleanup: &str,
    ) -> Result<Duration, String> {
        let took = fut.await?;
        sh(cleanup).await?;
        Ok(took)
    }

    async fn timed_then(script: &str, cleanup: &str) -> Result<Duration, String> {
        let took = time_sh(script).await?;
        sh(cleanup).await?;
        Ok(took)
    }

    async fn prepared(prepare: &str, script: &str, cleanup: &str) -> Result<Duration, String> {
        sh(prepare).await?;
        timed_then(script, cleanup).await
    }
}
