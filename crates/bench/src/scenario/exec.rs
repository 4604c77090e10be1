//! Execute latency (rows 1–3): `true` through the facade on each target, interleaved with
//! the bare tools a user would otherwise reach for on the same machine:
//!
//! - local (row 1, `exec-local`): a bare tokio spawn, and the driver without cgroups;
//! - Docker (row 2, `exec-docker`): the bare Engine API on the same container, `docker
//!   exec`, and the driver's wrapper split in steps;
//! - sandbox (row 3, `exec-sandbox`): a bare `bwrap` with the worker's flags, also under
//!   the worker's init, and the local driver;
//! - SSH (row 2, `exec-ssh`): `ssh` over the driver's open master and a fresh `ssh`.

use crate::Config;
use crate::baseline;
use crate::measure::{Scratch, interleave, sh};
use crate::report::{Figure, Row, Target};
use crate::targets::docker::{self, bare_exec, bare_exec_steps, steps_note};
use crate::targets::local::Local;
use crate::targets::sandbox::{self, INIT_PATH, bare_bwrap, bwrap_args, worker_path};
use crate::targets::ssh;

const EXEC: &str = "exec-local";

/// The floor of a local execute (`baseline::posix_spawn`).
const SPAWN_FLOOR: &str = "posix_spawn+wait from Rust";

/// The floor of a Docker execute (`docker::nsenter_args`).
const NSENTER_FLOOR: &str = "nsenter into the container";

/// Row 1: `true` through the facade and the local driver vs a bare tokio spawn.
pub(crate) async fn local(config: &Config) -> Vec<Row> {
    let name = "local execute `true`";
    let local = match Local::open(None).await {
        Ok(l) => l,
        Err(e) => return vec![Row::missing(EXEC, 1, format!("{name} p50"), e)],
    };
    // The same driver without per-command cgroups, so that the cost of containment shows
    // in the same run (the driver's default is cgroups on wherever they are writable).
    let uncontained = match Local::open_contained(None, false).await {
        Ok(l) => l,
        Err(e) => return vec![Row::missing(EXEC, 1, format!("{name} p50"), e)],
    };
    let l = &local.leased;
    let u = &uncontained.leased;
    let measured = interleave(4, 30, config.exec_rounds(), |i| async move {
        match i {
            0 => l.run(&["true"]).await,
            1 => baseline::spawn("true", &[]).await,
            2 => u.run(&["true"]).await,
            _ => baseline::posix_spawn("true", &[]),
        }
    })
    .await;
    local.leased.close().await;
    uncontained.leased.close().await;
    let m = match measured {
        Ok(m) => m,
        Err(e) => return vec![Row::missing(EXEC, 1, format!("{name} p50"), format!("error: {e}"))],
    };
    vec![
        Row::new(EXEC, 1, format!("{name} p50"), Figure::ms(m.p(0, 50.0)))
            .baseline("bare tokio spawn", Figure::ms(m.p(1, 50.0)))
            .baseline("local driver without cgroups", Figure::ms(m.p(2, 50.0)))
            .floor(SPAWN_FLOOR, Figure::ms(m.p(3, 50.0)))
            .target(Target::RatioAtMost(0, 1.10))
            .note("\"without cgroups\": `LocalConfig { cgroups: false }`, process groups only"),
        Row::new(EXEC, 1, format!("{name} p99"), Figure::ms(m.p(0, 99.0)))
            .baseline("bare tokio spawn", Figure::ms(m.p(1, 99.0)))
            .baseline("local driver without cgroups", Figure::ms(m.p(2, 99.0)))
            .floor(SPAWN_FLOOR, Figure::ms(m.p(3, 99.0))),
    ]
}

/// Row 2: `true` through the facade and the Docker driver vs `docker exec` and the bare
/// Engine API.
pub(crate) async fn docker(config: &Config) -> Vec<Row> {
    docker_rows(config, "docker execute `true`").await
}

/// The driver's pid-reporting wrapper (crates/driver-docker/src/process.rs `spawn`,
/// without secrets), for the bare API to run.
const WRAPPER_ALONE: &str = "printf 'envrt-pid:%s %s\\n' \"$$\" \"$({ readlink -n /proc/$$/fd/1; printf ' '; readlink -n /proc/$$/fd/2; } 2>/dev/null)\" >&2; exec \"$@\"";

async fn docker_rows(config: &Config, name: &str) -> Vec<Row> {
    let p50 = format!("{name} p50");
    let d = match docker::open().await {
        Ok(d) => d,
        Err(e) => return docker::missing("exec-docker", 2, &[p50], &e),
    };
    let cli = format!("docker exec {} true", d.container);
    let (l, bare, container, cli) = (&d.leased, &d.bare, d.container.as_str(), cli.as_str());
    // Two more bare calls split the driver's wrapper in two: a shell that only `exec`s
    // the command, and the driver's whole pid-reporting wrapper (two command
    // substitutions more).
    let steps = std::sync::Mutex::new(Vec::new());
    let steps_ref = &steps;
    let wrapped = ["sh", "-c", WRAPPER_ALONE, "envrt-exec", "true"];
    let nsenter = match docker::nsenter_args(bare, container, &["true"]).await {
        Ok(args) => args,
        Err(e) => {
            d.leased.close().await;
            return docker::missing("exec-docker", 2, &[p50], &e);
        }
    };
    let nsenter: Vec<&str> = nsenter.iter().map(String::as_str).collect();
    let nsenter = &nsenter;
    let measured = interleave(8, 3, config.slow_exec_rounds(), |i| async move {
        match i {
            0 => l.run(&["true"]).await,
            1 => bare_exec(bare, container, &["true"]).await,
            2 => sh(cli).await,
            3 => bare_exec(bare, container, &["sh", "-c", "exec \"$@\"", "envrt-exec", "true"]).await,
            4 => bare_exec(bare, container, &wrapped).await,
            5 => bare_exec_steps(bare, container, &["true"], true).await.map(|_| ()),
            7 => baseline::posix_spawn("nsenter", nsenter),
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
                .floor(NSENTER_FLOOR, Figure::ms(m.p(7, 50.0)))
                .target(Target::All(vec![
                    Target::RatioAtMost(0, 1.05),
                    Target::RatioAtMost(1, 0.75),
                ]))
                .note(format!("\"via sh -c exec\": `sh -c 'exec \"$@\"' x true`; \"via the driver's wrapper\": the pid-reporting script the driver puts in front of every command (crates/driver-docker/src/process.rs), run through the bare API; \"stdin attached\": the exec also attaches stdin and the client closes it at once (what the driver did for every command until 2026-12-01). {}", steps_note(&steps))),
            Row::new("exec-docker", 2, format!("{name} p99"), Figure::ms(m.p(0, 99.0)))
                .baseline("bare Engine API", Figure::ms(m.p(1, 99.0)))
                .baseline("docker exec CLI", Figure::ms(m.p(2, 99.0)))
                .floor(NSENTER_FLOOR, Figure::ms(m.p(7, 99.0))),
        ],
        Err(e) => docker::missing("exec-docker", 2, &[p50], &e),
    }
}

/// Row 3: `true` through the facade, the sandbox driver and the reference worker vs a bare
/// `bwrap` with the worker's flags, and vs the local driver.
pub(crate) async fn sandbox(config: &Config) -> Vec<Row> {
    sandbox_rows(config, "sandbox execute `true`").await
}

async fn sandbox_rows(config: &Config, name: &str) -> Vec<Row> {
    let p50 = format!("{name} p50");
    let scratch = match Scratch::new("1g") {
        Ok(s) => s,
        Err(e) => return sandbox::missing("exec-sandbox", 3, &[p50], &e),
    };
    let (leased, driver) = match sandbox::open(&scratch.join("leases")).await {
        Ok(o) => o,
        Err(e) => return sandbox::missing("exec-sandbox", 3, &[p50], &e),
    };
    let local = match Local::open(None).await {
        Ok(l) => l,
        Err(e) => {
            sandbox::close(leased, driver).await;
            return sandbox::missing("exec-sandbox", 3, &[p50], &e);
        }
    };
    let bare_dir = scratch.join("bare");
    let _ = std::fs::create_dir_all(&bare_dir);
    let args = match worker_path() {
        Ok(worker) => bwrap_args(&bare_dir, &worker),
        Err(e) => return sandbox::missing("exec-sandbox", 3, &[p50], &e),
    };
    let (s, l, args) = (&leased, &local.leased, &args);
    // The worker's init reports the status on an inherited descriptor; 1 (the captured
    // stdout) stands in for the worker's status pipe.
    let via_init = [INIT_PATH, "--sandbox-init", "1", "--", "true"];
    let via_init = &via_init;
    let measured = interleave(4, 20, config.exec_rounds() / 2, |i| async move {
        match i {
            0 => s.run(&["true"]).await,
            1 => bare_bwrap(args, &["true"], None).await,
            2 => l.run(&["true"]).await,
            _ => bare_bwrap(args, via_init, None).await,
        }
    })
    .await;
    local.leased.close().await;
    sandbox::close(leased, driver).await;
    match measured {
        Ok(m) => vec![
            Row::new("exec-sandbox", 3, p50, Figure::ms(m.p(0, 50.0)))
                .baseline("bare bwrap", Figure::ms(m.p(1, 50.0)))
                .baseline("local driver", Figure::ms(m.p(2, 50.0)))
                .baseline("bare bwrap via worker init", Figure::ms(m.p(3, 50.0)))
                .floor_is(0)
                .target(Target::PlusAtMost(0, 1.5))
                .note("\"via worker init\": the same bwrap running `true` under the worker binary's init role, as the worker does"),
            Row::new("exec-sandbox", 3, format!("{name} p99"), Figure::ms(m.p(0, 99.0)))
                .baseline("bare bwrap", Figure::ms(m.p(1, 99.0)))
                .baseline("local driver", Figure::ms(m.p(2, 99.0)))
                .floor_is(0),
        ],
        Err(e) => sandbox::missing("exec-sandbox", 3, &[p50], &e),
    }
}

/// Row 2 (SSH): `true` through the facade vs `ssh` over the open master and a fresh `ssh`.
pub(crate) async fn ssh(config: &Config) -> Vec<Row> {
    ssh_rows(config, "ssh execute `true` p50".to_string()).await
}

async fn ssh_rows(config: &Config, name: String) -> Vec<Row> {
    let d = match ssh::open().await {
        Ok(d) => d,
        Err(e) => return ssh::missing("exec-ssh", &[name], &e),
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
                .floor_is(0)
                .target(Target::All(vec![
                    Target::RatioAtMost(0, 1.0),
                    Target::RatioAtMost(1, 0.2),
                ]))
                .note("sshd on 127.0.0.1 (scripts/start-sshd.sh); the master is the driver's own"),
        ])
    }
    .await;
    d.close().await;
    rows.unwrap_or_else(|e| ssh::missing("exec-ssh", &[name], &e))
}
