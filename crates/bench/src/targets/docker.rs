//! The Docker target: a lease on the test image through the facade, its container, and the
//! bare Engine API client (bollard) on the same container that its baselines use.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use envrt_driver_docker::{DockerConfig, DockerDriver, WorkspaceMount};
use envrt_runtime_core::JsonMap;
use futures::StreamExt;

use crate::facade::Leased;
use crate::measure::{sh, time_sh};
use crate::report::Row;

/// The image the Docker rows run in (`cargo xtask docker-image` builds it).
pub(crate) const IMAGE: &str = "envrt-test:latest";

/// The Docker lease, its container, the bare client, and the workspace path.
pub(crate) struct Docker1 {
    pub(crate) leased: Leased,
    pub(crate) container: String,
    pub(crate) bare: Docker,
}

pub(crate) async fn open() -> Result<Docker1, String> {
    open_with(WorkspaceMount::Container).await
}

pub(crate) async fn open_with(workspace_mount: WorkspaceMount) -> Result<Docker1, String> {
    let config = DockerConfig {
        workspace_mount,
        ..DockerConfig::default()
    };
    open_config(config, false, IMAGE).await
}

/// A lease on the default driver whose container runs `image` (the agent rows use the
/// Debian image of `scripts/docker-debian-image.sh`).
pub(crate) async fn open_image(image: &str) -> Result<Docker1, String> {
    open_config(DockerConfig::default(), false, image).await
}

/// The static supervisor (`envrt-agent` built with `+crt-static` for
/// `x86_64-unknown-linux-gnu`, as `cargo xtask bench` builds it for the `processes` rows):
/// `{target dir}/x86_64-unknown-linux-gnu/release/envrt-agent` of this binary's target
/// directory, when it is there.
pub(crate) fn static_agent() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let target = exe.parent()?.parent()?;
    let path = target.join("x86_64-unknown-linux-gnu/release/envrt-agent");
    path.is_file().then_some(path)
}

/// A lease whose container has the supervisor mounted, so it grants persistent process
/// sessions: the driver gets [`static_agent`] as `DockerConfig::agent` when it is at
/// hand, else finds one as it always does; `n/a` with the driver's reason when the
/// supervisor it has is not static (or the engine is not on this host).
pub(crate) async fn open_sessions() -> Result<Docker1, String> {
    let config = DockerConfig {
        agent: static_agent(),
        ..DockerConfig::default()
    };
    open_config(config, true, IMAGE).await
}

/// A lease on a driver with `config`; with `sessions`, `n/a` unless the driver serves
/// process sessions.
async fn open_config(config: DockerConfig, sessions: bool, image: &str) -> Result<Docker1, String> {
    let driver = DockerDriver::connect(config)
        .await
        .map_err(|e| format!("n/a (no engine): {e}"))?;
    if sessions && let Err(why) = driver.process_sessions() {
        return Err(format!("n/a (no static supervisor: {why})"));
    }
    let mut config = JsonMap::new();
    config.insert("image".into(), image.into());
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

pub(crate) fn missing(group: &'static str, number: u8, names: &[String], e: &str) -> Vec<Row> {
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

/// The floor of a Docker execute: `nsenter` into every namespace of the container's init
/// (mount, UTS, IPC, network, PID, cgroup) running `argv` there — the cost of starting a
/// process in the container without the engine. Returns nsenter's arguments.
pub(crate) async fn nsenter_args(docker: &Docker, container: &str, argv: &[&str]) -> Result<Vec<String>, String> {
    let inspected = docker
        .inspect_container(container, None)
        .await
        .map_err(|e| format!("inspecting {container}: {e}"))?;
    let pid = inspected
        .state
        .and_then(|s| s.pid)
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("container {container} has no running init"))?;
    let mut args: Vec<String> = ["-t", &pid.to_string(), "-m", "-u", "-i", "-n", "-p", "-C", "--"]
        .map(String::from)
        .into();
    args.extend(argv.iter().map(|a| a.to_string()));
    Ok(args)
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
pub(crate) struct Steps {
    at: [f64; 5],
    inspects: u32,
}

/// [`bare_exec`] with stdin attached (and closed at once) when `stdin`, timed step by
/// step.
pub(crate) async fn bare_exec_steps(
    docker: &Docker,
    container: &str,
    argv: &[&str],
    stdin: bool,
) -> Result<Steps, String> {
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
pub(crate) fn steps_note(steps: &[Steps]) -> String {
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

pub(crate) async fn with_cleanup(
    fut: impl std::future::Future<Output = Result<Duration, String>>,
    cleanup: &str,
) -> Result<Duration, String> {
    let took = fut.await?;
    sh(cleanup).await?;
    Ok(took)
}

pub(crate) async fn timed_then(script: &str, cleanup: &str) -> Result<Duration, String> {
    let took = time_sh(script).await?;
    sh(cleanup).await?;
    Ok(took)
}

pub(crate) async fn prepared(prepare: &str, script: &str, cleanup: &str) -> Result<Duration, String> {
    sh(prepare).await?;
    timed_then(script, cleanup).await
}
