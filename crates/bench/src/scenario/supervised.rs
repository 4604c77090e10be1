//! Executes through the in-lease supervisor (row 12, issue 26 item 1), each against the
//! bare tool of the same run and its floor:
//!
//! - `exec-supervisor-docker`: `execute(["true"])` p50 on a Docker lease with the static
//!   supervisor mounted (the driver runs it as one request on the supervisor's socket),
//!   vs the bare Engine API exec of `true` on the same container (create, start attached,
//!   read to the end, inspect until the exit is recorded), and vs the floor, `nsenter`
//!   into every namespace of the container's main process running `true` (what any host
//!   program needs at least to start a process in the container).

use crate::Config;
use crate::measure::interleave;
use crate::report::{Figure, Row, Target};
use crate::targets::docker::{self, bare_exec};

/// The row number.
pub(crate) const NUMBER: u8 = 12;
/// Docker execute through the supervisor.
pub(crate) const DOCKER: &str = "exec-supervisor-docker";

const DOCKER_NOTE: &str = "p50 of interleaved rounds after warm-up (the lease's first execute starts its supervisor, in the warm-up): the driver's `execute([\"true\"])` on a lease whose container has the static supervisor (`metadata.supervisor = true`); \"bare Engine API\": create exec, start attached, read to the end, inspect until the exit is recorded, through bollard on the same container; floor: `nsenter -t PID -a true` from the host, PID the container's main process (every namespace of the container, its cgroup included)";

/// `nsenter -t {pid} -a true`, failing unless it exits 0.
async fn nsenter(pid: &str) -> Result<(), String> {
    let status = tokio::process::Command::new("nsenter")
        .args(["-t", pid, "-a", "true"])
        .stdin(std::process::Stdio::null())
        .status()
        .await
        .map_err(|e| format!("nsenter: {e}"))?;
    status
        .success()
        .then_some(())
        .ok_or_else(|| format!("nsenter exited with {status}"))
}

/// Row 12, Docker: execute `true` through the supervisor.
pub(crate) async fn docker_rows(config: &Config) -> Vec<Row> {
    let p50 = "docker execute `true` through the supervisor p50".to_owned();
    let d = match docker::open_sessions().await {
        Ok(d) => d,
        Err(e) => return docker::missing(DOCKER, NUMBER, &[p50], &e),
    };
    let pid = match d.bare.inspect_container(&d.container, None).await {
        Ok(inspected) => inspected.state.and_then(|s| s.pid).map(|p| p.to_string()),
        Err(e) => {
            d.leased.close().await;
            return docker::missing(DOCKER, NUMBER, &[p50], &e.to_string());
        }
    };
    let Some(pid) = pid else {
        d.leased.close().await;
        return docker::missing(DOCKER, NUMBER, &[p50], "the container has no main process");
    };
    let (l, bare, container, pid) = (&d.leased, &d.bare, d.container.as_str(), pid.as_str());
    let measured = interleave(3, 5, config.exec_rounds(), |i| async move {
        match i {
            0 => l.run(&["true"]).await,
            1 => bare_exec(bare, container, &["true"]).await,
            _ => nsenter(pid).await,
        }
    })
    .await;
    d.leased.close().await;
    match measured {
        Ok(m) => vec![
            Row::new(DOCKER, NUMBER, p50, Figure::ms(m.p(0, 50.0)))
                .baseline("bare Engine API", Figure::ms(m.p(1, 50.0)))
                .baseline("nsenter (floor)", Figure::ms(m.p(2, 50.0)))
                .target(Target::All(vec![
                    Target::RatioAtMost(0, 0.05),
                    Target::RatioAtMost(1, 1.0),
                ]))
                .note(DOCKER_NOTE),
            Row::new(
                DOCKER,
                NUMBER,
                "docker execute `true` through the supervisor p99",
                Figure::ms(m.p(0, 99.0)),
            )
            .baseline("bare Engine API", Figure::ms(m.p(1, 99.0)))
            .baseline("nsenter (floor)", Figure::ms(m.p(2, 99.0))),
        ],
        Err(e) => docker::missing(DOCKER, NUMBER, &[p50], &e),
    }
}
