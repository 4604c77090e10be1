//! Rows of lease fork (11): a lease holding 256 MiB in 2,000 files forked into 8 copies,
//! against 8 `cp -a` of its workspace (local) and 8 `docker commit` + `create` + `start`
//! of its container (Docker), measured in the same run. Only the copying is timed; the
//! copies are removed after each timed part.

use std::time::{Duration, Instant};

use envrt_runtime_core::LeaseStatus;

use crate::Config;
use crate::facade::Leased;
use crate::measure::{interleave_reported, sh};
use crate::report::{Figure, Row, Target};

/// The row number of the fork rows.
pub(crate) const NUMBER: u8 = 11;
/// The group keys.
pub(crate) const LOCAL: &str = "fork-local";
pub(crate) const DOCKER: &str = "fork-docker";
/// Copies per fork.
const COPIES: usize = 8;
/// Files, and bytes in all, of the source workspace.
const FILES: usize = 2000;
const BYTES: usize = 256 << 20;

/// The script that fills `dir` with [`FILES`] files of [`BYTES`] in all (incompressible
/// enough: each file's head differs).
fn fill_script(dir: &str) -> String {
    let size = BYTES / FILES;
    format!(
        "mkdir -p {dir}/d && head -c {size} /dev/urandom > {dir}/seed && i=0; while [ $i -lt {FILES} ]; do \
         {{ echo $i; cat {dir}/seed; }} > {dir}/d/f$i; i=$((i+1)); done; rm {dir}/seed"
    )
}

/// A number that differs between rounds (names the baseline's images and containers).
fn start_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// One timed fork of `leased`'s lease into [`COPIES`] copies, released untimed.
async fn fork_once(leased: &Leased) -> Result<Duration, String> {
    let start = Instant::now();
    let copies = leased
        .runtime
        .fork_lease(&leased.lease, COPIES)
        .await
        .map_err(|e| e.to_string())?;
    let took = start.elapsed();
    for copy in copies {
        leased
            .runtime
            .release_lease(&copy.id, LeaseStatus::Released)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(took)
}

/// Row 11, local: fork into 8 copies vs 8 `cp -a` of the workspace.
pub(crate) async fn local(config: &Config) -> Vec<Row> {
    let name = format!("local fork of 256 MiB in {FILES} files into {COPIES} copies");
    let root = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(e) => return vec![Row::missing(LOCAL, NUMBER, name, e.to_string())],
    };
    let local = match crate::targets::local::Local::open(Some(root.path().join("ws"))).await {
        Ok(l) => l,
        Err(e) => return vec![Row::missing(LOCAL, NUMBER, name, e)],
    };
    let measured = async {
        let source = local.workspace(&local.leased.lease)?;
        let source = source.to_str().ok_or("a workspace path that is not UTF-8")?.to_owned();
        sh(&fill_script(&source)).await?;
        let copies = root.path().join("cp");
        let copies = copies.to_str().ok_or("a path that is not UTF-8")?.to_owned();
        let leased = &local.leased;
        interleave_reported(2, 0, config.reps(), |i| {
            let (source, copies) = (source.clone(), copies.clone());
            async move {
                match i {
                    0 => fork_once(leased).await,
                    _ => {
                        let start = Instant::now();
                        for k in 0..COPIES {
                            sh(&format!("mkdir -p {copies} && cp -a {source} {copies}/{k}")).await?;
                        }
                        let took = start.elapsed();
                        sh(&format!("rm -rf {copies}")).await?;
                        Ok(took)
                    }
                }
            }
        })
        .await
    }
    .await;
    local.leased.close().await;
    match measured {
        Ok(m) => vec![
            Row::new(LOCAL, NUMBER, name, Figure::ms(m.p(0, 50.0)))
                .baseline(format!("{COPIES} × cp -a"), Figure::ms(m.p(1, 50.0)))
                .target(Target::RatioAtMost(0, 1.5))
                .note("median of the runs; copies released untimed; reflinks where the file system shares blocks"),
        ],
        Err(e) => vec![Row::missing(LOCAL, NUMBER, name, format!("error: {e}"))],
    }
}

/// Row 11, Docker: fork into 8 copies (one commit) vs 8 × `docker commit` + `create` +
/// `start` of the same container.
pub(crate) async fn docker(config: &Config) -> Vec<Row> {
    let name = format!("docker fork of 256 MiB in {FILES} files into {COPIES} copies");
    let docker = match crate::targets::docker::open().await {
        Ok(d) => d,
        Err(e) => return vec![Row::missing(DOCKER, NUMBER, name, e)],
    };
    let measured = async {
        docker.leased.run(&["sh", "-c", &fill_script("/workspace/big")]).await?;
        let container = docker.container.clone();
        let leased = &docker.leased;
        interleave_reported(2, 0, config.reps(), |i| {
            let container = container.clone();
            async move {
                match i {
                    0 => fork_once(leased).await,
                    _ => {
                        let run = format!("{}-{:x}", std::process::id(), start_nanos());
                        let tag = format!("envrt-bench-fork:{run}");
                        let start = Instant::now();
                        let mut made = Vec::new();
                        let mut outcome = Ok(());
                        for k in 0..COPIES {
                            let image = format!("{tag}-{k}");
                            let name = format!("envrt-bench-fork-{run}-{k}");
                            made.push((image.clone(), name.clone()));
                            outcome = sh(&format!(
                                "docker commit {container} {image} && docker create --name {name} {image} sleep infinity \
                                 && docker start {name}"
                            ))
                            .await;
                            if outcome.is_err() {
                                break;
                            }
                        }
                        let took = start.elapsed();
                        for (image, name) in made {
                            let _ = sh(&format!("docker rm -f {name}; docker rmi -f {image}")).await;
                        }
                        outcome.map(|()| took)
                    }
                }
            }
        })
        .await
    }
    .await;
    docker.leased.close().await;
    match measured {
        Ok(m) => vec![
            Row::new(DOCKER, NUMBER, name, Figure::ms(m.p(0, 50.0)))
                .baseline(
                    format!("{COPIES} × docker commit+create+start"),
                    Figure::ms(m.p(1, 50.0)),
                )
                .target(Target::RatioAtMost(0, 1.0))
                .note("median of the runs; copies removed untimed; the baseline commits once per copy"),
        ],
        Err(e) => vec![Row::missing(DOCKER, NUMBER, name, format!("error: {e}"))],
    }
}
