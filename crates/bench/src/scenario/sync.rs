//! Sync (row 6): a tree of small files and one big file copied in and out through the
//! facade on each target that syncs (local, Docker with the workspace in the container and
//! bind-mounted, SSH), vs the copy a user would otherwise run (`cp -a`, `tar | tar`,
//! `docker cp`, the bare archive stream, `tar | ssh tar -x`).

use std::path::PathBuf;
use std::time::Duration;

use envrt_driver_docker::WorkspaceMount;
use envrt_runtime_core::{SyncFile, WorkspaceRequest};

use crate::Config;
use crate::baseline::{self, remove};
use crate::measure::{Scratch, median, q, sh, time_sh};
use crate::report::{Figure, Row, Target};
use crate::targets::docker::{self, Docker1, prepared, timed_then, with_cleanup};
use crate::targets::local::Local;
use crate::targets::ssh::{self, Ssh1};

/// One copy contender: how to run it once (into a fresh target), timed.
pub(crate) type Contender<'a> =
    Box<dyn Fn() -> std::pin::Pin<Box<dyn Future<Output = Result<Duration, String>> + 'a>> + 'a>;

/// Runs every contender `reps` times, rotating the order, clearing `cleanup` after each;
/// returns each contender's median time in ms.
pub(crate) async fn copy_medians(
    contenders: &[Contender<'_>],
    cleanup: &[PathBuf],
    reps: usize,
) -> Result<Vec<f64>, String> {
    let mut times = vec![Vec::new(); contenders.len()];
    for rep in 0..reps {
        for k in 0..contenders.len() {
            let i = (k + rep) % contenders.len();
            sync_fs();
            let took = contenders[i]().await?;
            times[i].push(took.as_secs_f64() * 1e3);
            for path in cleanup {
                remove(path);
            }
        }
    }
    Ok(times.iter_mut().map(|t| median(t)).collect())
}

fn sync_fs() {
    let _ = std::process::Command::new("sync").status();
}

/// Row 6 (local): 10,000 small files and one big file, in and out, vs `cp -a` and `tar | tar`.
pub(crate) async fn local(config: &Config) -> Vec<Row> {
    let files = config.small_files();
    let big = config.stream_bytes();
    let names = [
        format!("local sync in {files} small files"),
        format!("local sync out {files} small files"),
        format!("local sync in one {} MiB file", big >> 20),
        format!("local sync out one {} MiB file", big >> 20),
    ];
    match local_sync(config, files, big, &names).await {
        Ok(rows) => rows,
        Err(e) => {
            let why = format!("error: {e}");
            names
                .iter()
                .map(|n| Row::missing("sync-local", 6, n, why.clone()))
                .collect()
        }
    }
}

async fn local_sync(config: &Config, files: usize, big: u64, names: &[String; 4]) -> Result<Vec<Row>, String> {
    let scratch = Scratch::new("16g")?;
    let local = Local::open(Some(scratch.join("leases"))).await?;
    let result = local_sync_on(config, &scratch, &local, files, big, names).await;
    local.leased.close().await;
    result
}

async fn local_sync_on(
    config: &Config,
    scratch: &Scratch,
    local: &Local,
    files: usize,
    big: u64,
    names: &[String; 4],
) -> Result<Vec<Row>, String> {
    let (small_src, big_dir) = sync_fixtures(scratch, files, big)?;
    let workspace = local.workspace(&local.leased.lease)?;
    let l = &local.leased;
    let cp_dst = scratch.join("cp-dst");
    let tar_dst = scratch.join("tar-dst");
    let out_dst = scratch.join("out-dst");
    let reps = config.reps();
    let mut rows = Vec::new();
    let tmpfs_note = if scratch.is_tmpfs() {
        "on a private tmpfs"
    } else {
        "on a plain temp dir (mounting a tmpfs failed)"
    };
    for (k, (src, entry, ws_name)) in [
        (&small_src, SyncKind::Dir, "small"),
        (&big_dir.join("big.bin"), SyncKind::File, "big.bin"),
    ]
    .into_iter()
    .enumerate()
    {
        let in_ws = workspace.join(ws_name);
        let tar_src: PathBuf = if entry == SyncKind::Dir {
            src.clone()
        } else {
            big_dir.clone()
        };
        let contenders_in: Vec<Contender<'_>> = vec![
            Box::new(|| Box::pin(l.sync_in(entry.file(&src.display().to_string(), ws_name)))),
            Box::new(|| Box::pin(baseline::cp_a(src, &cp_dst))),
            Box::new(|| Box::pin(baseline::tar_tar(&tar_src, &tar_dst))),
        ];
        let cleanup = [in_ws.clone(), cp_dst.clone(), tar_dst.clone()];
        let m_in = copy_medians(&contenders_in, &cleanup, reps).await?;
        // Put the tree in the workspace once more for the way out.
        l.sync_in(entry.file(&src.display().to_string(), ws_name)).await?;
        let tar_out_src: PathBuf = if entry == SyncKind::Dir {
            in_ws.clone()
        } else {
            workspace.clone()
        };
        let contenders_out: Vec<Contender<'_>> = vec![
            Box::new(|| Box::pin(l.sync_out(entry.file(ws_name, &out_dst.display().to_string())))),
            Box::new(|| Box::pin(baseline::cp_a(&in_ws, &cp_dst))),
            Box::new(|| Box::pin(baseline::tar_tar(&tar_out_src, &tar_dst))),
        ];
        let cleanup = [out_dst.clone(), cp_dst.clone(), tar_dst.clone()];
        let m_out = copy_medians(&contenders_out, &cleanup, reps).await?;
        remove(&in_ws);
        let limit = if entry == SyncKind::Dir { 1.5 } else { 1.2 };
        for (j, m) in [m_in, m_out].into_iter().enumerate() {
            let note = if entry == SyncKind::File {
                "tar | tar moves the workspace's only file, the same bytes".to_string()
            } else {
                format!("1 KiB files in directories of 100, {tmpfs_note}; median of {reps} runs")
            };
            rows.push(
                Row::new("sync-local", 6, names[k * 2 + j].clone(), Figure::ms(m[0]))
                    .baseline("cp -a", Figure::ms(m[1]))
                    .baseline("tar | tar", Figure::ms(m[2]))
                    .floor_is(0)
                    .target(Target::RatioAtMost(0, limit))
                    .note(note),
            );
        }
    }
    Ok(rows)
}

/// Directory tree or one file.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum SyncKind {
    Dir,
    File,
}

impl SyncKind {
    pub(crate) fn file(self, source: &str, target: &str) -> SyncFile {
        match self {
            SyncKind::Dir => SyncFile::directory(source, target),
            SyncKind::File => SyncFile::file(source, target),
        }
    }
}

/// The small-file tree and the big file of the sync rows: `(small tree, dir of big.bin)`.
pub(crate) fn sync_fixtures(scratch: &Scratch, files: usize, big: u64) -> Result<(PathBuf, PathBuf), String> {
    let small_src = scratch.join("src-small");
    baseline::make_small_tree(&small_src, files)?;
    let big_dir = scratch.join("src-big");
    std::fs::create_dir_all(&big_dir).map_err(|e| e.to_string())?;
    baseline::make_big_file(&big_dir.join("big.bin"), big)?;
    Ok((small_src, big_dir))
}

/// Row 6 (Docker): small files and one big file, in and out, vs `docker cp` and the bare
/// archive stream.
pub(crate) async fn docker(config: &Config) -> Vec<Row> {
    docker_rows(config, docker_names(config)).await
}

/// The rows with the workspace in the container's own file system, then the same rows
/// with it on a bind-mounted host directory (`WorkspaceMount::Bind`).
fn docker_names(config: &Config) -> Vec<String> {
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

async fn docker_rows(config: &Config, names: Vec<String>) -> Vec<Row> {
    let mut rows = Vec::new();
    for (mount, names) in [WorkspaceMount::Container, WorkspaceMount::Bind]
        .into_iter()
        .zip(names.chunks(4))
    {
        let d = match docker::open_with(mount).await {
            Ok(d) => d,
            Err(e) => {
                rows.extend(docker::missing("sync-docker", 6, names, &e));
                continue;
            }
        };
        let result = docker_sync_on(config, &d, names, mount).await;
        d.leased.close().await;
        rows.extend(result.unwrap_or_else(|e| docker::missing("sync-docker", 6, names, &e)));
    }
    rows
}

async fn docker_sync_on(
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
    let (small_src, big_dir) = sync_fixtures(&scratch, config.small_files(), config.stream_bytes())?;
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
                    .no_floor("cp -a into the container's file system is not measured yet")
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

/// Row 6 (SSH): sync in of small files vs `tar | ssh tar -x`.
pub(crate) async fn ssh(config: &Config) -> Vec<Row> {
    let name = format!("ssh sync in {} small files", config.small_files());
    ssh_rows(config, name).await
}

async fn ssh_rows(config: &Config, name: String) -> Vec<Row> {
    let d = match ssh::open().await {
        Ok(d) => d,
        Err(e) => return ssh::missing("sync-ssh", &[name], &e),
    };
    let rows = ssh_sync_on(config, &d, &name).await;
    d.close().await;
    rows.unwrap_or_else(|e| ssh::missing("sync-ssh", &[name], &e))
}

async fn ssh_sync_on(config: &Config, d: &Ssh1, name: &str) -> Result<Vec<Row>, String> {
    let workspace = d
        .leased
        .runtime
        .realize_workspace(&d.leased.lease, &WorkspaceRequest::default())
        .await
        .map_err(|e| e.to_string())?
        .cwd;
    let scratch = Scratch::new("4g")?;
    let (small_src, _big) = sync_fixtures(&scratch, config.small_files(), 1 << 20)?;
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
            .floor_is(0)
            .target(Target::RatioAtMost(0, 1.1))
            .note(format!(
                "host side on a private tmpfs; sshd on 127.0.0.1; median of {reps} runs"
            )),
    ])
}
