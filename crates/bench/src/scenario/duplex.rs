//! Duplex throughput (row 5, `duplex`): reading and writing through an open duplex channel
//! on each target that grants one (Docker, sandbox) vs a bare pipe; the Docker read row is
//! also held against `docker exec` through a pipe.

use std::time::Duration;

use crate::Config;
use crate::baseline;
use crate::facade::Leased;
use crate::measure::{Scratch, gbps, interleave, sh};
use crate::report::{Figure, Row, Target};
use crate::targets::{docker, sandbox};

/// The names of a driver's two duplex rows.
pub(crate) fn duplex_names(driver: &str, bytes: u64) -> Vec<String> {
    let mib = bytes >> 20;
    vec![
        format!("{driver} duplex read {mib} MiB"),
        format!("{driver} duplex write {mib} MiB"),
    ]
}

/// Duplex read and write throughput on `leased` vs a bare pipe (and `extra`, a shell
/// baseline for the read row); the read and write rows must reach `min_ratio` of the pipe.
pub(crate) async fn duplex_measure(
    leased: &Leased,
    config: &Config,
    names: Vec<String>,
    min_ratio: f64,
    bytes: u64,
    extra: Option<(&str, &str)>,
) -> Vec<Row> {
    let granted = leased
        .runtime
        .resolve_capabilities(&leased.lease)
        .await
        .ok()
        .flatten()
        .is_some_and(|s| s.duplex_command_stream);
    if !granted {
        return names
            .into_iter()
            .map(|n| Row::missing("duplex", 5, n, "n/a (driver grants no duplex yet)"))
            .collect();
    }
    let contenders = if extra.is_some() { 4 } else { 3 };
    let extra_script = extra.map(|e| e.1);
    let measured = interleave(contenders, 0, config.reps(), |i| async move {
        match i {
            0 => leased.duplex_read(bytes).await.map(|_| ()),
            1 => leased.duplex_write(bytes).await.map(|_| ()),
            2 => baseline::pipe(bytes).await.map(|_| ()),
            _ => sh(extra_script.unwrap_or("true")).await,
        }
    })
    .await;
    let m = match measured {
        Ok(m) => m,
        Err(e) => {
            return names
                .into_iter()
                .map(|n| Row::missing("duplex", 5, n, format!("error: {e}")))
                .collect();
        }
    };
    let rate = |i: usize| Figure::gbps(gbps(bytes, Duration::from_secs_f64(m.p(i, 50.0) / 1e3)));
    let mut read = Row::new("duplex", 5, names[0].clone(), rate(0))
        .baseline("bare pipe", rate(2))
        .floor_is(0)
        .target(Target::RatioAtLeast(0, min_ratio));
    if let Some((name, _)) = extra {
        read = read.baseline(name, rate(3));
    }
    let write = Row::new("duplex", 5, names[1].clone(), rate(1))
        .baseline("bare pipe", rate(2))
        .floor_is(0)
        .target(Target::RatioAtLeast(0, min_ratio))
        .note("64 KiB writes into `cat > /dev/null`, from opening the channel to the exit");
    vec![read, write]
}

/// Row 5 on every target that grants duplex: Docker, then the sandbox.
pub(crate) async fn rows(config: &Config) -> Vec<Row> {
    let mut rows = docker(config).await;
    rows.extend(sandbox(config).await);
    rows
}

/// Row 5 (Docker): duplex read and write vs a bare pipe.
pub(crate) async fn docker(config: &Config) -> Vec<Row> {
    docker_rows(config, duplex_names("docker", config.docker_stream_bytes())).await
}

async fn docker_rows(config: &Config, names: Vec<String>) -> Vec<Row> {
    let d = match docker::open().await {
        Ok(d) => d,
        Err(e) => return docker::missing("duplex", 5, &names, &e),
    };
    let bytes = config.docker_stream_bytes();
    let cli = format!(
        "docker exec {} head -c {bytes} /dev/zero | cat > /dev/null",
        d.container
    );
    let rows = duplex_measure(&d.leased, config, names, 0.5, bytes, Some(("docker exec CLI", &cli))).await;
    d.leased.close().await;
    rows
}

/// Row 5 (sandbox).
pub(crate) async fn sandbox(config: &Config) -> Vec<Row> {
    sandbox_rows(config, duplex_names("sandbox", config.stream_bytes())).await
}

async fn sandbox_rows(config: &Config, names: Vec<String>) -> Vec<Row> {
    let scratch = match Scratch::new("1g") {
        Ok(s) => s,
        Err(e) => return sandbox::missing("duplex", 5, &names, &e),
    };
    let (leased, driver) = match sandbox::open(&scratch.join("leases")).await {
        Ok(o) => o,
        Err(e) => return sandbox::missing("duplex", 5, &names, &e),
    };
    let rows = duplex_measure(&leased, config, names, 0.3, config.stream_bytes(), None).await;
    sandbox::close(leased, driver).await;
    rows
}
